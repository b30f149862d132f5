"""One consuming session over a built federation, for every transport.

:func:`consume` runs a :class:`~server.kafka.consumer.DeletionConsumer` until it is idle or
stopped (SIGTERM/SIGINT finish the current batch first), evaluates the final head, writes
``kafka_summary.json`` and prints a summary table. ``unlearnsim run --stream kafka`` calls it
with an in-process federation (:mod:`server.kafka.cli`); the Flower ServerApp calls it with a
federation whose clients are SuperNodes (:mod:`server.server_app`).
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from server.kafka.consumer import ConsumerConfig, DeletionConsumer, EventHook
from simulator.runner.setup import Federation

SUMMARY_FILE = "kafka_summary.json"
EVENTS_FILE = "kafka_events.jsonl"

SUMMARY_KEYS = (
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
    "delta",
    "accounting",
    "wall_seconds",
)


def consume(
    fed: Federation,
    config: ConsumerConfig,
    out: Path,
    console: Console,
    on_event: Sequence[EventHook] = (),
) -> dict[str, Any]:
    """Consume ``config``'s requests topic into ``fed``; write and return the summary."""
    from simulator.runner.loop import evaluate

    consumer = DeletionConsumer(fed, config, on_event=[*on_event, _announce(console, config)])
    with _stop_on_signals(consumer):
        summary = consumer.run()
    summary["metrics"] = evaluate(fed, consumer.state.last_tick, consumer.state.forgotten)
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    _print_summary(console, summary, out)
    return summary


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
    """SIGTERM and SIGINT finish the current batch, then stop (main thread only: the
    simulation engine runs the ServerApp in a thread, where the engine owns the signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for s in previous:
        signal.signal(s, lambda *_: consumer.stop())
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _print_summary(console: Console, summary: dict[str, Any], out: Path) -> None:
    table = Table(title="kafka stream: summary")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    acc = summary.get("metrics", {}).get("accuracy_test")
    if acc is not None:
        table.add_row("accuracy_test", f"{acc:.4f}")
    console.print(table)
    console.print(f"outputs in [bold]{out}[/] ({EVENTS_FILE}, {SUMMARY_FILE})")
