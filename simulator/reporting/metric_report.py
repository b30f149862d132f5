"""Summary rows, a table and PNG curves of the privacy and drift metrics, ours vs retrained.

``mia_table`` puts the attacks side by side (ours at the end, ours and the retrained head at
the last checkpoint: one value per cell). Reads the ``privacy``, ``drift`` and ``checkpoints``
sections of the deletion-batch events (:mod:`simulator.runner.monitoring`); writes ``mia.png``
(AUC of every attack, the retrained head's value at each checkpoint as markers of the same
colour) and ``drift.png`` (feature MMD^2 p-values, label TV distances, the predicted-label
shift of both heads, and the detector alarms as vertical lines).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from simulator.reporting.plot_marks import (
    LEGEND_OUTSIDE,
    PanelText,
    StreamMarks,
    decorate,
    finish_panel,
    save_figure,
    stream_marks,
)
from simulator.reporting.verdict import Table


def _num(v: Any) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _get(d: dict[str, Any], *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def privacy_drift_rows(batches: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(metric, value) rows of the last evaluated batch: drift, alarms, costs.

    The attacks are a table of their own (:func:`mia_table`).
    """
    evaluated = [b for b in batches if "privacy" in b]
    if not evaluated:
        return []
    last = evaluated[-1]
    rows: list[tuple[str, str]] = []
    samples = last["privacy"]["samples"]
    rows.append(("MIA samples (forget / holdout)", f"{samples['forget']} / {samples['holdout']}"))
    for name, stats in last["drift"]["feature"].items():
        rows.append(
            (f"feature MMD^2 {name} (end)", f"{stats['mmd2']:.2e} (p = {stats['p_value']:.3f})")
        )
    for name, stats in last["drift"]["label"].items():
        rows.append((f"label TV / JS {name} (end)", f"{_num(stats['tv'])} / {_num(stats['js'])}"))
    alarms: dict[str, int] = {}
    for b in evaluated:
        for d in b["drift"].get("detections", []):
            key = f"{d['detector']}:{d['stream']}"
            alarms[key] = alarms.get(key, 0) + 1
    rows.append(
        ("drift alarms", ", ".join(f"{k} x{v}" for k, v in sorted(alarms.items())) or "none")
    )
    costs = [b["timings"].get("evaluation", 0.0) for b in evaluated if "timings" in b]
    refs = [b["timings"].get("reference", 0.0) for b in evaluated if b.get("checkpoints")]
    if costs:
        rows.append(
            (
                "evaluation time per batch (mean) / references (total)",
                f"{1e3 * float(np.mean(costs)):.1f} ms / {sum(refs):.2f} s",
            )
        )
    return rows


def mia_table(batches: list[dict[str, Any]]) -> Table | None:
    """Membership inference: one row per attack (AUC), LiRA's TPR at 1% FPR, the MIA efficacy.

    Columns: ours at the end, and ours vs the retrained head at the last checkpoint.
    """
    evaluated = [b for b in batches if "privacy" in b]
    if not evaluated:
        return None
    last = evaluated[-1]
    at_ref = [b for b in evaluated if b.get("checkpoints")]
    ref_batch = at_ref[-1] if at_ref else None
    ref = ref_batch["checkpoints"][-1] if ref_batch else None
    header: tuple[str, ...] = ("metric", f"ours (end, {last['removed_total']} removed)")
    if ref is not None:
        n = ref["checkpoint"]
        header += (f"ours at {n} removals", f"retrained from scratch at {n} removals")

    def row(label: str, *path: str) -> tuple[str, ...]:
        cells: tuple[str, ...] = (label, _num(_get(last, "privacy", *path)))
        if ref is not None and ref_batch is not None:
            cells += (_num(_get(ref_batch, "privacy", *path)), _num(_get(ref, "privacy", *path)))
        return cells

    rows = [row(f"AUC {a}", "attacks", a, "auc") for a in last["privacy"]["attacks"]]
    if "lira" in last["privacy"]["attacks"]:
        rows.append(row("LiRA TPR at 1% FPR", "attacks", "lira", "tpr_at_fpr", "0.01"))
    rows.append(row("MIA efficacy", "efficacy"))
    return Table("Membership inference (forget vs holdout)", header, rows)


#: Line styles and markers cycled over the series of one plot, so coinciding curves stay visible.
STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P")


def series_style(i: int) -> dict[str, Any]:
    """The i-th series' colour, line style, marker (at the measured points) and size.

    Later series are thinner and drawn on top, so identical curves stay distinguishable.
    """
    return {
        "color": f"C{i % 10}",
        "ls": STYLES[i % len(STYLES)],
        "marker": MARKERS[i % len(MARKERS)],
        "ms": max(7.0 - 1.0 * i, 3.0),  # earlier series drawn larger: coinciding ones peek out
        "lw": max(2.6 - 0.4 * i, 1.0),
        "alpha": 0.85,
    }


def _series(
    batches: list[dict[str, Any]], xs: dict[int, float], *path: str
) -> tuple[list[float], list[float]]:
    pts = [(xs[id(b)], _get(b, *path)) for b in batches]
    kept = [(x, float(v)) for x, v in pts if isinstance(v, int | float) and math.isfinite(v)]
    return [x for x, _ in kept], [v for _, v in kept]


def p_value_floor(batches: list[dict[str, Any]]) -> float | None:
    """The smallest p-value the permutation test can report, ``1 / (permutations + 1)``."""
    for b in batches:
        for stats in (_get(b, "drift", "feature") or {}).values():
            n = stats.get("permutations") if isinstance(stats, dict) else None
            if isinstance(n, int) and n > 0:
                return 1.0 / (n + 1)
    return None


def plot_privacy_drift(
    folder: Path, batches: list[dict[str, Any]], title: str, marks: StreamMarks | None = None
) -> dict[str, Any]:
    """``mia.png`` and ``drift.png`` (module docstring); nothing without evaluated batches.

    Returns the (closed) figures by file name.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [b for b in batches if "privacy" in b]
    if not evaluated:
        return {}
    marks = marks or stream_marks(batches)
    xs = {id(b): marks.x(b, i) for i, b in enumerate(batches)}
    refs = [(xs.get(id(b), 0.0), c) for b in evaluated for c in b.get("checkpoints", [])]
    figures: dict[str, Any] = {}

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, attack in enumerate(evaluated[-1]["privacy"]["attacks"]):
        style = series_style(i)
        pts = [(xs[id(b)], _get(b, "privacy", "attacks", attack, "auc")) for b in evaluated]
        pts = [(x, v) for x, v in pts if isinstance(v, int | float)]
        if pts:
            ax.plot(*zip(*pts, strict=True), label=attack, **style)
        ref_pts = [(x, _get(c, "privacy", "attacks", attack, "auc")) for x, c in refs]
        ref_pts = [(x, v) for x, v in ref_pts if v is not None]
        if ref_pts:
            ax.plot(
                *zip(*ref_pts, strict=True), "*", color=style["color"], mec="k", ms=10,
                label=f"{attack}: retrained head",
            )  # fmt: skip
    ax.axhline(0.5, color="k", lw=0.8, ls="--", label="chance (0.5)")
    text = PanelText(
        "MIA ROC AUC (forget vs holdout)",
        "membership inference (stars: retrained head)",
        {"fontsize": 6},
    )
    finish_panel(ax, marks, title, text)
    figures["mia.png"] = save_figure(fig, folder / "mia.png")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    for i, name in enumerate(evaluated[-1]["drift"]["feature"]):
        top.semilogy(
            *_series(evaluated, xs, "drift", "feature", name, "p_value"),
            label=name,
            **series_style(i),
        )
    top.axhline(0.05, color="k", lw=0.8, ls="--", label="0.05")
    floor = p_value_floor(evaluated)
    if floor is not None:
        top.axhline(floor, color="tab:gray", lw=1.2, ls=":", label=f"resolution floor {floor:.3g}")
        top.text(
            0.01, floor, f" p-value floor 1/(permutations+1) = {floor:.3g}: no smaller value "
            "can be measured", transform=top.get_yaxis_transform(), fontsize=6, va="bottom",
            color="tab:gray", gid="floor",
        )  # fmt: skip
    top.set_ylabel("MMD^2 permutation p-value")
    top.legend(fontsize=7, **LEGEND_OUTSIDE)
    top.grid(alpha=0.3)
    decorate(top, marks)
    for i, name in enumerate(evaluated[-1]["drift"]["label"]):
        bottom.plot(
            *_series(evaluated, xs, "drift", "label", name, "tv"), label=f"TV {name}",
            **series_style(i),
        )  # fmt: skip
    pts = [(x, _get(c, "drift", "label", "predicted_test_vs_start", "tv")) for x, c in refs]
    pts = [(x, v) for x, v in pts if v is not None]
    if pts:
        bottom.plot(
            *zip(*pts, strict=True), "k*", ms=9, label="retrained: TV predicted_test_vs_start"
        )
    decorate(bottom, marks, secondary=False, texts=False)
    bottom.set_ylabel("label total variation")
    bottom.legend(fontsize=6, **LEGEND_OUTSIDE)
    bottom.grid(alpha=0.3)
    top.set_title(f"{title}: drift", fontsize=10)
    figures["drift.png"] = save_figure(fig, folder / "drift.png")
    return figures
