"""``unlearnsim run SCENARIO --stream kafka``: build the federation, consume, summarise.

``server/commands/run.py`` calls :func:`run_kafka` when ``--stream kafka`` is given (or the
scenario says ``stream.source: kafka``); its options are in :mod:`server.kafka.options`.
"""

from __future__ import annotations

import argparse
import json
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from server.kafka.batcher import BatchPolicy
from server.kafka.consumer import ConsumerConfig, DeletionConsumer, EventHook
from server.kafka.options import topics_from
from simulator.errors import ConfigError
from simulator.runner.setup import Federation
from simulator.scenario import Scenario


def run_kafka(
    args: argparse.Namespace,
    scenario: Scenario,
    console: Console,
    on_event: Sequence[EventHook] = (),
) -> int:
    """Build the federation, consume the requests topic, write a summary; exit code 0."""
    from simulator.runner.loop import evaluate
    from simulator.runner.setup import build_federation

    if not args.bootstrap:
        raise ConfigError("--stream kafka needs --bootstrap HOST:PORT", "--bootstrap")
    scenario = scenario.model_copy(
        update={"stream": scenario.stream.model_copy(update={"source": "scenario"})}
    )
    out = Path(args.output or scenario.output_dir)
    config = ConsumerConfig(
        bootstrap=args.bootstrap,
        state_dir=Path(args.state_dir) if args.state_dir else out / "kafka-state",
        topics=topics_from(args),
        group_id=args.group,
        batch=BatchPolicy(max_requests=args.max_batch_requests, max_wait=args.max_wait),
        idle_timeout=args.idle_timeout,
        fsync=not args.no_fsync,
        events_path=out / "kafka_events.jsonl",
    )
    with _blas_limit(args.blas_threads):
        with console.status(f"[bold]{scenario.name}[/]: loading data and training"):
            fed = build_federation(scenario)
        hooks = [*on_event, _announce(console, config)]
        consumer = DeletionConsumer(fed, config, on_event=hooks)
        with _stop_on_signals(consumer):
            summary = consumer.run()
        summary["metrics"] = evaluate(fed, consumer.state.last_tick, consumer.state.forgotten)
    (out / "kafka_summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    _print_summary(console, summary, out)
    return 0


def _announce(console: Console, config: ConsumerConfig) -> EventHook:
    def hook(event: dict[str, Any], fed: Federation) -> None:
        if event["event"] == "consumer_start":
            how = "resumed from checkpoint" if event["resumed"] else "fresh state"
            console.print(
                f"consuming {config.topics.requests} at {config.bootstrap} ({how}, "
                f"{event['ledger']} requests answered so far)",
                highlight=False,
            )

    return hook


@contextmanager
def _stop_on_signals(consumer: DeletionConsumer) -> Iterator[None]:
    """SIGTERM and SIGINT finish the current batch, then stop."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for s in previous:
        signal.signal(s, lambda *_: consumer.stop())
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _blas_limit(threads: int | None) -> Any:
    if threads is None:
        return nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads, user_api="blas")


def _print_summary(console: Console, summary: dict[str, Any], out: Path) -> None:
    table = Table(title="kafka stream: summary")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in (
        "records",
        "applied",
        "rejected",
        "duplicates",
        "dead_letters",
        "batches",
        "samples",
        "model_version",
        "retrains",
        "epsilon_spent",
        "wall_seconds",
    ):
        value = summary.get(key)
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    acc = summary.get("metrics", {}).get("accuracy_test")
    if acc is not None:
        table.add_row("accuracy_test", f"{acc:.4f}")
    console.print(table)
    console.print(f"outputs in [bold]{out}[/] (kafka_events.jsonl, kafka_summary.json)")
