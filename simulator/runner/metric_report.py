"""Summary rows and PNG curves of the privacy and drift metrics, ours vs the retrained head.

Reads the ``privacy``, ``drift`` and ``checkpoints`` sections of the deletion-batch events
(:mod:`simulator.runner.monitoring`); writes ``mia.png`` (AUC of every attack over removed
samples, the retrained head's value at each checkpoint as markers of the same colour) and
``drift.png`` (feature MMD^2 p-values, label TV distances, the predicted-label shift of both
heads, and the detector alarms as vertical lines).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np


def _num(v: Any) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _get(d: dict[str, Any], *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def privacy_drift_rows(batches: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(metric, value) rows: last evaluated batch, and ours vs retrained at the last checkpoint."""
    evaluated = [b for b in batches if "privacy" in b]
    if not evaluated:
        return []
    last = evaluated[-1]
    at_ref = [b for b in evaluated if b.get("checkpoints")]
    ref_batch = at_ref[-1] if at_ref else None
    ref = ref_batch["checkpoints"][-1] if ref_batch else None
    rows: list[tuple[str, str]] = []
    header = "end" + (f"; ours / retrained at {ref['checkpoint']} removals" if ref else "")
    for attack in last["privacy"]["attacks"]:
        value = _num(_get(last, "privacy", "attacks", attack, "auc"))
        if ref is not None and ref_batch is not None:
            ours = _num(_get(ref_batch, "privacy", "attacks", attack, "auc"))
            value += f"; {ours} / {_num(_get(ref, 'privacy', 'attacks', attack, 'auc'))}"
        rows.append((f"MIA AUC {attack} ({header})", value))
    if "lira" in last["privacy"]["attacks"]:
        value = _num(_get(last, "privacy", "attacks", "lira", "tpr_at_fpr", "0.01"))
        if ref is not None and ref_batch is not None:
            ours = _num(_get(ref_batch, "privacy", "attacks", "lira", "tpr_at_fpr", "0.01"))
            theirs = _num(_get(ref, "privacy", "attacks", "lira", "tpr_at_fpr", "0.01"))
            value += f"; {ours} / {theirs}"
        rows.append((f"LiRA TPR at 1% FPR ({header})", value))
    value = _num(_get(last, "privacy", "efficacy"))
    if ref is not None and ref_batch is not None:
        value += f"; {_num(_get(ref_batch, 'privacy', 'efficacy'))} / "
        value += _num(_get(ref, "privacy", "efficacy"))
    rows.append((f"MIA efficacy ({header})", value))
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


def _series(batches: list[dict[str, Any]], *path: str) -> tuple[list[float], list[float]]:
    pts = [(b["removed_total"], _get(b, *path)) for b in batches]
    kept = [(x, float(v)) for x, v in pts if isinstance(v, int | float) and math.isfinite(v)]
    return [x for x, _ in kept], [v for _, v in kept]


def plot_privacy_drift(folder: Path, batches: list[dict[str, Any]], title: str) -> list[Path]:
    """``mia.png`` and ``drift.png`` (module docstring); nothing without evaluated batches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [b for b in batches if "privacy" in b]
    if not evaluated:
        return []
    refs = [(b["removed_total"], c) for b in evaluated for c in b.get("checkpoints", [])]
    paths: list[Path] = []

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, attack in enumerate(evaluated[-1]["privacy"]["attacks"]):
        color = f"C{i}"
        ax.plot(*_series(evaluated, "privacy", "attacks", attack, "auc"), color=color, label=attack)
        pts = [(x, _get(c, "privacy", "attacks", attack, "auc")) for x, c in refs]
        pts = [(x, v) for x, v in pts if v is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o", color=color, mec="k")
    ax.axhline(0.5, color="k", lw=0.8, ls="--")
    ax.set_xlabel("samples removed")
    ax.set_ylabel("MIA ROC AUC (forget vs holdout)")
    ax.set_title(f"{title}: membership inference (dots: retrained head)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(_save(fig, folder / "mia.png"))

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for name in evaluated[-1]["drift"]["feature"]:
        top.semilogy(*_series(evaluated, "drift", "feature", name, "p_value"), label=name)
    top.axhline(0.05, color="k", lw=0.8, ls="--")
    top.set_ylabel("MMD^2 permutation p-value")
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    for name in evaluated[-1]["drift"]["label"]:
        bottom.plot(*_series(evaluated, "drift", "label", name, "tv"), label=f"TV {name}")
    pts = [(x, _get(c, "drift", "label", "predicted_test_vs_start", "tv")) for x, c in refs]
    pts = [(x, v) for x, v in pts if v is not None]
    if pts:
        bottom.plot(*zip(*pts, strict=True), "ko", label="retrained: TV predicted_test_vs_start")
    for b in evaluated:
        if b["drift"].get("detections"):
            bottom.axvline(b["removed_total"], color="r", alpha=0.3)
            top.axvline(b["removed_total"], color="r", alpha=0.3)
    bottom.set_xlabel("samples removed")
    bottom.set_ylabel("label total variation")
    bottom.legend(fontsize=7)
    bottom.grid(alpha=0.3)
    top.set_title(f"{title}: drift (red: detector alarms)")
    paths.append(_save(fig, folder / "drift.png"))
    return paths


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
