"""One consuming session over a built federation, for every transport.

:func:`consume` runs a :class:`~server.kafka.consumer.DeletionConsumer` until it is idle or
stopped (SIGTERM/SIGINT finish the current batch first). The run folder is written by the one
recorder every run uses (:class:`simulator.runner.recorder.RunRecorder`: events.jsonl,
receipts.jsonl, metrics.json, summary.md, plots), appended to by a restarted consumer, and the
summary is the one every run prints, with the consumer's counters as an extra section
(``kafka`` in metrics.json: totals over every session on the state folder, and this session's
own counts and times under ``session``). A ready file (default ``STATE_DIR/ready``) exists
while the consumer is ready (:class:`server.health.Health`). ``unlearnsim run --stream kafka``
calls it with an in-process federation (:mod:`server.kafka.launch`); the Flower ServerApp calls it
with a federation whose clients are SuperNodes (:mod:`server.server_app`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from server.health import Health
from server.kafka.consumer import ConsumerConfig, DeletionConsumer, EventHook
from simulator.runner.federation import Federation
from simulator.runner.recorder import RunRecorder

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
    "unauthorised",
    "held",
    "offset_gaps",
    "skipped_records",
    "sessions",
)
#: This session's own values (``summary["session"]``), shown after the totals.
SESSION_KEYS = ("records", "applied", "wall_seconds")


def consume(
    fed: Federation,
    config: ConsumerConfig,
    out: Path,
    console: Console,
    on_event: Sequence[EventHook] = (),
    *,
    ready: Path | None = None,
    plots: bool = True,
) -> dict[str, Any]:
    """Consume ``config``'s requests topic into ``fed``; write the run folder ``out``.

    Returns the end event (``kafka``: the consumer's summary). ``ready``: the ready file
    (default ``STATE_DIR/ready``).
    """
    from server.kafka.checkpoint import CheckpointStore
    from simulator.runner.run import print_summary

    health = Health(ready_file=ready or config.state_dir / "ready")
    resume = CheckpointStore.exists(config.state_dir)
    recorder = RunRecorder(out, on_event=[*on_event, health], resume=resume, plots=plots)
    consumer = DeletionConsumer(
        fed, replace(config, events_path=None), on_event=[_announce(console, config)],
        recorder=recorder,
    )  # fmt: skip
    try:
        recorder.start(fed)
        with _stop_on_signals(consumer):
            summary = consumer.run()
        end, rows = recorder.finish(
            fed, consumer.state.run, extra={"kafka": summary}, extra_rows=kafka_rows(summary)
        )
    finally:
        recorder.close()
        health.close()
    print_summary(console, f"{fed.scenario.name}: summary (kafka stream)", rows, out)
    return end


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


def kafka_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The consumer's section of the summary: its counters over every session, then this
    session's own."""
    rows = []
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        rows.append((f"kafka: {key}", f"{value:.4g}" if isinstance(value, float) else str(value)))
    for key in SESSION_KEYS:
        value = summary.get("session", {}).get(key)
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        rows.append((f"kafka: {key} (this session)", shown))
    return rows
