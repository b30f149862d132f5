"""What a run leaves in its output folder, and the summary it prints.

* ``resolved_scenario.yaml`` — the scenario after defaults and overrides;
* ``events.jsonl`` — one JSON object per event (start, trained, every deletion batch, end);
* ``receipts.jsonl`` — one :class:`~simulator.stream.DeletionReceipt` per request;
* ``metrics.json`` — final metrics; ``summary.md`` — the summary table;
* ``batches.csv`` — one flat row per deletion batch (:mod:`.flat`); ``run.json`` — id, times,
  status, command, versions, git commit (:mod:`.run_folder`);
* ``accuracy.png``, ``budget.png``, ``residuals.png`` — curves over the stream tick (samples
  removed on the top axis; phases, shifts, withdrawals, retrains, alarms marked; the legend
  outside the axes);
* ``mia.png``, ``drift.png`` — attack AUCs and drift statistics, ours vs the retrained head
  (:mod:`.metric_report`);
* ``audit.json``, ``audit.md`` — with ``evaluation.audit``, where membership leaks at each
  reference checkpoint (:mod:`simulator.runner.run_audit`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.reporting.metric_report import (
    mia_table,
    plot_privacy_drift,
    privacy_drift_rows,
    series_style,
)
from simulator.reporting.plot_marks import (
    Axis,
    PanelText,
    finish_panel,
    save_figure,
    stream_marks,
)
from simulator.reporting.verdict import (
    Table,
    Verdict,
    exact_pass,
    extractor_guarantee_text,
    head_guarantee,
    phase_table,
    scope_cell,
)
from simulator.stream import DeletionReceipt

#: Every file the recorder writes (deleted before a fresh run writes a folder again).
OUTPUT_FILES = (
    "resolved_scenario.yaml",
    "events.jsonl",
    "receipts.jsonl",
    "metrics.json",
    "summary.md",
    "batches.csv",
    "accuracy.png",
    "budget.png",
    "residuals.png",
    "mia.png",
    "drift.png",
    "head.npz",
    "clients.json",
    "audit.json",
    "audit.md",
)


def interrupted_line(interrupted: dict[str, Any]) -> str:
    """summary.md's first line after a signal: "interrupted at batch k of N (SIGINT) ..."."""
    of = f" of {interrupted['of']}" if interrupted.get("of") is not None else ""
    sig = f" ({interrupted['signal']})" if interrupted.get("signal") else ""
    return (
        f"**Interrupted at batch {interrupted['batch']}{of}**{sig}: partial run, the outputs "
        "cover the batches applied before the stop."
    )


def json_safe(value: Any) -> Any:
    """``value`` as the run's JSON files hold it (NaN/inf as null, numpy scalars as numbers)."""
    return _clean(value)


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become null, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunWriter:
    """Appends events and receipts as they happen, so a crashed run keeps its log."""

    def __init__(self, folder: Path, *, append: bool = False) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        mode = "a" if append else "w"
        self._events = (folder / "events.jsonl").open(mode, encoding="utf-8")
        self._receipts = (folder / "receipts.jsonl").open(mode, encoding="utf-8")

    def event(self, record: dict[str, Any]) -> None:
        """Append one event to ``events.jsonl`` (JSON-safe, flushed)."""
        self._events.write(json.dumps(_clean(record), sort_keys=True) + "\n")
        self._events.flush()

    def receipts(self, receipts: Sequence[DeletionReceipt]) -> None:
        """Append receipts to ``receipts.jsonl`` (flushed)."""
        for r in receipts:
            self._receipts.write(r.model_dump_json() + "\n")
        self._receipts.flush()

    def text(self, name: str, content: str) -> Path:
        """Write the file ``name`` of the folder; returns its path."""
        path = self.folder / name
        path.write_text(content, encoding="utf-8")
        return path

    def json(self, name: str, content: dict[str, Any]) -> Path:
        """Write ``content`` as indented JSON with sorted keys (NaN/inf as null)."""
        return self.text(name, json.dumps(_clean(content), indent=2, sort_keys=True) + "\n")

    def close(self) -> None:
        """Close the event and receipt logs."""
        self._events.close()
        self._receipts.close()


def summary_rows(
    start: dict[str, Any], batches: list[dict[str, Any]], end: dict[str, Any]
) -> list[tuple[str, str]]:
    """(metric, value) rows of the summary table."""

    def pct(v: Any) -> str:
        return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.2f}%"

    first = start.get("metrics", {})
    last = end.get("metrics", {})
    totals = [b["timings"]["total"] for b in batches if "timings" in b and "total" in b["timings"]]
    rows = [
        *happened_rows(batches, end),
        ("method", str(end["method"])),
        ("clients / train rows", f"{end['clients']} / {end['train_rows']}"),
        (
            "requests (applied / rejected)",
            f"{end['requests_applied']} / {end['requests_rejected']}",
        ),
        ("deletion batches", str(len(batches))),
        ("samples removed", str(end["removed_total"])),
        (
            f"epsilon spent since last retrain (of target; delta = {end['delta']:g})",
            f"{end['epsilon_spent']:.4f} (of {end['epsilon_target']})",
        ),
        ("accounting", str(end["accounting"])),
        ("guarantee", head_guarantee(end, short=True)),
        ("extractor guarantee", extractor_guarantee_text(end)),
        ("certificate scope", scope_cell(end)),
    ]
    for split in ("test", "ood", "retain", "forget"):
        key = f"accuracy_{split}"
        if key in last or key in first:
            rows.append(
                (
                    f"accuracy {split} (start -> end)",
                    f"{pct(first.get(key))} -> {pct(last.get(key))}",
                )
            )
    if totals:
        rows.append(
            (
                "removal time per batch (mean / max)",
                f"{1e3 * np.mean(totals):.1f} / {1e3 * max(totals):.1f} ms",
            )
        )
    refs = [c for b in batches for c in b.get("checkpoints", [])]
    if refs:
        c = refs[-1]
        rows.append(
            (
                f"vs retrained head at {c['checkpoint']} removals",
                f"rel. distance {c['param_distance_relative']:.2e}, "
                f"test acc {pct(c.get('reference_accuracy_test'))}",
            )
        )
    checked = [c for c in refs if "residual_against_cold_fit" in c]
    if checked:
        worst = max(checked, key=lambda c: c["residual_against_cold_fit"] / c["budget"])
        held = all(c["residual_against_cold_fit"] <= c["budget"] for c in checked)
        rows.append(
            (
                "residual vs A(D') (cold-fit weights, retrained from scratch)",
                f"max {worst['residual_against_cold_fit']:.3g} of budget {worst['budget']:.3g} "
                f"at {len(checked)} checkpoint(s): {'within' if held else 'EXCEEDED'}",
            )
        )
    rows += audit_rows(refs)
    rows += weight_rows(end.get("decorrelation_weights", {}))
    rows += privacy_drift_rows(batches)
    rows.append(wall_row(end))
    return rows


def audit_rows(checkpoints: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The last audited checkpoint's AUCs of models (a), (b), (c) (``evaluation.audit``)."""
    audited = [c["audit"] for c in checkpoints if "audit" in c]
    if not audited:
        return []
    audit = audited[-1]
    models = audit["models"]

    def aucs(attack: str) -> str:
        order = ("retrained", "same_extractor", "unlearned")
        values = [models[m]["auc"].get(attack) for m in order]
        return " / ".join("n/a" if v is None else f"{v:.3f}" for v in values)

    return [
        (
            f"membership audit at {audit['removed']} removals, AUC (a) retrained / (b) same "
            "extractor / (c) unlearned",
            f"loss {aucs('loss')}; lira {aucs('lira')} ({len(audited)} checkpoint(s): audit.md)",
        )
    ]


@dataclass(frozen=True)
class Happened:
    """What the head went through: certified updates, retrains by reason, the budget's course.

    Attributes
    ----------
    removing : batches that removed samples.
    certified : of those, the batches kept as one certified update (no retrain).
    exact_passes : of those, the ones that made an exact pass (``anchored`` accounting: the
        charge reset to the measured residual of the released head).
    retrains : retrains by reason (``budget``, ``method``, ``client_failed``,
        ``extractor_limit``), zeros left out.
    peak : the largest charge of the released head over the run, as a share of the budget
        (NaN without a certified batch).
    final : the charge at the end, as a share of the budget.
    """

    removing: int
    certified: int
    exact_passes: int
    retrains: dict[str, int]
    peak: float
    final: float

    @property
    def retrain_text(self) -> str:
        """``17 (budget 17)`` or ``0``."""
        total = sum(self.retrains.values())
        by = ", ".join(f"{k} {v}" for k, v in self.retrains.items())
        return f"{total} ({by})" if total else "0"

    def headline(self) -> str:
        """One line: certified updates, exact passes, retrains; the budget's peak and final."""
        return (
            f"{self.removing} removing batch(es): {self.certified} certified update(s), "
            f"{self.exact_passes} exact pass(es), {self.retrain_text} retrain(s) from scratch; "
            f"budget used: peak {_pct(self.peak)}, final {_pct(self.final)}"
        )


def happened(batches: list[dict[str, Any]], end: dict[str, Any]) -> Happened:
    """:class:`Happened` of a run, from its batch events and end event.

    A batch that removed samples is a certified update unless it retrained; the retrains are
    the end event's counts (every session's, for a resumed Kafka consumer); the peak is the
    largest ``budget_used_ratio`` a batch reported, the final share the end event's.
    """
    removing = [b for b in batches if b.get("samples")]
    reasons = {
        reason: int(end.get(f"retrains_{reason}", 0) or 0)
        for reason in ("budget", "method", "client_failed", "extractor_limit")
    }
    used = [
        float(b["budget_used_ratio"])
        for b in batches
        if isinstance(b.get("budget_used_ratio"), int | float)
    ]
    final = float(end.get("budget_used_ratio", math.nan))
    return Happened(
        removing=len(removing),
        certified=sum(not b.get("retrained") for b in removing),
        exact_passes=sum(exact_pass(b) for b in removing),
        retrains={k: v for k, v in reasons.items() if v},
        peak=max([*used, final]) if used else final,
        final=final,
    )


def happened_rows(batches: list[dict[str, Any]], end: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary's first rows: certified updates vs retrains, and the budget's course."""
    h = happened(batches, end)
    return [
        ("certified updates / removing batches", f"{h.certified} / {h.removing}"),
        ("exact passes (anchored)", str(h.exact_passes)),
        ("retrains from scratch (by reason)", h.retrain_text),
        ("budget used (peak / final)", f"{_pct(h.peak)} / {_pct(h.final)}"),
    ]


def _pct(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{100 * v:.2f}%"


def wall_row(end: dict[str, Any]) -> tuple[str, str]:
    """The wall time: set-up (data, extractor, head) and stream, when the set-up was measured."""
    stream = float(end["wall_seconds"])
    setup = end.get("setup_seconds")
    if isinstance(setup, int | float):
        total = float(setup) + stream
        return (
            "wall time (set-up + stream)",
            f"{total:.1f} s = {float(setup):.1f} s + {stream:.1f} s",
        )
    return ("wall time (stream)", f"{stream:.1f} s")


def weight_rows(weights: dict[str, dict[str, float]]) -> list[tuple[str, str]]:
    """Decorrelation weights at the end, over the clients: n_eff/n, weight range, class mass."""
    if not weights:
        return []
    ess = [w["effective_sample_size_ratio"] for w in weights.values()]
    low = min(w["min"] for w in weights.values())
    high = max(w["max"] for w in weights.values())
    mass = [v for w in weights.values() for k, v in w.items() if k.startswith("class_mass_")]
    rows = [
        ("decorrelation n_eff/n (min / mean over clients)", f"{min(ess):.3f} / {np.mean(ess):.3f}"),
        ("decorrelation weight range (min / max)", f"{low:.3g} / {high:.3g}"),
    ]
    if mass:
        rows.append(
            ("decorrelation class mass share (min / max)", f"{min(mass):.3f} / {max(mass):.3f}")
        )
    return rows


def summary_tables(batches: list[dict[str, Any]]) -> list[Table]:
    """The tables after the main one: phases, membership inference."""
    tables = [phase_table(batches)] if batches else []
    mia = mia_table(batches)
    return tables + ([mia] if mia else [])


#: The prefix of summary.md's headline line (:func:`render_summary`, :func:`read_headline`).
HEADLINE = "**What happened:** "


def render_summary(  # noqa: PLR0913 (the summary's parts, the optional ones defaulted)
    name: str,
    verdict: Verdict,
    rows: list[tuple[str, str]],
    tables: Sequence[Table] = (),
    extra_rows: Sequence[tuple[str, str]] = (),
    interrupted: dict[str, Any] | None = None,
    headline: str = "",
) -> str:
    """The text of ``summary.md``.

    In order: the interrupt line (if any), the title, the headline (certified updates vs
    retrains, the budget's peak and final share: :meth:`Happened.headline`), the certificate
    verdict, the (metric, value) table, the phase and attack tables, and a source's own
    section.
    """
    parts = [interrupted_line(interrupted)] if interrupted else []
    parts.append(f"# {name}")
    if headline:
        parts.append(HEADLINE + headline)
    parts += [verdict.markdown().rstrip("\n"), markdown_table(rows).rstrip("\n")]
    parts += [t.markdown().rstrip("\n") for t in tables]
    if extra_rows:
        parts.append("## Source\n\n" + markdown_table(list(extra_rows)).rstrip("\n"))
    return "\n\n".join(parts) + "\n"


def read_headline(path: Path) -> str:
    """The headline of a summary.md (empty when it has none)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(HEADLINE):
            return line[len(HEADLINE) :]
    return ""


def read_verdict(path: Path) -> list[str]:
    """The verdict of a summary.md: its ``## Certificate`` heading and bullet lines."""
    out: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## Certificate"):
            out.append(line[3:])
        elif out and line.startswith("- "):
            out.append(line[2:])
        elif out and line.startswith("|"):
            break
    return out


def read_summary(path: Path) -> list[tuple[str, str]]:
    """The (metric, value) rows of a ``summary.md``.

    Those of every table :func:`markdown_table` wrote; the verdict and the other tables are
    read by :func:`read_verdict`.
    """
    rows = []
    inside = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() == "| metric | value |":
            inside = True
            continue
        if not line.startswith("|"):
            inside = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if inside and len(cells) == 2 and not cells[0].startswith("---"):
            rows.append((cells[0], cells[1]))
    return rows


def markdown_table(rows: list[tuple[str, str]]) -> str:
    """A two-column Markdown table ``| metric | value |`` of ``rows``."""
    lines = ["| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n"


def _accuracy_panel(ax: Any, batches: list[dict[str, Any]], xs: dict[int, float]) -> PanelText:
    for i, split in enumerate(("test", "ood", "retain", "forget")):
        pts = [
            (xs[id(b)], b["metrics"][f"accuracy_{split}"])
            for b in batches
            if f"accuracy_{split}" in b.get("metrics", {})
        ]
        if pts:
            ax.plot(*zip(*pts, strict=True), label=split, **series_style(i))
    refs = [(xs[id(b)], c) for b in batches for c in b.get("checkpoints", [])]
    for split, marker in (("test", "o"), ("ood", "s")):
        pts = [
            (r, c[f"reference_accuracy_{split}"])
            for r, c in refs
            if f"reference_accuracy_{split}" in c
        ]
        if pts:
            ax.plot(
                *zip(*pts, strict=True), marker, color="k", ms=7, mfc="none",
                label=f"retrained head ({split})",
            )  # fmt: skip
    return PanelText("accuracy", "accuracy", {"loc": "lower left"})


def _budget_panel(ax: Any, batches: list[dict[str, Any]], xs: dict[int, float]) -> PanelText:
    pts = [(xs[id(b)], b["budget_used_ratio"]) for b in batches if "budget_used_ratio" in b]
    if pts:
        ax.plot(*zip(*pts, strict=True), label="budget used", **series_style(0))
    passes = [
        (xs[id(b)], b["budget_used_ratio"])
        for b in batches
        if "budget_used_ratio" in b and b.get("samples") and exact_pass(b)
    ]
    if passes:
        ax.plot(
            *zip(*passes, strict=True), "v", color="tab:green", ms=8, mfc="none", mew=1.5,
            label="exact pass (charge reset to\nthe measured residual)", gid="exact_pass",
        )  # fmt: skip
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="budget")
    accounting = next((b["accounting"] for b in batches if "accounting" in b), "?")
    return PanelText(
        "charge of the released head / budget",
        f"certificate budget, {accounting} accounting",
        {"loc": "upper left"},
    )


def _residual_panel(ax: Any, batches: list[dict[str, Any]], xs: dict[int, float]) -> PanelText:
    for i, (key, label) in enumerate(
        (
            ("residual_worst", "worst-case bound (step)"),
            ("residual_data", "data-dependent bound (step, charged by guo)"),
            ("residual_tight", "tight bound (step, charged by anchored)"),
            ("residual_exact", "exact residual of the head"),
        )
    ):
        pts = [(xs[id(b)], b[key]) for b in batches if b.get(key)]
        if pts:
            ax.semilogy(*zip(*pts, strict=True), label=label, **series_style(i))
    return PanelText("gradient residual (L2 over the stacked head)", "residual per batch")


#: The run's own plots: file name and the function that draws its panel.
RUN_PANELS = (
    ("accuracy.png", _accuracy_panel),
    ("budget.png", _budget_panel),
    ("residuals.png", _residual_panel),
)


def plot_run(
    folder: Path,
    batches: list[dict[str, Any]],
    title: str,
    shifts: Sequence[tuple[str, int]] = (),
    *,
    axis: Axis = "tick",
    phases: Sequence[tuple[str, int, int]] = (),
) -> dict[str, Any]:
    """PNG curves over the stream tick (or the batch index), with the stream's events marked.

    Samples removed are on the top axis; phases, shifts, withdrawals, retrains and alarms are
    marked (:mod:`.plot_marks`). ``shifts``: (label, start tick) of the scenario's shifts;
    ``phases``: (name, first tick, last tick) of its phases; ``axis``: ``tick`` or ``batch``.
    Returns the (closed) figures by file name, so their artists can be inspected.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    marks = stream_marks(batches, shifts, axis=axis, phases=phases)
    xs = {id(b): marks.x(b, i) for i, b in enumerate(batches)}
    figures: dict[str, Any] = {}
    for name, draw in RUN_PANELS:
        fig, ax = plt.subplots(figsize=(10, 4.5))
        finish_panel(ax, marks, title, draw(ax, batches, xs))
        figures[name] = save_figure(fig, folder / name)
    figures.update(plot_privacy_drift(folder, batches, title, marks))
    return figures


def scenario_marks(scenario: Any) -> dict[str, Any]:
    """``plot_run``'s ``shifts`` and ``phases`` of a scenario (its timed shifts and phases)."""
    stream = scenario.stream
    return {
        "shifts": [(f"shift: {s.kind}", s.start) for s in scenario.shifts],
        "phases": [
            (p.name, start, start + p.ticks - 1)
            for start, p in zip(stream.phase_starts(), stream.phases, strict=True)
        ],
    }
