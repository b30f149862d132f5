"""Run a scenario end to end in one process: train, then play the deletion stream.

The batches of the scenario's generated stream go through the one deletion pipeline
(:func:`simulator.runner.pipeline.apply_batch`), and the run folder is written by the one
recorder (:class:`simulator.runner.recorder.RunRecorder`), exactly as for a Kafka stream.
Without ``output_dir`` the run gets a new folder under the scenario's ``output_dir``
(:mod:`.run_folder`); SIGINT/SIGTERM finish the current batch and write the outputs marked
interrupted (:mod:`.interrupt`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from simulator.reporting.console import RemainingColumn, print_summary, progress_info, verdict_lines
from simulator.runner.federation import Federation, build_federation
from simulator.runner.interrupt import graceful_stop
from simulator.runner.pipeline import apply_batch
from simulator.runner.recorder import RunRecorder
from simulator.runner.result import RunResult
from simulator.runner.run_folder import new_run_folder, tracked
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
    folder = Path(output_dir) if output_dir is not None else new_run_folder(scenario.output_dir)
    with tracked(folder, scenario=scenario.name):
        end, rows, recorder = _play(scenario, folder, console, progress, plots, on_event, transport)
    title = f"{scenario.name}: summary"
    if end.get("interrupted"):
        title += (
            f" (interrupted at batch {end['interrupted']['batch']} of {end['interrupted']['of']})"
        )
    print_summary(console, title, rows, folder, verdict_lines(recorder.verdict), recorder.tables)
    return RunResult(folder, end, rows)


def _play(
    scenario: Scenario,
    folder: Path,
    console: Console,
    progress: bool,
    plots: bool,
    on_event: Sequence[Callable[[dict[str, Any], Federation], None]],
    transport: ClientTransport | None,
) -> tuple[dict[str, Any], list[tuple[str, str]], RunRecorder]:
    """Build, stream, finish (:func:`run_scenario`'s body inside its ``run.json``)."""
    with console.status(f"[bold]{scenario.name}[/]: loading data and training the extractor") as st:
        rounds = scenario.model.rounds

        def on_round(done: int, loss: float) -> None:  # FedAvg progress while it trains
            st.update(
                f"[bold]{scenario.name}[/]: training the extractor, FedAvg round {done}/{rounds} "
                f"done (loss {loss:.4f}); then the head"
            )

        fed = build_federation(scenario, transport=transport, extractor_progress=on_round)
    recorder = RunRecorder(folder, on_event=on_event, plots=plots)  # no empty logs on failure
    try:
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
            RemainingColumn(),
            TextColumn("[cyan]{task.fields[step]}"),
        )
        done = 0
        with (
            Progress(*columns, console=console, disable=not progress, transient=False) as bar,
            graceful_stop() as stop,
        ):
            task = bar.add_task("deletion stream", total=len(batches), info="", step="")
            run.on_step = lambda name: bar.update(task, step=name)
            for batch in batches:
                outcome = apply_batch(fed, run, batch, now=batch[0].requested_at + tick)
                recorder.batch(outcome, fed)
                done += 1
                bar.update(task, advance=1, info=progress_info(outcome.event))
                if stop.requested:
                    break
            interrupted = None
            if stop.requested and done < len(batches):
                interrupted = {"batch": done, "of": len(batches), "signal": stop.signal_name}
                console.print(
                    f"[bold yellow]{stop.signal_name}[/]: stopped after batch {done} of "
                    f"{len(batches)}; writing the outputs"
                )
            end, rows = recorder.finish(fed, run, interrupted=interrupted)
    finally:
        recorder.close()
    return end, rows, recorder
