"""One consuming session over a built federation, for every transport.

:func:`consume` runs a :class:`~server.kafka.consumer.DeletionConsumer` until it is idle or
stopped: SIGTERM/SIGINT finish the current batch first and the outputs are marked interrupted
(:mod:`simulator.runner.interrupt`, the same behaviour as a scenario stream; exit code 130).
The run folder is written by the one recorder every run uses
(:class:`simulator.runner.recorder.RunRecorder`: events.jsonl, receipts.jsonl, metrics.json,
summary.md, plots), appended to by a restarted consumer, and the summary is the one every run
prints, with the consumer's counters as an extra section (``kafka`` in metrics.json: totals
over every session on the state folder, and this session's own counts and times under
``session``). A ready file (default ``STATE_DIR/ready``) exists while the consumer is ready
(:class:`server.health.Health`). ``unlearnsim run --stream kafka`` calls it with an in-process
federation (:mod:`server.kafka.launch`); the Flower ServerApp calls it with a federation whose
clients are SuperNodes (:mod:`server.server_app`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from server.health import Health
from server.kafka.consumer import ConsumerConfig, DeletionConsumer, EventHook
from simulator.runner.federation import Federation
from simulator.runner.interrupt import graceful_stop
from simulator.runner.recorder import RunRecorder
from simulator.runner.run import ReportingConfig
from simulator.runner.run_folder import tracked

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
    "scope",
    "total_epsilon_spent",
    "total_delta",
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
    options: ReportingConfig | None = None,
    *,
    ready: Path | None = None,
    setup_seconds: float | None = None,
) -> dict[str, Any]:
    """Consume ``config``'s requests topic into ``fed``; write the run folder ``out``.

    Parameters
    ----------
    fed : the built federation the requests delete from.
    config : the consumer's topics, state folder, batching and gate.
    out : the run folder.
    options : console, plots and event callbacks (:class:`~simulator.runner.run.ReportingConfig`;
        a consumer shows no progress bar).
    ready : the ready file (default ``STATE_DIR/ready``).
    setup_seconds : how long building or loading ``fed`` took (the summary's set-up time).

    Returns
    -------
    dict
        The end event (``kafka``: the consumer's summary). ``out/run.json`` records the session
        (left to the command when it already tracks the folder:
        :func:`simulator.runner.run_folder.tracked`).
    """
    state = str(config.state_dir.resolve())
    with tracked(out, scenario=fed.scenario.name, kafka_state_dir=state):
        return _consume(
            fed, config, out, options or ReportingConfig(), ready=ready, setup=setup_seconds
        )


def _consume(
    fed: Federation,
    config: ConsumerConfig,
    out: Path,
    options: ReportingConfig,
    *,
    ready: Path | None,
    setup: float | None = None,
) -> dict[str, Any]:
    """:func:`consume`'s body inside its ``run.json``."""
    from server.kafka.checkpoint import CheckpointStore
    from simulator.reporting.console import print_summary, verdict_lines

    console = options.shown_on
    health = Health(ready_file=ready or config.state_dir / "ready")
    resume = CheckpointStore.exists(config.state_dir)
    hooks: list[EventHook] = [*options.on_event, health]
    recorder = RunRecorder(
        out, on_event=hooks, resume=resume, plots=options.plots, setup_seconds=setup
    )
    consumer = DeletionConsumer(
        fed, replace(config, events_path=None), on_event=[_announce(console, config)],
        recorder=recorder,
    )  # fmt: skip
    try:  # not ready before the checkpoint is loaded and the log checked (consumer_start)
        recorder.emit({"event": "consumer_loading"}, fed, persist=False)
        recorder.start(fed)
        with graceful_stop(consumer.stop) as stop:
            summary = consumer.run()
            interrupted = None
            if stop.requested:
                batch = consumer.state.run.batches
                interrupted = {"batch": batch, "of": None, "signal": stop.signal_name}
            end, rows = recorder.finish(
                fed, consumer.state.run, extra={"kafka": summary},
                extra_rows=kafka_rows(summary), interrupted=interrupted,
            )  # fmt: skip
    finally:
        recorder.close()
        health.close()
    title = f"{fed.scenario.name}: summary (kafka stream)"
    if end.get("interrupted"):
        title += f" (interrupted after batch {end['interrupted']['batch']})"
    print_summary(
        console, title, rows, out, verdict_lines(recorder.verdict), recorder.tables,
        headline=recorder.headline,
    )  # fmt: skip
    return end


def _announce(console: Console, config: ConsumerConfig) -> EventHook:
    """The hook that prints where the consumer reads when it starts."""

    def hook(event: dict[str, Any], fed: Federation) -> None:
        if event["event"] == "consumer_start":
            how = "resumed from checkpoint" if event["resumed"] else "fresh state"
            console.print(
                f"consuming {config.topics.requests} at {config.bootstrap} ({how}, "
                f"{event['ledger']} requests answered so far)",
                highlight=False,
            )

    return hook


def kafka_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The consumer's section of the summary.

    Its counters over every session, then this session's own.
    """
    rows = []
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        rows.append((f"kafka: {key}", f"{value:.4g}" if isinstance(value, float) else str(value)))
    for key in SESSION_KEYS:
        value = summary.get("session", {}).get(key)
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        rows.append((f"kafka: {key} (this session)", shown))
    return rows
