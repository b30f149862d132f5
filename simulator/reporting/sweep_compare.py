"""Paired verdicts and overlaid plots of a seeded sweep (``unlearnsim compare runs PARENT``).

A sweep (:mod:`simulator.runner.sweep`) ran the streaming scenario once per seed and method;
every seed gives each method the same data, federation, stream and shifts, so the seeds pair
the methods. For every phase of the stream (in stream order, then ``whole run``) and metric,
each run's value is read from its deletion-batch events (:data:`PHASE_METRICS`: the last
measured value in the phase, the retrains in it, its mean removal time) and its end event
(:data:`RUN_METRICS`); every other method is paired with the base (``cr`` when swept, else the
first method) by :func:`simulator.compare.verdict.paired_values`, the statistics of
``unlearnsim compare``: the paired difference ``method - base``, its 95% t interval and the
paired t test's p value (an exact sign test when the differences are all equal), with the p
values of the whole table adjusted together by Holm's method. Each metric states which way is
better (:data:`DIRECTIONS`: higher accuracy; lower budget used, retrains and time; the attack
AUC judged by its distance to 0.5, lower), and the verdict says it in words: ``DR better``,
``CR better`` or ``no difference`` (familywise 95%), with one bottom line over the table
(:func:`sweep_bottom_line`). A sweep of one method has nothing to pair and says so.

:func:`plot_sweep` overlays every run over the stream tick, one colour per method and one line
style (and marker) per seed, so a seed's runs pair up: test accuracy, budget used and the loss
attack's AUC, with the scenario's phases shaded, its shifts drawn, and each run's retrains as
ticks along the bottom.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.compare.verdict import (
    CORRECTION,
    Paired,
    Pairing,
    holm_adjusted,
    label,
    paired_values,
)
from simulator.reporting.flat import Scalar
from simulator.reporting.plot_marks import (
    LEGEND_OUTSIDE,
    StreamMarks,
    decorate,
    save_figure,
)
from simulator.reporting.runs_compare import (
    VERDICTS_CSV,
    RunSummary,
    compare_table,
    load_run,
    retrain_ticks,
    run_marks,
    write_compare,
)
from simulator.runner.sweep import SweepRun, read_sweep, sweep_runs

#: The loss attack's AUC as it is judged: its distance to 0.5 (chance), lower is better.
AUC_METRIC = "MIA |AUC - 0.5| (loss attack)"
#: Which way each metric is better: ``higher``, ``lower``, or ``None`` (no better or worse:
#: the forget set's accuracy should match a retrain from scratch, which a sweep does not run).
DIRECTIONS: dict[str, str | None] = {
    "test accuracy": "higher",
    "OOD accuracy": "higher",
    "forget accuracy": None,
    AUC_METRIC: "lower",
    "budget used": "lower",
    "retrains": "lower",
    "removal ms per batch": "lower",
    "wall seconds": "lower",
}
#: Per phase: (name, batch column, how): ``last`` value measured in the phase, ``sum`` of
#: retrains, ``mean`` over its batches (the removal time, in ms).
PHASE_METRICS: tuple[tuple[str, str, str], ...] = (
    ("test accuracy", "metrics.accuracy_test", "last"),
    ("OOD accuracy", "metrics.accuracy_ood", "last"),
    ("forget accuracy", "metrics.accuracy_forget", "last"),
    (AUC_METRIC, "privacy.attacks.loss.auc", "last"),
    ("budget used", "budget_used_ratio", "last"),
    ("retrains", "retrained", "sum"),
    ("removal ms per batch", "timings.total", "mean"),
)
#: Over the whole run, from the end event (``metrics.json``): (name, dotted key).
RUN_METRICS: tuple[tuple[str, str], ...] = (
    ("test accuracy", "metrics.accuracy_test"),
    ("OOD accuracy", "metrics.accuracy_ood"),
    ("retrains", "retrains"),
    ("wall seconds", "wall_seconds"),
)
WHOLE_RUN = "whole run"
#: Line styles and markers of the seeds in the overlays (colour is the method's).
SEED_STYLES = ("-", "--", ":", "-.")
SEED_MARKERS = ("o", "s", "^", "D", "v", "P")
#: The columns of ``verdicts.csv``.
CSV_COLUMNS = (
    *("phase", "metric", "method", "base", "seeds", "mean_method", "std_method"),
    *("mean_base", "std_base", "diff", "t_low", "t_high", "p_value", "verdict"),
    *("p_holm", "better"),
)


@dataclass(frozen=True)
class Sweep:
    """A sweep's parent folder, read back: its manifest and every run found, in order."""

    parent: Path
    manifest: dict[str, Any]
    runs: list[tuple[SweepRun, RunSummary]]

    @property
    def methods(self) -> list[str]:
        """The swept methods, in the sweep's order."""
        return [str(m) for m in self.manifest.get("methods", [])]

    @property
    def base(self) -> str:
        """The method the others are paired with: ``cr`` when swept, else the first."""
        return "cr" if "cr" in self.methods else self.methods[0]


@dataclass(frozen=True)
class SweepVerdict:
    """One paired comparison: a phase, a metric and the statistics."""

    phase: str
    metric: str
    stats: Paired

    @property
    def direction(self) -> str | None:
        """Which way the metric is better (:data:`DIRECTIONS`)."""
        return DIRECTIONS.get(self.metric)

    @property
    def verdict(self) -> str:
        """``DR better`` / ``CR better`` / ``no difference`` / ``n/a`` (Holm-adjusted, 95%).

        For a metric with no better direction (:data:`DIRECTIONS`): ``DR higher`` / ``DR
        lower``.
        """
        s = self.stats
        if not (math.isfinite(s.low) and math.isfinite(s.p_value)):
            return "n/a"
        if not s.significant:
            return "no difference"
        if self.direction is None:
            return f"{label(s.method)} {'higher' if s.diff > 0 else 'lower'}"
        method_wins = (s.diff > 0) == (self.direction == "higher")
        return f"{label(s.method if method_wins else s.base)} better"


def is_sweep(folder: str | Path) -> bool:
    """``folder`` is a sweep's parent (it holds a ``sweep.json`` a sweep wrote)."""
    return read_sweep(folder) is not None


def load_sweep(parent: str | Path) -> Sweep:
    """Read a sweep and every run of it that has a folder."""
    manifest = read_sweep(parent) or {}
    runs = [(run, load_run(folder)) for run, folder in sweep_runs(parent)]
    return Sweep(Path(parent), manifest, runs)


def _number(v: Scalar) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float) and math.isfinite(v):
        return float(v)
    return None


def phase_values(run: RunSummary) -> dict[tuple[str, str], float]:
    """(phase, metric) -> value of one run (module docstring), ``whole run`` included."""
    by_phase: dict[str, list[dict[str, Scalar]]] = {}
    for b in run.batches:
        by_phase.setdefault(str(b.get("phase", "?")), []).append(b)
    out: dict[tuple[str, str], float] = {}
    for phase, group in by_phase.items():
        for name, key, how in PHASE_METRICS:
            got = _phase_value(group, key, how)
            if got is not None:
                out[phase, name] = abs(got - 0.5) if name == AUC_METRIC else got
    final = run.final
    for name, key in RUN_METRICS:
        if key == "retrains":
            reasons = ("budget", "method", "client_failed", "extractor_limit")
            out[WHOLE_RUN, name] = float(sum(int(final.get(f"retrains_{r}") or 0) for r in reasons))
            continue
        value: Any = final
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if (v := _number(value)) is not None:
            out[WHOLE_RUN, name] = v
    return out


def _phase_value(group: list[dict[str, Scalar]], key: str, how: str) -> float | None:
    """One metric of one phase's batches: ``last`` value, ``sum`` of retrains, ``mean`` in ms."""
    if how == "sum":
        return float(sum(bool(b.get(key)) and bool(b.get("samples")) for b in group))
    values = [v for b in group if (v := _number(b.get(key))) is not None]
    if not values:
        return None
    return values[-1] if how == "last" else 1e3 * sum(values) / len(values)


def phase_order(sweep: Sweep) -> list[str]:
    """The phases in stream order (as the runs met them), then ``whole run``."""
    seen: dict[str, None] = {}
    for _, run in sweep.runs:
        seen.update((str(b.get("phase", "?")), None) for b in run.batches)
    return [*seen, WHOLE_RUN]


def sweep_verdicts(sweep: Sweep) -> list[SweepVerdict]:
    """Every method against the base, per phase and metric, paired over the seeds."""
    values = {(run.method, run.seed): phase_values(summary) for run, summary in sweep.runs}
    names = [n for n, _, _ in PHASE_METRICS]
    out = []
    for i, phase in enumerate(phase_order(sweep)):
        metrics = [n for n, _ in RUN_METRICS] if phase == WHOLE_RUN else names
        for metric in metrics:
            for method in sweep.methods:
                if method == sweep.base:
                    continue

                def of(m: str, phase: str = phase, metric: str = metric) -> dict[int, float]:
                    return {
                        seed: v[phase, metric]
                        for (name, seed), v in values.items()
                        if name == m and (phase, metric) in v
                    }

                got = paired_values(
                    of(method), of(sweep.base), Pairing(method, sweep.base, metric, i)
                )
                if got is not None:
                    out.append(SweepVerdict(phase, metric, got))
    adjusted = holm_adjusted([r.stats for r in out])
    return [SweepVerdict(r.phase, r.metric, a) for r, a in zip(out, adjusted, strict=True)]


def sweep_bottom_line(rows: Sequence[SweepVerdict]) -> str:
    """One line: each verdict's count over the table, and where a method was better."""
    if not rows:
        return "bottom line: nothing was paired"
    counts: dict[str, list[str]] = {}
    for r in rows:
        counts.setdefault(r.verdict, []).append(f"{r.metric} ({r.phase})")
    parts = []
    for verdict, where in sorted(counts.items(), key=lambda kv: -len(kv[1])):
        named = f": {'; '.join(where)}" if verdict.endswith("better") else ""
        parts.append(f"{verdict} in {len(where)}{named}")
    return f"bottom line over {len(rows)} paired tests ({CORRECTION}): " + ", ".join(parts)


def better_text(metric: str) -> str:
    """How the tables state a metric's direction: ``higher``, ``lower`` or ``neither``."""
    return DIRECTIONS.get(metric) or "neither"


def scale_of(metric: str) -> float:
    """100 for a share shown in percent (accuracies, budget used), else 1."""
    return 100.0 if "accuracy" in metric or metric == "budget used" else 1.0


def shown(v: float, metric: str, *, sign: bool = True) -> str:
    """``v`` as the tables show ``metric``: percent with 2 decimals, else 3 significant digits."""
    if not math.isfinite(v):
        return "n/a"
    k = scale_of(metric)
    v = 0.0 if abs(v) < 1e-12 else v * k
    plus = "+" if sign else ""
    return f"{v:{plus}.2f}" if k == 100.0 else f"{v:{plus}.3g}"


def _cell(mean: float, std: float, metric: str) -> str:
    text = shown(mean, metric, sign=False)
    if text == "n/a" or not math.isfinite(std):
        return text
    return f"{text} ± {shown(std, metric, sign=False)}"


def difference(s: Paired, metric: str) -> str:
    """``+d [low, high]``: the paired difference and its 95% t interval, as shown."""
    return f"{shown(s.diff, metric)} [{shown(s.low, metric)}, {shown(s.high, metric)}]"


def verdict_markdown(rows: Sequence[SweepVerdict]) -> str:
    """The verdicts as a Markdown table (accuracies and budget in percent)."""
    lines = [
        "| phase | metric | better | method vs base | seeds | method | base | difference [95% "
        "t interval] | p (paired t) | p (Holm) | verdict |",
        "|" + "---|" * 11,
    ]
    for r in rows:
        s, m = r.stats, r.metric
        unit = " %" if scale_of(m) == 100.0 else ""
        lines.append(
            f"| {r.phase} | {m}{unit} | {better_text(m)} | {label(s.method)} vs {label(s.base)} "
            f"| {s.seeds} | {_cell(s.mean_method, s.std_method, m)} "
            f"| {_cell(s.mean_base, s.std_base, m)} | {difference(s, m)} | {p_text(s.p_value)} "
            f"| {p_text(s.p_holm)} | {r.verdict} |"
        )
    return "\n".join(lines) + "\n"


def p_text(v: float) -> str:
    """A p value as the tables show it (``n/a`` when there is none)."""
    return "n/a" if not math.isfinite(v) else f"{v:.3g}"


def verdict_csv(rows: Sequence[SweepVerdict]) -> str:
    """The verdicts as CSV (raw values, accuracies as fractions)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        s = r.stats
        nums = (s.mean_method, s.std_method, s.mean_base, s.std_base, s.diff, s.low, s.high,
                s.p_value)  # fmt: skip
        w.writerow(
            [r.phase, r.metric, s.method, s.base, s.seeds]
            + [f"{v:.6g}" if math.isfinite(v) else "" for v in nums]
            + [r.verdict, f"{s.p_holm:.6g}" if math.isfinite(s.p_holm) else ""]
            + [better_text(r.metric)]
        )
    return buf.getvalue()


def sweep_markdown(sweep: Sweep, rows: Sequence[SweepVerdict]) -> str:
    """``compare.md``'s sweep section: what was swept, how to read it, and the verdicts."""
    seeds = sorted({run.seed for run, _ in sweep.runs})
    command = " ".join(str(c) for c in sweep.manifest.get("command", []))
    head = [
        f"# Seeded sweep: {sweep.manifest.get('scenario', '?')}",
        "",
        f"Methods {', '.join(sweep.methods)}; seeds {', '.join(map(str, seeds))}; "
        f"{len(sweep.runs)} runs in `{sweep.parent}`.",
    ]
    if command:
        head += ["", f"Command: `{command}`"]
    head += [
        "",
        f"Each method against {label(sweep.base)}, paired over the seeds (the same data, "
        "federation, stream and shifts per seed): per phase, the value at the end of the phase "
        "(retrains: counted in it; removal time: its mean), then the whole run. The difference "
        "is method - base with its 95% t interval and the paired t test's p value. Which way "
        "is better is stated per metric (`better`): higher accuracy; lower budget used, "
        "retrains and time; an attack AUC nearer 0.5 (judged as |AUC - 0.5|, lower); the "
        "forget set's accuracy has no better side (it should match a retrain from scratch). "
        f"The verdict reads the p value {CORRECTION}: the better method, or no difference.",
        "",
    ]
    if len(sweep.methods) < 2:
        return "\n".join([*head, NOTHING_TO_PAIR.format(methods=", ".join(sweep.methods))]) + "\n"
    head += [f"**{sweep_bottom_line(rows)}**", "", "## Paired verdicts", ""]
    return "\n".join(head) + "\n" + verdict_markdown(rows)


#: What a sweep of one method says instead of a table of verdicts.
NOTHING_TO_PAIR = (
    "Nothing to pair: the sweep ran one method ({methods}). Paired verdicts need two, e.g. "
    "`unlearnsim run SCENARIO --seeds 3 --methods cr,decoremoval`."
)


def _tick_points(run: RunSummary, key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for b in run.batches:
        x, y = _number(b.get("tick")), _number(b.get(key))
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


def plot_sweep(sweep: Sweep, out: Path) -> dict[str, Any]:
    """Write the overlaid plots of a sweep into ``out`` (module docstring); figures by name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    marks = run_marks(sweep.runs[0][1]) if sweep.runs else StreamMarks()
    colours = {m: f"C{i % 10}" for i, m in enumerate(sweep.methods)}
    seeds = sorted({run.seed for run, _ in sweep.runs})
    styles = {s: (SEED_STYLES[i % len(SEED_STYLES)], SEED_MARKERS[i % len(SEED_MARKERS)])
              for i, s in enumerate(seeds)}  # fmt: skip
    keys = [Line2D([], [], color=colours[m], lw=1.5, label=m) for m in sweep.methods]
    keys += [Line2D([], [], color="0.3", ls=styles[s][0], marker=styles[s][1], ms=3,
                    label=f"seed {s}") for s in seeds]  # fmt: skip
    figures: dict[str, Any] = {}
    for name, key, ylabel in (
        ("accuracy.png", "metrics.accuracy_test", "test accuracy"),
        ("budget.png", "budget_used_ratio", "charge of the released head / budget"),
        ("mia.png", "privacy.attacks.loss.auc", "MIA AUC, loss attack (forget vs holdout)"),
    ):
        fig, ax = plt.subplots(figsize=(10, 4.5))
        retrained: set[str] = set()
        for run, summary in sweep.runs:
            xs, ys = _tick_points(summary, key)
            style, marker = styles[run.seed]
            if xs:
                ax.plot(xs, ys, color=colours[run.method], lw=1.2, alpha=0.75, ls=style,
                        marker=marker, ms=3, gid=f"{run.method}-seed{run.seed}")  # fmt: skip
            row = sweep.methods.index(run.method)
            entry = None if run.method in retrained else f"retrains ({run.method}, every seed)"
            if retrain_ticks(ax, summary, {"color": colours[run.method]}, row, entry):
                retrained.add(run.method)
        if key == "budget_used_ratio":
            ax.axhline(1.0, color="k", lw=0.8, ls="--", label="budget")
        if key.endswith(".auc"):
            ax.axhline(0.5, color="k", lw=0.8, ls="--", label="chance (0.5)")
        decorate(ax, marks, secondary=False)
        ax.set_ylabel(ylabel)
        ax.set_title(
            f"{sweep.manifest.get('scenario', '?')}: {ylabel}, colour: method, line: seed",
            fontsize=10,
        )
        handles, _ = ax.get_legend_handles_labels()
        ax.legend(handles=[*keys, *handles], fontsize=7, **LEGEND_OUTSIDE)
        ax.grid(alpha=0.3)
        figures[name] = save_figure(fig, out / name)
    return figures


def write_sweep_compare(sweep: Sweep, out: Path, rows: Sequence[SweepVerdict]) -> Path:
    """Write ``compare.md`` and ``verdicts.csv`` into ``out``; returns ``compare.md``'s path.

    ``compare.md``: the sweep, its verdicts (:func:`sweep_markdown`), its runs side by side.
    """
    header, table = compare_table([summary for _, summary in sweep.runs])
    path = write_compare(out, header, table, before=sweep_markdown(sweep, rows))
    (out / VERDICTS_CSV).write_text(verdict_csv(rows), encoding="utf-8")
    return path
