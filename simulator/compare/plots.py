"""PNG figures of a comparison: utility, cost and privacy against the removal count."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.compare.table import Summary

#: (file, [(metric, axis label, scale, log y)]) of every figure.
FIGURES: tuple[tuple[str, tuple[tuple[str, str, float, bool], ...]], ...] = (
    (
        "utility.png",
        (
            ("acc_test", "test accuracy (%)", 100.0, False),
            ("acc_label_swap", "label_swap accuracy (%)", 100.0, False),
            ("acc_noise", "noise-shift accuracy (%)", 100.0, False),
            ("acc_rotation", "rotation-shift accuracy (%)", 100.0, False),
        ),
    ),
    (
        "cost_privacy.png",
        (
            ("removal_seconds", "removal time so far (s)", 1.0, True),
            ("mia_auc", "membership AUC (removed vs test)", 1.0, False),
            ("disagreement", "prediction disagreement with retrain", 1.0, False),
            ("acc_gap", "test accuracy gap to retrain (points)", 100.0, False),
        ),
    ),
)


def plot_comparison(
    folder: Path, summaries: Sequence[Summary], methods: Sequence[str], title: str
) -> list[Path]:
    """Write the figures of :data:`FIGURES` (panels without any finite value are left empty)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for name, panels in FIGURES:
        fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
        for ax, (key, label, scale, log) in zip(axes.flat, panels, strict=True):
            for method in methods:
                pts = [
                    (s.removed, s.stats[key].mean * scale, s.stats[key].std * scale)
                    for s in summaries
                    if s.method == method and key in s.stats and math.isfinite(s.stats[key].mean)
                ]
                if log:
                    pts = [p for p in pts if p[1] > 0]
                if not pts:
                    continue
                x, y, e = zip(*pts, strict=True)
                err = [v if math.isfinite(v) else 0.0 for v in e]
                ax.errorbar(x, y, yerr=err, marker="o", ms=4, capsize=3, label=method)
            ax.set_xlabel("samples removed")
            ax.set_ylabel(label)
            if log:
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
        handles, labels = axes.flat[0].get_legend_handles_labels()
        if not handles:
            handles, labels = axes.flat[1].get_legend_handles_labels()
        fig.suptitle(title, y=0.99, fontsize=10)
        fig.legend(
            handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.965), ncol=len(methods)
        )
        fig.tight_layout(rect=(0, 0, 1, 0.91))
        paths.append(_save(fig, folder / name, plt))
    return paths


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
