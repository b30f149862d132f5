"""Run a scenario end to end in one process: train, then play the deletion stream.

The batches of the scenario's generated stream go through the one deletion pipeline
(:func:`simulator.runner.pipeline.apply_batch`), and the run folder is written by the one
recorder (:class:`simulator.runner.recorder.RunRecorder`), exactly as for a Kafka stream.
Without ``output_dir`` the run gets a new folder under the scenario's ``output_dir``
(:mod:`.run_folder`); SIGINT/SIGTERM finish the current batch and write the outputs marked
interrupted (:mod:`.interrupt`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column

from simulator.reporting.console import (
    RemainingColumn,
    StepColumn,
    print_summary,
    progress_info,
    verdict_lines,
)
from simulator.runner.federation import Federation, build_federation
from simulator.runner.interrupt import graceful_stop
from simulator.runner.pipeline import apply_batch
from simulator.runner.recorder import EventCallback, RunRecorder
from simulator.runner.result import RunResult
from simulator.runner.run_folder import check_recorder_target, new_run_folder, tracked
from simulator.runner.run_state import RunState
from simulator.runner.transport import ClientTransport
from simulator.scenario import Scenario
from simulator.stream import DeletionRequest
from simulator.stream import batches as stream_batches

#: Columns of console from which the progress bar also shows the elapsed time and the step.
WIDE_PROGRESS = 100
#: Columns of console below which the progress bar leaves out its description.
NARROW = 80


def progress_columns(width: int) -> tuple[ProgressColumn, ...]:
    """The progress bar's columns for a console ``width`` columns wide, on one line.

    Description (from :data:`NARROW` columns), stream position (the bar takes what is
    left), batch info and the time left; from :data:`WIDE_PROGRESS` columns also the elapsed
    time and the batch's current step (cut with an ellipsis when long). Every column but the
    bar and the step is never wrapped, so the line never breaks in two.
    """
    line = Column(no_wrap=True)
    columns: list[ProgressColumn] = [
        *([TextColumn("{task.description}", table_column=line)] if width >= NARROW else []),
        BarColumn(bar_width=None),
        MofNCompleteColumn(table_column=line),
        TextColumn("{task.fields[info]}", table_column=line),
    ]
    if width >= WIDE_PROGRESS:
        columns.append(TimeElapsedColumn(table_column=line))
    columns.append(RemainingColumn())
    if width >= WIDE_PROGRESS:
        columns.append(StepColumn())
    return tuple(columns)


@dataclass(frozen=True, kw_only=True)
class ReportingConfig:
    """How a run is shown and who hears of it, beside what the scenario says.

    The same for the scenario stream (:func:`run_scenario`) and a Kafka session
    (:func:`server.kafka.session.consume`, which has no progress bar).

    Attributes
    ----------
    console : where the progress and the summary are printed (None: a new console).
    progress : show the progress bar of the stream.
    plots : write the PNG plots at the end.
    on_event : callbacks given every event record (start, each deletion batch, end) with the
        federation, e.g. a metrics exporter.
    """

    console: Console | None = None
    progress: bool = True
    plots: bool = True
    on_event: Sequence[EventCallback] = ()

    @property
    def shown_on(self) -> Console:
        """The console to print on (a new one when none is given)."""
        return self.console or Console()


def run_scenario(
    scenario: Scenario,
    options: ReportingConfig | None = None,
    *,
    output_dir: str | Path | None = None,
    transport: ClientTransport | None = None,
) -> RunResult:
    """Train the federation, consume the stream, write outputs; see :mod:`.recorder`.

    Parameters
    ----------
    scenario : the scenario to run.
    options : display, plots and event callbacks (default :class:`ReportingConfig`).
    output_dir : the run folder (default: a new one under the scenario's ``output_dir``);
        refused with a :class:`~simulator.errors.ConfigError` when it holds a file the run
        would replace (``summary.md``, ...) but is not a run folder.
    transport : how the clients are reached (default in-process; see :mod:`.transport`).

    Returns
    -------
    RunResult
        The folder, the end event and the summary rows.
    """
    options = options or ReportingConfig()
    console = options.shown_on
    if output_dir is not None:
        check_recorder_target(output_dir)  # never replace a summary.md that no run wrote
    folder = Path(output_dir) if output_dir is not None else new_run_folder(scenario.output_dir)
    with tracked(folder, scenario=scenario.name):
        started = time.perf_counter()
        fed = _train(scenario, console, transport)
        recorder = RunRecorder(
            folder,
            on_event=options.on_event,
            plots=options.plots,
            setup_seconds=time.perf_counter() - started,
        )
        try:  # the recorder only once the federation is built: no empty logs on failure
            end, rows = _play(fed, recorder, console, progress=options.progress)
        finally:
            recorder.close()
    title = f"{scenario.name}: summary"
    if end.get("interrupted"):
        title += (
            f" (interrupted at batch {end['interrupted']['batch']} of {end['interrupted']['of']})"
        )
    print_summary(
        console, title, rows, folder, verdict_lines(recorder.verdict), recorder.tables,
        headline=recorder.headline,
    )  # fmt: skip
    return RunResult(folder, end, rows)


def _train(scenario: Scenario, console: Console, transport: ClientTransport | None) -> Federation:
    """Build the federation, each stage and FedAvg's rounds on the console's status line.

    On a console that is not a terminal (no status line), each stage is printed as it starts.
    """
    with console.status(f"[bold]{scenario.name}[/]: starting") as st:
        rounds = scenario.model.rounds

        def on_stage(name: str) -> None:
            st.update(f"[bold]{scenario.name}[/]: {name}")
            if not console.is_terminal:
                console.print(f"{scenario.name}: {name}", highlight=False)

        def on_round(done: int, loss: float) -> None:  # FedAvg progress while it trains
            st.update(
                f"[bold]{scenario.name}[/]: training the extractor, FedAvg round {done}/{rounds} "
                f"done (loss {loss:.4f})"
            )

        return build_federation(
            scenario, transport=transport, extractor_progress=on_round, stage=on_stage
        )


def _play(
    fed: Federation, recorder: RunRecorder, console: Console, *, progress: bool
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Stream every batch through the pipeline (until a signal), then finish the recorder."""
    recorder.start(fed)
    run = RunState()
    batches = stream_batches(fed.requests, fed.scenario.stream.max_batch_requests)
    with (
        Progress(
            *progress_columns(console.width),
            console=console,
            disable=not progress,
            transient=False,
        ) as bar,
        graceful_stop() as stop,
    ):
        task = bar.add_task("deletion stream", total=len(batches), info="", step="")
        run.on_step = lambda name: bar.update(task, step=name)
        done = 0
        for batch in batches:
            outcome = apply_batch(fed, run, batch, now=_decided_at(fed, batch))
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
        return recorder.finish(fed, run, interrupted=interrupted)


def _decided_at(fed: Federation, batch: Sequence[DeletionRequest]) -> datetime:
    """A batch's decision time on the stream clock: its first request plus one tick."""
    return batch[0].requested_at + timedelta(seconds=fed.scenario.stream.tick_seconds)
