"""PNG figures of a comparison: utility, cost and privacy against the removal count; the audit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.compare.audit import ATTACKS, MODEL_LABELS, MODELS, AuditScore
from simulator.compare.leak import audit_methods
from simulator.compare.table import Stat, Summary

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


#: The audit's figure: each model's membership AUC per attack (``--audit``).
AUDIT_FIGURE = "audit.png"


def plot_audit(path: Path, scores: Sequence[AuditScore], scenario: str) -> Path:
    """One panel per audited method: every model's AUC (mean ± std over seeds) per attack."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    audits = audit_methods(scores)
    fig, axes = plt.subplots(1, max(1, len(audits)), figsize=(5.5 * max(1, len(audits)), 4.2))
    flat = list(getattr(axes, "flat", [axes]))
    for ax, audit in zip(flat, audits, strict=False):
        for offset, model in zip((-0.2, 0.0, 0.2), MODELS, strict=True):
            stats = [Stat.of(audit.auc[(model, a)]) for a in ATTACKS]
            ax.errorbar(
                [i + offset for i in range(len(ATTACKS))],
                [st.mean for st in stats],
                yerr=[st.std if math.isfinite(st.std) else 0.0 for st in stats],
                fmt="o",
                ms=5,
                capsize=3,
                label=MODEL_LABELS[model],
            )
        ax.axhline(0.5, color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(len(ATTACKS)), ATTACKS, rotation=20)
        ax.set_ylabel("membership AUC (removed vs test)")
        ax.set_title(f"{audit.method}: leaks through {audit.answer}", fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = flat[0].get_legend_handles_labels()
    fig.suptitle(f"{scenario}: where does membership leak? (mean ± std over seeds)", fontsize=10)
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    return _save(fig, path, plt)


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
