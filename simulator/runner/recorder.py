"""The one output contract of a run, whatever ``--stream`` and ``--transport``.

:class:`RunRecorder` writes every run's folder the same way (:mod:`.outputs` lists the files):
``resolved_scenario.yaml``, ``events.jsonl`` (start, every deletion batch, end),
``receipts.jsonl``, ``metrics.json`` (the end event), ``summary.md``, ``batches.csv`` (one flat
row per batch, :mod:`.flat`), the PNG plots, and
``head.npz`` / ``clients.json`` (:mod:`.artifacts`). Every event also goes to the ``on_event``
callbacks (e.g. the Prometheus exporter). A Kafka consumer that restarts on the same folder
appends (``resume=True``): the earlier sessions' batches stay in the log and in the summary; a
line a crash cut short is dropped first, and a batch its checkpoint holds but the folder lacks
(the process died between the two writes) is appended once (:meth:`RunRecorder.recover`).
Sources add their own summary rows as an extra section (``extra_rows``), never another report.

A fresh recorder (not resuming) deletes any output file an earlier run left in the folder before
writing, so nothing stale ever sits beside new files. A run stopped by a signal
(:mod:`.interrupt`) finishes with ``interrupted`` (batch k of N): the end event, ``run.json``
and the first line of ``summary.md`` say so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simulator.reporting.flat import BATCHES_CSV, batch_events, write_batches_csv
from simulator.reporting.run_report import (
    OUTPUT_FILES,
    RunWriter,
    happened,
    plot_run,
    render_summary,
    scenario_marks,
    summary_rows,
    summary_tables,
)
from simulator.reporting.verdict import Table, Verdict, certificate_verdict
from simulator.runner.artifacts import write_artifacts
from simulator.runner.federation import Federation
from simulator.runner.pipeline import BatchOutcome
from simulator.runner.run_audit import audit_files
from simulator.runner.run_folder import RunManifest, read_manifest
from simulator.runner.run_state import RunState
from simulator.runner.scoring import evaluate
from simulator.scenario import scenario_to_yaml
from simulator.stream import DeletionReceipt

EventCallback = Callable[[dict[str, Any], Federation], None]
EVENTS = "events.jsonl"
RECEIPTS = "receipts.jsonl"


class RunRecorder:
    """Writes one run's folder and feeds the callbacks (module docstring).

    Parameters
    ----------
    folder : the run folder (created).
    on_event : callbacks receiving every event record with the federation.
    resume : append to an existing log (a restarted consumer) instead of starting it afresh.
    plots : write the PNG plots at the end.
    setup_seconds : how long the run took to set up before the stream (loading the data,
        training the extractor and the head; None: not measured), in the end event and the
        summary's wall time beside the stream's own.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        on_event: Sequence[EventCallback] = (),
        resume: bool = False,
        plots: bool = True,
        setup_seconds: float | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.setup_seconds = setup_seconds
        self.on_event = list(on_event)
        self.plots = plots
        if not resume:
            clear_outputs(self.folder)
        else:  # a line cut by a crash would glue itself to the next one appended
            for name in (EVENTS, RECEIPTS):
                trim_cut_line(self.folder / name)
        self.batches: list[dict[str, Any]] = batch_events(self.folder) if resume else []
        self.writer = RunWriter(self.folder, append=resume)
        self.start_event: dict[str, Any] = {}
        self.verdict: Verdict | None = None
        self.headline = ""
        self.tables: list[Table] = []
        self.wall = time.perf_counter()

    def emit(self, event: dict[str, Any], fed: Federation, *, persist: bool = True) -> None:
        """Log ``event`` (with ``persist``) and pass it to the callbacks."""
        if persist:
            self.writer.event(event)
        for cb in self.on_event:
            cb(event, fed)

    def start(self, fed: Federation) -> dict[str, Any]:
        """Write the resolved scenario and the ``start`` event (the model before deleting)."""
        self.writer.text("resolved_scenario.yaml", scenario_to_yaml(fed.scenario))
        self.start_event = start_event(fed)
        run_id = read_manifest(self.folder).get("id")
        if run_id:  # <scenario>-<run.json's id>: the metrics' run_id label
            self.start_event["run_id"] = f"{fed.scenario.name}-{run_id}"
        self.emit(self.start_event, fed)
        return self.start_event

    def batch(self, outcome: BatchOutcome, fed: Federation) -> None:
        """Log one batch's event and receipts."""
        self.writer.receipts(outcome.answered)
        self.batches.append(outcome.event)
        self.emit(outcome.event, fed)

    def recover(
        self, event: dict[str, Any], receipts: Sequence[DeletionReceipt], *, key: str
    ) -> bool:
        """Append a batch the source kept (a checkpoint) but a crash kept out of the folder.

        ``event``: the batch's event; ``key``: its field numbering batches. Nothing happens
        when a batch event with the same ``key`` is logged already; otherwise the receipts not
        in ``receipts.jsonl`` yet (a crash between the two writes) and the event are appended,
        each once. The callbacks are not called (the batch was reported by the process that
        died). Whether anything was appended.
        """
        if any(b.get(key) == event.get(key) for b in self.batches):
            return False
        path = self.folder / RECEIPTS
        logged = set(path.read_text(encoding="utf-8").splitlines()) if path.exists() else set()
        self.writer.receipts([r for r in receipts if r.model_dump_json() not in logged])
        self.writer.event(event)
        self.batches.append(event)
        return True

    def finish(
        self, fed: Federation, run: RunState, *, extra: dict[str, Any] | None = None,
        extra_rows: Sequence[tuple[str, str]] = (),
        interrupted: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:  # fmt: skip
        """Write the end event, ``metrics.json``, ``summary.md``, plots and artifacts.

        ``extra``: source-specific keys of the end event (e.g. ``kafka`` totals);
        ``extra_rows``: their summary rows, shown as a section after the common ones;
        ``interrupted``: ``{"batch": k, "of": N or None, "signal": name}`` when a signal stopped
        the stream (recorded in the end event, ``run.json`` and summary.md's first line).
        Returns the end event and every summary row; the headline, the certificate verdict and
        the phase and attack tables are kept as ``headline``, ``verdict`` and ``tables``.
        """
        end = end_event(fed, run, time.perf_counter() - self.wall)
        if self.setup_seconds is not None:
            end["setup_seconds"] = self.setup_seconds
        if extra:
            end.update(extra)
        if interrupted:
            end["interrupted"] = interrupted
            RunManifest(self.folder).update(interrupted=interrupted)
        self.emit(end, fed)
        write_artifacts(self.folder, fed)
        start = self.start_event or {"metrics": {}}
        rows = summary_rows(start, self.batches, end)
        self.verdict = certificate_verdict(start, self.batches, end)
        self.tables = summary_tables(self.batches)
        self.headline = happened(self.batches, end).headline()
        end["certificate_held"] = self.verdict.held
        self.writer.json("metrics.json", end)
        text = render_summary(
            fed.scenario.name, self.verdict, rows, self.tables, extra_rows, interrupted,
            headline=self.headline,
        )  # fmt: skip
        self.writer.text("summary.md", text)
        for name, body in audit_files(fed, self.batches).items():
            self.writer.text(name, body)
        write_batches_csv(self.folder / BATCHES_CSV, self.batches)
        rows += list(extra_rows)
        if self.plots and self.batches:
            marks = scenario_marks(fed.scenario)
            plot_run(self.folder, self.batches, fed.scenario.name, **marks)
        return end, rows

    def close(self) -> None:
        """Close the logs."""
        self.writer.close()


def trim_cut_line(path: Path) -> None:
    """Cut the unfinished last line of a JSON-lines log (a write a crash interrupted)."""
    if not path.exists():
        return
    with path.open("rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def clear_outputs(folder: Path) -> None:
    """Delete the output files an earlier run left in ``folder``.

    Only :data:`~simulator.reporting.run_report.OUTPUT_FILES`; other files (a Flower server log
    written before the recorder) are kept.
    """
    for name in OUTPUT_FILES:
        (folder / name).unlink(missing_ok=True)


def start_event(fed: Federation) -> dict[str, Any]:
    """The ``start`` record: the trained federation before its first deletion."""
    head = fed.head
    weights = {
        str(c): cl.last_weights.to_flat() for c, cl in fed.clients.items() if cl.last_weights
    }
    return {
        "event": "start",
        "scenario": fed.scenario.name,
        "seed": fed.scenario.seed,
        "method": fed.scenario.method,
        "train_rows": int(fed.dataset.y_train.size),
        "public_rows": int(fed.public_indices.size),
        "clients": {str(c): len(s) for c, s in enumerate(fed.client_indices)},
        "num_classes": fed.dataset.num_classes,
        "feature_dim": int(fed.train_features.shape[1]),
        "extractor_round_losses": list(fed.featurizer.round_losses),
        "extractor_certified": fed.extractor_certified,
        **fed.scope_fields(head.epsilon_spent),
        "head_iterations": head.last_fit_iterations,
        "head_newton_iterations": head.last_fit_newton_iterations,
        "training_residual": head.cumulative_residual,
        "budget": head.budget,
        "accounting": head.config.accounting,
        "epsilon_target": fed.scenario.head.epsilon,
        "delta": head.config.delta,
        "requests": len(fed.requests),
        "decorrelation_weights": weights,
        "metrics": evaluate(fed, 0, []),
    }


def end_event(fed: Federation, run: RunState, wall: float) -> dict[str, Any]:
    """The ``end`` record: totals of the run and the final head's utility."""
    head = fed.head
    return {
        "event": "end",
        "method": fed.scenario.method,
        "clients": len(fed.clients),
        "train_rows": int(fed.dataset.y_train.size),
        "requests": sum(run.answered.values()),
        "requests_applied": run.count("applied"),
        "requests_rejected": run.count("rejected"),
        "requests_duplicate": run.count("duplicate"),
        "batches": run.batches,
        "removed_total": len(run.forgotten),
        "retained": fed.head_data.retained_count,
        "retrains_budget": run.retrains.get("budget", 0),
        "retrains_method": run.retrains.get("method", 0),
        "retrains_client_failed": run.retrains.get("client_failed", 0),
        "retrains_extractor_limit": run.retrains.get("extractor_limit", 0),
        "accounting": head.config.accounting,
        "epsilon_spent": head.epsilon_spent,
        "epsilon_target": fed.scenario.head.epsilon,
        "delta": fed.scenario.head.delta,
        "budget": head.budget,
        "budget_used_ratio": head.cumulative_residual / head.budget,
        "model_version": head.model_version,
        "excluded_clients": {str(c): r for c, r in sorted(fed.excluded.items())},
        "extractor_certified": fed.extractor_certified,
        **fed.scope_fields(head.epsilon_spent),
        "decorrelation_weights": {
            str(c): cl.last_weights.to_flat() for c, cl in fed.clients.items() if cl.last_weights
        },
        "metrics": evaluate(fed, run.last_tick, run.forgotten),
        "wall_seconds": wall,
    }
