"""Run a scenario end to end in one process: train, then play the deletion stream.

The batches of the scenario's generated stream go through the one deletion pipeline
(:func:`simulator.runner.pipeline.apply_batch`), and the run folder is written by the one
recorder (:class:`simulator.runner.recorder.RunRecorder`), exactly as for a Kafka stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from simulator.runner.federation import Federation, build_federation
from simulator.runner.pipeline import apply_batch
from simulator.runner.recorder import RunRecorder
from simulator.runner.result import RunResult
from simulator.runner.run_state import RunState
from simulator.runner.transport import ClientTransport
from simulator.scenario import Scenario
from simulator.stream import batches as stream_batches


def run_scenario(
    scenario: Scenario,
    *,
    output_dir: str | Path | None = None,
    console: Console | None = None,
    progress: bool = True,
    plots: bool = True,
    on_event: Sequence[Callable[[dict[str, Any], Federation], None]] = (),
    transport: ClientTransport | None = None,
) -> RunResult:
    """Train the federation, consume the stream, write outputs; see :mod:`.recorder`.

    Every event record (start, each deletion batch, end) is also passed to each ``on_event``
    callback with the federation, e.g. a metrics exporter. ``transport`` reaches the clients
    (default in-process; see :mod:`.transport`).
    """
    console = console or Console()
    folder = Path(output_dir or scenario.output_dir)
    recorder = RunRecorder(folder, on_event=on_event, plots=plots)
    try:
        with console.status(f"[bold]{scenario.name}[/]: loading data and training the extractor"):
            fed = build_federation(scenario, transport=transport)
        recorder.start(fed)
        run = RunState()
        batches = stream_batches(fed.requests, scenario.stream.max_batch_requests)
        tick = timedelta(seconds=scenario.stream.tick_seconds)
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
            task = bar.add_task("deletion stream", total=len(batches), info="")
            for batch in batches:
                outcome = apply_batch(fed, run, batch, now=batch[0].requested_at + tick)
                recorder.batch(outcome, fed)
                bar.update(task, advance=1, info=progress_info(outcome.event))
        end, rows = recorder.finish(fed, run)
    finally:
        recorder.close()
    print_summary(console, f"{scenario.name}: summary", rows, folder)
    return RunResult(folder, end, rows)


def progress_info(event: dict[str, Any]) -> str:
    """The progress bar's note after a batch: removed so far, budget used, test accuracy."""
    acc = event.get("metrics", {}).get("accuracy_test")
    return f"removed {event['removed_total']}  budget {event.get('budget_used_ratio', 0):.0%}" + (
        f"  acc {acc:.3f}" if acc is not None else ""
    )


def print_summary(
    console: Console, title: str, rows: Sequence[tuple[str, str]], folder: Path
) -> None:
    """The summary table every run prints, whatever its source and transport."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(k, v, style=None)
    console.print(table)
    console.print(f"outputs in [bold]{folder}[/]")
