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
from simulator.compare.verdict import CORRECTION, Paired, bottom_line, verdict_markdown

#: Measurement fields aggregated over seeds, in CSV column order (after the split scores,
#: ``acc_<split>``, ``f1_<split>``, ``conf_<split>``, ... in the workload's split order).
METRICS: tuple[str, ...] = (
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
        """The statistics of the finite ``values`` (NaN and infinities are left out)."""
        arr = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
        if arr.size == 0:
            return cls(float("nan"), float("nan"))
        std = float(arr.std(ddof=1)) if arr.size > 1 else float("nan")
        return cls(float(arr.mean()), std)

    def text(self, digits: int, scale: float = 1.0) -> str:
        """``mean ± std`` of the values times ``scale`` with ``digits`` decimals (``n/a``: none)."""
        if not math.isfinite(self.mean):
            return "n/a"
        mean = f"{self.mean * scale:.{digits}f}"
        if not math.isfinite(self.std):
            return mean
        return f"{mean} ± {self.std * scale:.{digits}f}"


@dataclass(frozen=True)
class Summary:
    """One method at one removal count, aggregated over seeds.

    Attributes
    ----------
    method, removed
        Which method, after how many removals.
    seeds : int
        Number of seeds aggregated.
    stats : dict of str to Stat
        Mean and standard deviation of every column (fixed metrics and split scores).
    """

    method: str
    removed: int
    seeds: int
    stats: dict[str, Stat]


def score_keys(measurements: Iterable[Measurement]) -> list[str]:
    """Split score names in first-seen order (``acc_test``, ``f1_test``, ``conf_test``, ...)."""
    keys: list[str] = []
    for m in measurements:
        keys.extend(k for k in m.scores if k not in keys)
    return keys


def splits_of(keys: Iterable[str]) -> tuple[list[str], list[str]]:
    """(labelled splits, unlabelled splits) named by the score keys, in order."""
    labelled: list[str] = []
    other: list[str] = []
    keys = [k for k in keys if k not in METRICS]
    for k in keys:
        kind, split = k.split("_", 1)
        if kind == "acc" and split not in labelled:
            labelled.append(split)
    for k in keys:
        kind, split = k.split("_", 1)
        if split not in labelled and split not in other:
            other.append(split)
    return labelled, other


def summarize(measurements: Sequence[Measurement], methods: Sequence[str]) -> list[Summary]:
    """Aggregate per (method, removal count), methods in the given order."""
    keys = [*score_keys(measurements), *METRICS]
    groups: dict[tuple[str, int], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.method, m.removed), []).append(m)
    out = []
    for method in methods:
        for removed in sorted(r for (name, r) in groups if name == method):
            rows = groups[(method, removed)]
            stats = {k: Stat.of(m.value(k) for m in rows) for k in keys}
            out.append(Summary(method, removed, len(rows), stats))
    return out


def summary_csv(summaries: Sequence[Summary]) -> str:
    """CSV text: method, removed, seeds, then ``<metric>_mean`` and ``<metric>_std``."""
    keys = list(summaries[0].stats) if summaries else list(METRICS)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        ["method", "removed", "seeds"] + [f"{k}_{s}" for k in keys for s in ("mean", "std")]
    )
    for row in summaries:
        values: list[object] = [row.method, row.removed, row.seeds]
        for k in keys:
            values += [_num(row.stats[k].mean), _num(row.stats[k].std)]
        writer.writerow(values)
    return buf.getvalue()


def runs_csv(measurements: Sequence[Measurement]) -> str:
    """CSV text with one row per method, seed and checkpoint (no aggregation).

    Every number is written exactly (the shortest text that reads back as the same float):
    ``compare retable`` recomputes the tables from this file, and a value rounded here could
    move a mean across a rounding boundary of the table (a timing's 2.315 shown as 2.31
    instead of 2.32).
    """
    fixed = [f.name for f in fields(Measurement) if f.name not in ("predictions", "scores")]
    names = [*fixed[:3], *score_keys(measurements), *fixed[3:]]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for m in measurements:
        writer.writerow([m.method, m.seed, m.removed] + [_exact(m.value(k)) for k in names[3:]])
    return buf.getvalue()


def _exact(value: object) -> object:
    """A float as the shortest text that reads back as the same float ("" where not finite)."""
    if isinstance(value, float):
        return "" if not math.isfinite(value) else repr(float(value))
    return value


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


def sentence(text: str) -> str:
    """``text`` with its first letter in upper case (the rest as it is)."""
    return text[:1].upper() + text[1:]


def markdown(
    comparison: Comparison,
    summaries: Sequence[Summary],
    verdict_rows: Sequence[Paired] = (),
    split_notes: Sequence[str] = (),
) -> str:
    """All tables of one comparison (see the module docstring), the verdict table first."""
    methods = list(comparison.methods)
    labelled, other = splits_of(summaries[0].stats if summaries else [])
    seeds = ", ".join(str(s) for s in comparison.seeds)
    out = [
        f"# Comparison: {comparison.scenario}",
        "",
        f"Methods: {', '.join(methods)}. Seeds: {seeds} (mean ± std over seeds). "
        "`removed` = samples removed so far (0 = the trained model before any removal).",
        "",
    ]
    if split_notes:
        out += ["Evaluation splits:", ""] + [f"* {n}" for n in split_notes] + [""]
    if verdict_rows:
        last = max(r.removed for r in verdict_rows)
        out += [
            f"## Verdict: DecoRemoval - CR, paired over seeds, at {last} removed "
            "(accuracy in points; every checkpoint in `verdict.csv`)",
            "",
        ]
        out += verdict_markdown(
            [r for r in verdict_rows if r.metric.startswith("acc_")], removed=last
        )
        out += [
            "",
            "Higher accuracy and F1 are better. Verdicts read the p value "
            f"{CORRECTION}, over all {len(verdict_rows)} tests of `verdict.csv` (every split, "
            "metric and removal count).",
            "",
            f"**{sentence(bottom_line(verdict_rows))}**",
            "",
        ]
    for split in labelled:
        title = {
            "test": "In-distribution test split (paper Table 3)",
            "label_swap": "label_swap split: 10% of class A's test rows labelled B "
            "(the paper's 'OOD' construction, Table 1; label noise, not a shift)",
        }.get(split, f"{split} split (shifted; see the split list above)")
        out += [f"## {title}: ACC (%) / F1", ""]
        out += _wide(
            summaries, methods, [("ACC", f"acc_{split}", 1, 100.0), ("F1", f"f1_{split}", 3, 1.0)]
        )
        out.append("")
    for split in other:
        cells = [("conf", f"conf_{split}", 3, 1.0), ("top", f"top_{split}", 3, 1.0)]
        if summaries and f"pos_{split}" in summaries[0].stats:
            cells.append(("pos", f"pos_{split}", 3, 1.0))
        out += [
            f"## {split} split (classes the model was not trained on): mean top-class "
            "probability (conf), share of the most predicted class (top)"
            + (", share predicted as the second class (pos)" if len(cells) == 3 else ""),
            "",
        ]
        out += _wide(summaries, methods, cells)
        out.append("")
    out += ["## Removal time (s, summed over removal calls so far; paper Table 2)", ""]
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
            "## Distance to retrain: share of predictions (labelled splits) that differ from "
            "retrain's / test ACC gap (points)",
            "",
        ]
        others = [m for m in methods if m != "retrain"]
        out += _wide(
            summaries, others, [("diff", "disagreement", 3, 1.0), ("ΔACC", "acc_gap", 1, 100.0)]
        )
    if comparison.notes:
        out += ["", "## Notes", ""] + [f"* {n}" for n in comparison.notes]
    return "\n".join(out) + "\n"
