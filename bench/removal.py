"""Benchmark: certified removal of the head under each accounting, and what it costs a user.

Workload: n = 60,000 Fashion-MNIST training rows (Debian's ``dataset-fashion-mnist`` IDX files;
a synthetic stand-in with the same shapes when absent) mapped through a fixed, seeded random
Fourier feature map to d = 1,024 features, K = 10 one-vs-rest heads (one mechanism on the
stacked head), eps = 1, delta = 1e-4, sigma = 10, lam = 1e-3, uniform weights. Per accounting
(``guo``: Guo et al.'s data-dependent bound summed, the default; ``exact``: the exact residual,
a diagnostic whose retrain decision depends on ``b``):

* sequential single removals from the freshly trained head until the budget forces a retrain
  (or ``--seq-cap``): removals per second, ``removals_before_retrain``, and the retrain that the
  next removal triggers (``retrain_seconds``);
* ``amortised_seconds_per_removal``: one budget cycle, (the kept steps + the removal that
  retrains) / (removals in the cycle): what a stream of single removals costs per removal;
* batches of 100 / 1,000 / 10,000 rows from the fresh head: time of the certified step and
  whether it fits in the budget (its charge; a batch that does not fit costs a retrain).

Then, once: the naive path (the Hessian rebuilt over all rows for every removal) and a
1,000-row batch under ``exact`` accounting against exact retraining from scratch with the same
``b`` (accuracy gap, parameter distance). Prints a table and writes
``bench/results/removal.json``.

Usage: ``python bench/removal.py [--n 60000] [--d 1024] [--seq-cap 3000]``
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData, predict_classes, train_head

FMNIST = Path("/usr/share/datasets/fashion-mnist")
BATCHES = (100, 1000, 10000)


def load_inputs(n: int, rng: np.random.Generator) -> tuple[Any, ...]:
    """Fashion-MNIST train/test in [0, 1], or a synthetic stand-in of the same shape."""
    if (FMNIST / "train-images-idx3-ubyte.gz").exists():
        from simulator.data.idx import read_idx_images, read_idx_labels

        xtr = read_idx_images(FMNIST / "train-images-idx3-ubyte.gz").reshape(60000, -1) / 255.0
        ytr = read_idx_labels(FMNIST / "train-labels-idx1-ubyte.gz")
        xte = read_idx_images(FMNIST / "t10k-images-idx3-ubyte.gz").reshape(10000, -1) / 255.0
        yte = read_idx_labels(FMNIST / "t10k-labels-idx1-ubyte.gz")
        return xtr[:n], ytr[:n], xte, yte, "fashion-mnist (Debian IDX files)"
    centers = rng.normal(size=(10, 784))
    ytr = rng.integers(0, 10, size=n)
    yte = rng.integers(0, 10, size=10000)
    xtr = centers[ytr] + 2.0 * rng.normal(size=(n, 784))
    xte = centers[yte] + 2.0 * rng.normal(size=(10000, 784))
    return xtr, ytr, xte, yte, "synthetic stand-in (dataset-fashion-mnist not installed)"


def with_config(head: CertifiedHead, **changes: Any) -> CertifiedHead:
    """A deep copy of ``head`` (same rows, factors, ``b``) with other settings."""
    twin = copy.deepcopy(head)
    twin.config = dataclasses.replace(head.config, **changes)
    return twin


def budget_cycle(head: CertifiedHead, ids: np.ndarray, console: Console) -> dict[str, Any]:
    """Single removals until one forces a retrain (or the ids run out)."""
    kept: list[float] = []
    retrain_s, retrain_total = None, None
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"single removals ({head.config.accounting})", total=len(ids))
        for sid in ids:
            r = head.remove([int(sid)])
            bar.advance(task)
            if r.retrained:
                retrain_s, retrain_total = r.timings["retrain"], r.timings["total"]
                break
            kept.append(r.timings["total"])
    out: dict[str, Any] = {
        "removals_before_retrain": len(kept),
        "removals_before_retrain_capped": retrain_s is None,
        "removals_per_second": len(kept) / sum(kept) if kept else None,
        "retrain_seconds": retrain_s,
    }
    if retrain_total is not None:
        out["amortised_seconds_per_removal"] = (sum(kept) + retrain_total) / (len(kept) + 1)
    else:  # no retrain within the cap: a lower bound on the amortised cost
        out["amortised_seconds_per_removal"] = sum(kept) / len(kept) if kept else None
    return out


def batch_charges(head: CertifiedHead, order: np.ndarray) -> dict[str, Any]:
    """Each batch size from the fresh head: step time and whether its charge fits the budget."""
    out: dict[str, Any] = {}
    for m in BATCHES:
        if m >= order.size:
            continue
        probe = with_config(head, epsilon=1e12, report_exact=True)  # measure, never retrain
        r = probe.remove([int(i) for i in order[:m]])
        cumulative = head.cumulative_residual + r.charged
        if head.config.accounting == "exact":
            cumulative = max(head.cumulative_residual, r.charged)
        out[str(m)] = {
            "seconds": r.timings["total"],
            "charged": r.charged,
            "residual_exact": r.residual_exact,
            "fits_in_budget": cumulative <= head.budget,
            "budget_used_ratio": cumulative / head.budget,
        }
    return out


def versus_retraining(
    head: CertifiedHead, ids: list[int], X: Any, y: Any, Xte: Any, yte: Any
) -> dict[str, Any]:
    """One certified batch (exact accounting) against exact retraining with the same ``b``."""
    r = head.remove(ids)
    keep = head.data.retained_ids  # type: ignore[attr-defined]
    t = time.perf_counter()
    ref = train_head(LocalHeadData(X[keep], y[keep], 10), head.b, lam=head.config.lam)
    retrain_s = time.perf_counter() - t
    acc_removed = float(np.mean(head.predict(Xte) == yte))
    acc_retrain = float(np.mean(predict_classes(Xte @ ref.W) == yte))
    return {
        "batch": len(ids),
        "batch_removal_seconds": r.timings["total"],
        "batch_removal_timings": r.timings,
        "batch_retrained": r.retrained,
        "retrain_from_scratch_seconds": retrain_s,
        "speedup": retrain_s / r.timings["total"],
        "accuracy_removed": acc_removed,
        "accuracy_retrained": acc_retrain,
        "accuracy_gap_points": abs(acc_removed - acc_retrain) * 100,
        "relative_param_distance": float(np.linalg.norm(head.W - ref.W) / np.linalg.norm(ref.W)),
        "batch_residual_data_bound": r.residual_data,
        "batch_residual_exact": r.residual_exact,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=60000)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--seq-cap", type=int, default=3000)
    p.add_argument("--naive", type=int, default=2, help="single removals on the naive path")
    p.add_argument("--out", default="bench/results/removal.json")
    args = p.parse_args()
    console = Console()
    rng = np.random.default_rng(0)

    xtr, ytr, xte, yte, source = load_inputs(args.n, rng)
    rff = RandomFourierFeatures.draw(
        xtr.shape[1], args.d, bandwidth=median_bandwidth(xtr, rng=rng), rng=rng
    )
    Xtr, Xte = clip_to_unit_ball(rff.transform(xtr)), clip_to_unit_ball(rff.transform(xte))
    cfg = HeadConfig(lam=1e-3, sigma=10.0, epsilon=1.0, delta=1e-4, report_exact=False)
    console.print(f"[bold]workload[/]: n={args.n} d={args.d} K=10 ({source})")
    t = time.perf_counter()
    fresh = CertifiedHead(LocalHeadData(Xtr, ytr, 10), cfg, rng=np.random.default_rng(1))
    train_s = time.perf_counter() - t
    console.print(f"trained in {train_s:.1f} s ({fresh.last_fit_iterations} Newton iterations)")
    order = rng.permutation(args.n)

    modes: dict[str, Any] = {}
    for accounting in ("guo", "exact"):
        head = with_config(fresh, accounting=accounting)
        modes[accounting] = {
            "accounting": accounting,
            **budget_cycle(head, order[: args.seq_cap], console),
            "batches": batch_charges(with_config(fresh, accounting=accounting), order),
        }
        console.print(f"{accounting}: {modes[accounting]['removals_before_retrain']} removals")

    naive = with_config(fresh, hessian_mode="rebuild")
    t = time.perf_counter()
    for sid in order[: args.naive]:
        naive.remove([int(sid)])
    naive_rate = args.naive / (time.perf_counter() - t)
    vs = versus_retraining(
        with_config(fresh, accounting="exact", report_exact=True),
        [int(i) for i in order[:1000]],
        Xtr,
        ytr,
        Xte,
        yte,
    )
    guo = modes["guo"]
    result = {
        "accounting": "guo",  # the headline figures below; both modes in "modes"
        "removals_before_retrain": guo["removals_before_retrain"],
        "retrain_seconds": guo["retrain_seconds"],
        "amortised_seconds_per_removal": guo["amortised_seconds_per_removal"],
        "modes": modes,
        "n": args.n,
        "d": args.d,
        "k": 10,
        "source": source,
        "train_seconds": train_s,
        "budget": fresh.budget,
        "training_residual": fresh.cumulative_residual,
        "naive_removals_per_second": naive_rate,
        "exact_batch_vs_retraining": vs,
        "machine": f"{platform.machine()} ({platform.node()}), {os.cpu_count()} cores",
        "load_average_at_end": os.getloadavg(),
    }
    table = Table(title="certified removal: cost per accounting (Fashion-MNIST, n, d, K above)")
    table.add_column("metric")
    for mode in modes:
        table.add_column(mode, justify="right")

    def cell(mode: str, key: str, fmt: str) -> str:
        value = modes[mode].get(key)
        return "-" if value is None else format(value, fmt)

    for key, label, fmt in (
        ("removals_before_retrain", "single removals before retrain", "d"),
        ("removals_per_second", "single removals / s (kept steps)", ".1f"),
        ("retrain_seconds", "retrain (s)", ".1f"),
        ("amortised_seconds_per_removal", "amortised s / removal (incl. retrain)", ".3f"),
    ):
        table.add_row(label, *(cell(m, key, fmt) for m in modes))
    for m in BATCHES:
        row = []
        for mode in modes:
            b = modes[mode]["batches"].get(str(m))
            row.append(
                "-"
                if b is None
                else f"{b['seconds']:.2f} s, {'fits' if b['fits_in_budget'] else 'RETRAIN'}"
                f" ({b['budget_used_ratio']:.2g}x budget)"
            )
        table.add_row(f"batch of {m:,}", *row)
    console.print(table)
    console.print(
        f"exact accounting, batch of 1,000: {vs['batch_removal_seconds']:.2f} s vs retraining "
        f"{vs['retrain_from_scratch_seconds']:.1f} s; accuracy gap "
        f"{vs['accuracy_gap_points']:.3f} points; distance {vs['relative_param_distance']:.1e}; "
        f"naive path {naive_rate:.3f} removals/s"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
