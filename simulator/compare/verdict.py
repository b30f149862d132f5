"""Does DecoRemoval beat CR? Paired differences over seeds, a 95% interval and a verdict.

Every seed gives both methods the same data, splits, deletion stream and extractor seed
(``workload.py``), so the seeds pair the two methods: for a split's accuracy at a removal
count, ``d_s = acc_DR(s) - acc_CR(s)``. With ``k`` seeds the paired t statistic is
``t = mean(d) / (sd(d) / sqrt(k))`` (Student, ``k - 1`` degrees of freedom) and the 95%
interval ``mean(d) ± t_{0.975, k-1} sd(d) / sqrt(k)``. Higher is better for every metric
compared here (accuracy, F1). The p values of a table are adjusted together by Holm's
step-down method (:func:`holm`), so that a table of many tests does not find a difference by
chance; the verdict reads the adjusted p value at 95% and the sign of the difference: "DR
better", "CR better" or "no difference" (two-sided), and :func:`bottom_line` counts them.
With identical differences (``sd = 0`` up to rounding, :data:`SAME`; common with accuracies
on a few hundred rows) the t statistic is undefined; the interval is then the point itself and
the p value is the exact two-sided sign test's, ``2 * 0.5^k`` (1 when the difference is 0), so
one image's difference repeated on every seed is not a verdict unless ``k >= 6``.

A seeded percentile bootstrap interval of the mean difference (10,000 resamples of the seeds)
is reported next to it as a check that does not assume normal differences; with 5 seeds it is
narrower than the t interval and the verdict uses the t interval. The t test and its interval
are scipy's ``ttest_rel`` and its ``confidence_interval``, the bootstrap ``scipy.stats.bootstrap``
(percentile method); Holm's adjustment is written out (:func:`holm`: scipy has only
Benjamini-Hochberg's).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from simulator.compare.harness import Measurement

#: Two-sided level of every interval and verdict.
LEVEL = 0.95
#: Relative spread below which the seeds' differences count as equal (floating-point rounding
#: of equal differences must not read as a t statistic of 10^13).
SAME = 1e-12
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class Paired:
    """Paired difference ``method - base`` of one metric at one removal count."""

    method: str
    base: str
    metric: str
    removed: int
    seeds: int
    mean_method: float
    std_method: float
    mean_base: float
    std_base: float
    diff: float
    low: float
    high: float
    p_value: float
    boot_low: float
    boot_high: float
    #: the p value adjusted for the table's other tests (Holm; NaN until :func:`holm_adjusted`)
    p_holm: float = float("nan")

    @property
    def p_judged(self) -> float:
        """The p value the verdict reads: Holm's where the table was adjusted, else the test's."""
        return self.p_holm if math.isfinite(self.p_holm) else self.p_value

    @property
    def significant(self) -> bool:
        """The difference is not 0 at 95% (familywise over the table once adjusted)."""
        return math.isfinite(self.p_judged) and self.p_judged < 1 - LEVEL and self.diff != 0

    @property
    def verdict(self) -> str:
        """``<method> better`` / ``no difference`` / ``<base> better`` (higher is better)."""
        if not (math.isfinite(self.low) and math.isfinite(self.p_value)):
            return "n/a"
        if not self.significant:
            return "no difference"
        return f"{label(self.method if self.diff > 0 else self.base)} better"


def label(method: str) -> str:
    """Short name of a method in a verdict (DR, DR-x, CR)."""
    return {"decoremoval": "DR", "decoremoval_extractor": "DR-x", "cr": "CR"}.get(method, method)


def paired(
    measurements: Sequence[Measurement], method: str, base: str, metric: str, removed: int
) -> Paired | None:
    """The paired comparison of ``metric`` between two methods at ``removed`` (None if unpaired)."""
    a = {
        m.seed: m.value(metric) for m in measurements if m.method == method and m.removed == removed
    }
    b = {m.seed: m.value(metric) for m in measurements if m.method == base and m.removed == removed}
    return paired_values(a, b, Pairing(method, base, metric, removed))


@dataclass(frozen=True)
class Pairing:
    """What a paired comparison compares: ``method - base`` of ``metric`` at ``removed``."""

    method: str
    base: str
    metric: str
    removed: int


def paired_values(a: Mapping[int, float], b: Mapping[int, float], what: Pairing) -> Paired | None:
    """The paired statistics (module docstring) of two seed -> value maps.

    ``a`` holds the method's values, ``b`` the base's; the seeds where both are finite are
    paired (None when there is none).

    Used by :func:`paired` for a comparison's measurements and by ``compare runs`` for a
    seeded sweep of the streaming scenario (:mod:`simulator.reporting.sweep_compare`).
    """
    from scipy import stats

    method, base, metric, removed = what.method, what.base, what.metric, what.removed
    seeds = sorted(s for s in a if s in b and math.isfinite(a[s]) and math.isfinite(b[s]))
    if not seeds:
        return None
    x = np.asarray([a[s] for s in seeds])
    y = np.asarray([b[s] for s in seeds])
    d = x - y
    k = d.size
    mean = float(d.mean())
    nan = float("nan")
    sd_x = float(x.std(ddof=1)) if k > 1 else nan
    sd_y = float(y.std(ddof=1)) if k > 1 else nan
    if k < 2:
        low = high = p = blo = bhi = nan
    else:
        sd = float(d.std(ddof=1))
        if sd <= SAME * max(1.0, abs(mean)):  # equal differences, up to rounding
            low = high = mean
            p = 1.0 if mean == 0 else min(1.0, 2 * 0.5**k)
        else:
            test = stats.ttest_rel(x, y)
            interval = test.confidence_interval(LEVEL)
            low, high, p = float(interval.low), float(interval.high), float(test.pvalue)
        boot = stats.bootstrap(
            (d,),
            np.mean,
            n_resamples=BOOTSTRAP_RESAMPLES,
            confidence_level=LEVEL,
            method="percentile",
            rng=np.random.default_rng(k * 7919 + removed),
        ).confidence_interval
        blo, bhi = float(boot.low), float(boot.high)
    return Paired(
        method,
        base,
        metric,
        removed,
        k,
        float(x.mean()),
        sd_x,
        float(y.mean()),
        sd_y,
        mean,
        low,
        high,
        p,
        blo,
        bhi,
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (NaN stays NaN, out of the family).

    The ``i``-th smallest of the ``m`` finite values becomes
    ``max_{j <= i} min(1, (m - j + 1) p_(j))``: rejecting where it is below 5% keeps the
    chance of any false "better" over the whole table at 5% (Holm 1979).
    """
    order = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m = len(order)
    out = [float("nan")] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def holm_adjusted(rows: Sequence[Paired]) -> list[Paired]:
    """``rows`` with their Holm-adjusted p values over the whole table (:func:`holm`)."""
    from dataclasses import replace

    adjusted = holm([r.p_value for r in rows])
    return [replace(r, p_holm=p) for r, p in zip(rows, adjusted, strict=True)]


#: How the tables say which multiple-comparison correction their verdicts use.
CORRECTION = "Holm-adjusted over the table's paired tests (familywise 95%)"


def bottom_line(rows: Sequence[Paired], what: str = "") -> str:
    """One line: how many of the table's tests each method won, and how many showed nothing."""
    if not rows:
        return "bottom line: nothing was paired"
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    said = ", ".join(f"{v} in {n}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    scope = f" {what}" if what else ""
    return f"bottom line{scope}: {said} of {len(rows)} paired tests ({CORRECTION})"


def verdicts(
    measurements: Sequence[Measurement], methods: Sequence[str], base: str = "cr"
) -> list[Paired]:
    """Every DecoRemoval variant against ``base``, paired over seeds.

    One pairing per labelled split's accuracy and F1 and removal count; empty when ``base`` or
    no variant is compared.
    """
    if base not in methods:
        return []
    variants = [m for m in methods if m.startswith("decoremoval")]
    keys: list[str] = []
    for m in measurements:
        for k in m.scores:
            if (k.startswith("acc_") or k.startswith("f1_")) and k not in keys:
                keys.append(k)
    keys.sort(key=lambda k: (k.split("_", 1)[1] != "test", not k.startswith("acc_")))
    counts = sorted({m.removed for m in measurements})
    out = []
    for variant in variants:
        for key in keys:
            for n in counts:
                got = paired(measurements, variant, base, key, n)
                if got is not None:
                    out.append(got)
    return holm_adjusted(out)


def verdict_markdown(rows: Sequence[Paired], removed: int | None = None) -> list[str]:
    """A Markdown table of ``rows`` (only removal count ``removed`` when given)."""
    picked = [r for r in rows if removed is None or r.removed == removed]
    if not picked:
        return []
    head = (
        "| method vs base | split | metric (higher is better) | removed | seeds | method | base "
        "| difference [95% t interval] | bootstrap 95% | p (paired t) | p (Holm) | verdict |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in picked:
        scale, digits = (100.0, 1) if r.metric.startswith("acc_") else (1.0, 3)
        kind, split = r.metric.split("_", 1)
        pm = functools.partial(_pm, scale=scale, digits=digits)
        num = functools.partial(_num, scale=scale, digits=digits + 1)
        metric = "ACC %" if kind == "acc" else "F1"
        lines.append(
            f"| {label(r.method)} vs {label(r.base)} | {split} | {metric} "
            f"| {r.removed} | {r.seeds} | {pm(r.mean_method, r.std_method)} "
            f"| {pm(r.mean_base, r.std_base)} | {num(r.diff)} [{num(r.low)}, {num(r.high)}] "
            f"| [{num(r.boot_low)}, {num(r.boot_high)}] "
            f"| {_p(r.p_value)} | {_p(r.p_holm)} | {r.verdict} |"
        )
    return lines


def _p(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:.3g}"


def _pm(mean: float, std: float, *, scale: float, digits: int) -> str:
    if not math.isfinite(std):
        return f"{mean * scale:.{digits}f}"
    return f"{mean * scale:.{digits}f} ± {std * scale:.{digits}f}"


def _num(v: float, *, scale: float, digits: int) -> str:
    return "n/a" if not math.isfinite(v) else f"{v * scale:+.{digits}f}"


def verdict_csv(rows: Sequence[Paired]) -> str:
    """CSV text of every paired comparison."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "method",
            "base",
            "metric",
            "removed",
            "seeds",
            "mean_method",
            "std_method",
            "mean_base",
            "std_base",
            "diff",
            "t_low",
            "t_high",
            "p_value",
            "boot_low",
            "boot_high",
            "verdict",
            "p_holm",
        ]
    )
    for r in rows:
        w.writerow(
            [r.method, r.base, r.metric, r.removed, r.seeds]
            + [
                f"{v:.6g}" if math.isfinite(v) else ""
                for v in (
                    r.mean_method,
                    r.std_method,
                    r.mean_base,
                    r.std_base,
                    r.diff,
                    r.low,
                    r.high,
                    r.p_value,
                    r.boot_low,
                    r.boot_high,
                )
            ]
            + [r.verdict, f"{r.p_holm:.6g}" if math.isfinite(r.p_holm) else ""]
        )
    return buf.getvalue()
