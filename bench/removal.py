"""Benchmark: certified removal of DecoRemoval's head vs exact retraining (issue 2).

Workload: n = 60,000 Fashion-MNIST training rows (Debian's ``dataset-fashion-mnist`` IDX files;
a synthetic stand-in with the same shapes when absent) mapped through a fixed, seeded random
Fourier feature map to d = 1,024 features, K = 10 one-vs-rest heads, eps = 1, delta = 1e-4,
sigma = 10, lam = 1e-3, data-dependent bound. Measured in one run:

* sequential single removals from the freshly trained head until the budget forces a retrain
  (or a cap), giving removals/s on the incremental path and removals before retrain;
* the same single removals on the naive path that rebuilds the Hessian over all retained rows;
* one certified batch removal of 1,000 rows charging the exact residual (the data-dependent
  bound of a 1,000-row batch is ~30, far above the budget 2.28, so charging it would force a
  retrain), then exact retraining from scratch on the retained rows with the same
  perturbation: time ratio, accuracy gap, relative parameter distance.

Prints a table and writes ``bench/results/removal.json``.

Usage: ``python bench/removal.py [--n 60000] [--d 1024] [--batch 1000] [--seq-cap 3000]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData, train_head

FMNIST = Path("/usr/share/datasets/fashion-mnist")


def load_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=60000)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1000)
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
    k = 10
    cfg = HeadConfig(
        lam=1e-3, sigma=10.0, epsilon=1.0, delta=1e-4, bound="data", report_exact=False
    )

    console.print(f"[bold]workload[/]: n={args.n} d={args.d} K={k} batch={args.batch} ({source})")
    data = LocalHeadData(Xtr, ytr, k)
    t = time.perf_counter()
    head = CertifiedHead(data, cfg, rng=np.random.default_rng(1))
    train_s = time.perf_counter() - t
    console.print(f"trained in {train_s:.1f} s ({head.last_fit_iterations} Newton iterations)")

    # 1. sequential single removals until the budget forces a retrain (or the cap)
    order = rng.permutation(args.n)
    seq_ids = order[: args.seq_cap]
    seq_times, before_retrain, hit = [], None, False
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("sequential removals", total=len(seq_ids))
        for i, sid in enumerate(seq_ids):
            r = head.remove([int(sid)])
            bar.advance(task)
            if r.retrained:
                before_retrain, hit = i, True  # i removals fitted, the (i+1)-th did not
                break
            seq_times.append(r.timings["total"])
    seq_rate = len(seq_times) / sum(seq_times)
    if before_retrain is None:
        before_retrain = len(seq_times)
    used_after_seq = head.cumulative_residual / head.budget

    # 2. the naive path: rebuild the Hessian over all retained rows for every removal
    head.config = dataclasses.replace(cfg, hessian_mode="rebuild")
    naive_ids = order[args.seq_cap : args.seq_cap + args.naive]
    t = time.perf_counter()
    for sid in naive_ids:
        head.remove([int(sid)])
    naive_rate = len(naive_ids) / (time.perf_counter() - t)
    head.config = cfg

    # 3. a certified batch removal vs exact retraining on the retained rows, same b
    start = args.seq_cap + args.naive
    batch_ids = [int(i) for i in order[start : start + args.batch]]
    head.config = dataclasses.replace(cfg, bound="exact", report_exact=True)
    r = head.remove(batch_ids)
    batch_s = r.timings["total"]
    exact = float(head.gradient_norms().sum())
    keep = data.retained_ids
    t = time.perf_counter()
    ref = train_head(LocalHeadData(Xtr[keep], ytr[keep], k), head.b, lam=cfg.lam, tol=cfg.tol)
    retrain_s = time.perf_counter() - t
    acc_removed = float(np.mean(head.predict(Xte) == yte))
    acc_retrain = float(np.mean(np.argmax(Xte @ ref.W, axis=1) == yte))
    rel = float(np.linalg.norm(head.W - ref.W) / np.linalg.norm(ref.W))

    result = {
        "n": args.n,
        "d": args.d,
        "k": k,
        "batch": args.batch,
        "source": source,
        "train_seconds": train_s,
        "batch_removal_seconds": batch_s,
        "batch_removal_timings": r.timings,
        "batch_retrained": r.retrained,
        "retrain_seconds": retrain_s,
        "speedup": retrain_s / batch_s,
        "accuracy_removed": acc_removed,
        "accuracy_retrained": acc_retrain,
        "accuracy_gap_points": abs(acc_removed - acc_retrain) * 100,
        "relative_param_distance": rel,
        "batch_residual_data_bound": r.residual_data,
        "batch_residual_exact": exact,
        "budget": head.budget,
        "budget_used_ratio_after_batch": r.budget_used_ratio,
        "sequential_removals_per_second": seq_rate,
        "sequential_removals_timed": len(seq_times),
        "naive_sequential_removals_per_second": naive_rate,
        "sequential_speedup_vs_naive": seq_rate / naive_rate,
        "removals_before_retrain": before_retrain,
        "removals_before_retrain_capped": not hit,
        "budget_used_ratio_after_sequential": used_after_seq,
        "machine": f"{platform.machine()} {platform.processor()} ({platform.node()})",
    }
    table = Table(title="certified removal vs exact retraining")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    rows = [
        ("batch removal (s)", f"{batch_s:.3f}{' (retrained!)' if r.retrained else ''}", "<= 1.5"),
        ("exact retraining (s)", f"{retrain_s:.1f}", ""),
        ("speedup", f"{retrain_s / batch_s:.0f}x", ">= 50x"),
        ("accuracy removed / retrained", f"{acc_removed:.4f} / {acc_retrain:.4f}", ""),
        ("accuracy gap (points)", f"{result['accuracy_gap_points']:.3f}", "<= 0.3"),
        ("relative parameter distance", f"{rel:.2e}", "<= 1e-2"),
        ("batch residual: data bound / exact", f"{r.residual_data:.3g} / {exact:.3g}", ""),
        ("budget eps'", f"{head.budget:.3f}", ""),
        ("sequential removals/s (incremental)", f"{seq_rate:.1f}", ">= 20"),
        ("sequential removals/s (naive rebuild)", f"{naive_rate:.3f}", ""),
        ("incremental / naive", f"{seq_rate / naive_rate:.0f}x", ">= 20x"),
        (
            "single removals before retrain (data bound)",
            f"{before_retrain}{'+' if not hit else ''}",
            "",
        ),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
