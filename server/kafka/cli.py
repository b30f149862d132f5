"""``unlearnsim run SCENARIO --stream kafka``: build the federation, consume, summarise.

``server/commands/run.py`` calls :func:`run_kafka` when ``--stream kafka`` is given (or the
scenario says ``stream.source: kafka``); its options are in :mod:`server.kafka.options`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console

from server.kafka.batcher import BatchPolicy
from server.kafka.consumer import ConsumerConfig, EventHook
from server.kafka.options import topics_from
from server.kafka.session import EVENTS_FILE, consume
from simulator.errors import ConfigError
from simulator.scenario import Scenario


def consumer_config(args: argparse.Namespace, out: Path) -> ConsumerConfig:
    """The consumer settings of ``run --stream kafka`` (:mod:`server.kafka.options`)."""
    if not args.bootstrap:
        raise ConfigError("--stream kafka needs --bootstrap HOST:PORT", "--bootstrap")
    return ConsumerConfig(
        bootstrap=args.bootstrap,
        state_dir=Path(args.state_dir) if args.state_dir else out / "kafka-state",
        topics=topics_from(args),
        group_id=args.group,
        batch=BatchPolicy(max_requests=args.max_batch_requests, max_wait=args.max_wait),
        idle_timeout=args.idle_timeout,
        fsync=not args.no_fsync,
        events_path=out / EVENTS_FILE,
    )


def as_kafka_source(scenario: Scenario) -> Scenario:
    """The scenario with ``stream.source: scenario``: the federation is built as usual (its
    generated stream is what ``produce`` sends), and the consumer supplies the requests."""
    return scenario.model_copy(
        update={"stream": scenario.stream.model_copy(update={"source": "scenario"})}
    )


def run_kafka(
    args: argparse.Namespace,
    scenario: Scenario,
    console: Console,
    on_event: Sequence[EventHook] = (),
) -> int:
    """Build the in-process federation, consume the requests topic, summarise; exit code 0."""
    from simulator.runner.setup import build_federation

    out = Path(args.output or scenario.output_dir)
    config = consumer_config(args, out)
    scenario = as_kafka_source(scenario)
    with _blas_limit(args.blas_threads):
        with console.status(f"[bold]{scenario.name}[/]: loading data and training"):
            fed = build_federation(scenario)
        consume(fed, config, out, console, on_event)
    return 0


def _blas_limit(threads: int | None) -> Any:
    if threads is None:
        return nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads, user_api="blas")
