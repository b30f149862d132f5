"""Mean and standard deviation over seeds, as CSV rows and paper-style Markdown tables.

The Markdown follows the layout of DecoRemoval's tables: one row per removal count, one column
(or column pair) per method, cells ``mean ± std`` over seeds (sample standard deviation,
``ddof=1``; a single seed shows the mean only). Accuracies are in percent, F1 in [0, 1].
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from simulator.compare.harness import Comparison, Measurement

#: Measurement fields aggregated over seeds, in CSV column order.
METRICS: tuple[str, ...] = (
    "acc_test",
    "f1_test",
    "acc_ood",
    "f1_ood",
    "removal_seconds",
    "removal_calls",
    "retrains",
    "mia_auc",
    "disagreement",
    "acc_gap",
    "fit_seconds",
)


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation (NaN with fewer than two finite values)."""

    mean: float
    std: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat:
        arr = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
        if arr.size == 0:
            return cls(float("nan"), float("nan"))
        std = float(arr.std(ddof=1)) if arr.size > 1 else float("nan")
        return cls(float(arr.mean()), std)

    def text(self, digits: int, scale: float = 1.0) -> str:
        if not math.isfinite(self.mean):
            return "n/a"
        mean = f"{self.mean * scale:.{digits}f}"
        if not math.isfinite(self.std):
            return mean
        return f"{mean} ± {self.std * scale:.{digits}f}"


@dataclass(frozen=True)
class Summary:
    """One method at one removal count, aggregated over seeds."""

    method: str
    removed: int
    seeds: int
    stats: dict[str, Stat]


def summarize(measurements: Sequence[Measurement], methods: Sequence[str]) -> list[Summary]:
    """Aggregate per (method, removal count), methods in the given order."""
    groups: dict[tuple[str, int], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.method, m.removed), []).append(m)
    out = []
    for method in methods:
        for removed in sorted(r for (name, r) in groups if name == method):
            rows = groups[(method, removed)]
            stats = {k: Stat.of(float(getattr(m, k)) for m in rows) for k in METRICS}
            out.append(Summary(method, removed, len(rows), stats))
    return out


def summary_csv(summaries: Sequence[Summary]) -> str:
    """CSV text: method, removed, seeds, then ``<metric>_mean`` and ``<metric>_std``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        ["method", "removed", "seeds"] + [f"{k}_{s}" for k in METRICS for s in ("mean", "std")]
    )
    for row in summaries:
        values: list[object] = [row.method, row.removed, row.seeds]
        for k in METRICS:
            values += [_num(row.stats[k].mean), _num(row.stats[k].std)]
        writer.writerow(values)
    return buf.getvalue()


def runs_csv(measurements: Sequence[Measurement]) -> str:
    """CSV text with one row per method, seed and checkpoint (no aggregation)."""
    names = [f.name for f in fields(Measurement) if f.name != "predictions"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for m in measurements:
        writer.writerow([_num(getattr(m, k)) if k not in ("method",) else m.method for k in names])
    return buf.getvalue()


def _num(value: object) -> object:
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.6g}"
    return value


def _wide(
    summaries: Sequence[Summary],
    methods: Sequence[str],
    cells: Sequence[tuple[str, str, int, float]],
) -> list[str]:
    """Rows = removal counts, one column per (method, cell); ``cells``: (label, key, digits, x)."""
    by = {(s.method, s.removed): s for s in summaries}
    counts = sorted({s.removed for s in summaries})
    head = ["removed"] + [f"{m} {label}".strip() for m in methods for label, *_ in cells]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in counts:
        row = [str(n)]
        for m in methods:
            s = by.get((m, n))
            for _, key, digits, scale in cells:
                row.append(s.stats[key].text(digits, scale) if s is not None else "n/a")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def ratio_to(summaries: Sequence[Summary], methods: Sequence[str], base: str) -> list[str]:
    """Rows = removal counts, cells = mean removal seconds divided by ``base``'s."""
    by = {(s.method, s.removed): s for s in summaries}
    counts = sorted({s.removed for s in summaries if s.removed > 0})
    lines = ["| removed | " + " | ".join(methods) + " |", "|" + "---|" * (len(methods) + 1)]
    for n in counts:
        ref = by.get((base, n))
        row = [str(n)]
        for m in methods:
            s = by.get((m, n))
            ok = s is not None and ref is not None and ref.stats["removal_seconds"].mean > 0
            if ok:
                assert s is not None and ref is not None
                value = s.stats["removal_seconds"].mean / ref.stats["removal_seconds"].mean
                row.append(f"{value:.3g}")
            else:
                row.append("n/a")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def markdown(comparison: Comparison, summaries: Sequence[Summary]) -> str:
    """All tables of one comparison (see the module docstring)."""
    methods = list(comparison.methods)
    has_ood = any(math.isfinite(s.stats["acc_ood"].mean) for s in summaries)
    seeds = ", ".join(str(s) for s in comparison.seeds)
    out = [
        f"# Comparison: {comparison.scenario}",
        "",
        f"Methods: {', '.join(methods)}. Seeds: {seeds} (mean ± std over seeds). "
        "`removed` = samples removed so far (0 = the trained model before any removal).",
        "",
    ]
    if has_ood:
        out += ["## OOD split: ACC (%) / F1 (paper Table 1; closer to retrain is better)", ""]
        out += _wide(summaries, methods, [("ACC", "acc_ood", 1, 100.0), ("F1", "f1_ood", 3, 1.0)])
        out.append("")
    out += ["## In-distribution test split: ACC (%) / F1 (paper Table 3)", ""]
    out += _wide(summaries, methods, [("ACC", "acc_test", 1, 100.0), ("F1", "f1_test", 3, 1.0)])
    out += ["", "## Removal time (s, summed over removal calls so far; paper Table 2)", ""]
    out += _wide(summaries, methods, [("", "removal_seconds", 3, 1.0)])
    if "cr" in methods:
        out += ["", "Ratio to `cr` (mean time / mean `cr` time):", ""]
        out += ratio_to(summaries, methods, "cr")
    out += ["", "Retrains (fallbacks to training from scratch, summed over calls so far):", ""]
    out += _wide(summaries, methods, [("", "retrains", 1, 1.0)])
    out += [
        "",
        "## Membership inference: loss-threshold AUC, removed samples vs test "
        "(0.5 = indistinguishable; compare with retrain)",
        "",
    ]
    out += _wide([s for s in summaries if s.removed > 0], methods, [("", "mia_auc", 3, 1.0)])
    if "retrain" in methods:
        out += [
            "",
            "## Distance to retrain: share of test+OOD predictions that differ from retrain's "
            "/ OOD ACC gap (points)",
            "",
        ]
        others = [m for m in methods if m != "retrain"]
        out += _wide(
            summaries, others, [("diff", "disagreement", 3, 1.0), ("ΔACC", "acc_gap", 1, 100.0)]
        )
    if comparison.notes:
        out += ["", "## Notes", ""] + [f"* {n}" for n in comparison.notes]
    return "\n".join(out) + "\n"
