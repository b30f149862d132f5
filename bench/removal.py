"""Benchmark: certified removal of the head under each accounting, and what it costs a user.

Workload: n = 60,000 Fashion-MNIST training rows (Debian's ``dataset-fashion-mnist`` IDX files;
a synthetic stand-in with the same shapes when absent) mapped through a fixed, seeded random
Fourier feature map to d = 1,024 features, K = 10 one-vs-rest heads (one mechanism on the
stacked head), eps = 1, delta = 1e-4, sigma = 10, lam = 1e-3, uniform weights. Per accounting
(``anchored``, the default: the tight bound summed since the last exact gradient, one exact pass
before any retrain; ``guo``: Guo et al.'s data-dependent bound summed since the last retrain;
``worst``; ``exact``: the exact residual after every removal; ``simulator/head/accounting.py``):

* sequential single removals from the freshly trained head until the budget forces a retrain
  (or ``--seq-cap``): removals per second, ``removals_before_retrain``, and the retrain that the
  next removal triggers (``retrain_seconds``);
* ``amortised_seconds_per_removal``: one budget cycle, (the kept steps + the removal that
  retrains) / (removals in the cycle): what a stream of single removals costs per removal;
* batches of 100 / 1,000 / 10,000 rows from the fresh head: the removal as the mode makes it
  (its time, exact passes and any retrain included), whether it was certified without a
  retrain, its charge, and every bound of the step side by side (worst, data, tight, exact).

* ``stream``: amortised seconds per removal over a stream of ``--stream`` single removals
  from the fresh head, every retrain the budget forces included (the issue asks for 10,000;
  at full size on 2 CPU cores that is hours of retrains, so the default is 300 and the JSON
  says what was run);
* ``hessian_build``: one exact Hessian build (``K n d^2`` flops), timed, with the GF/s it
  reached: the floor of any exact retrain, since the removal machinery needs the Hessian at
  its reference point.

Backends: ``--backend numpy|torch`` and ``--device cpu|cuda`` (the head's ``backend`` and
``device`` settings, float64; rows live on the same backend). ``--stream-accounting`` limits the
long stream to some of the accountings (a ``guo`` stream of 10,000 retrains 141 times).

Then, once: the naive path (the Hessian rebuilt over all rows for every removal) and a
1,000-row batch under ``exact`` accounting against exact retraining from scratch with the same
``b`` (accuracy gap, parameter distance). Prints a table and writes
``bench/results/removal-<device>.json`` with its provenance (command, commit, date, machine,
load: ``bench/provenance.py``).

Usage: ``python bench/removal.py [--n 60000] [--d 1024] [--seq-cap 3000] [--stream 300]
[--stream-accounting ...] [--backend numpy|torch] [--device cpu|cuda] [--no-reference]``
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import pickle
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from provenance import provenance
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData, predict_classes, train_head
from simulator.head.backend import make_backend
from simulator.head.logistic import StatisticsRequest

FMNIST = Path("/usr/share/datasets/fashion-mnist")
BATCHES = (100, 1000, 10000)


def load_inputs(n: int, rng: np.random.Generator, root: Path = FMNIST) -> tuple[Any, ...]:
    """Fashion-MNIST train/test in [0, 1] (IDX files in ``root``), or a synthetic stand-in of
    the same shape."""
    if (root / "train-images-idx3-ubyte.gz").exists():
        from simulator.data.idx import read_idx_images, read_idx_labels

        xtr = read_idx_images(root / "train-images-idx3-ubyte.gz").reshape(60000, -1) / 255.0
        ytr = read_idx_labels(root / "train-labels-idx1-ubyte.gz")
        xte = read_idx_images(root / "t10k-images-idx3-ubyte.gz").reshape(10000, -1) / 255.0
        yte = read_idx_labels(root / "t10k-labels-idx1-ubyte.gz")
        return xtr[:n], ytr[:n], xte, yte, f"fashion-mnist (IDX files in {root})"
    centers = rng.normal(size=(10, 784))
    ytr = rng.integers(0, 10, size=n)
    yte = rng.integers(0, 10, size=10000)
    xtr = centers[ytr] + 2.0 * rng.normal(size=(n, 784))
    xte = centers[yte] + 2.0 * rng.normal(size=(10000, 784))
    return xtr, ytr, xte, yte, "synthetic stand-in (dataset-fashion-mnist not installed)"


def synthetic_features(n: int, d: int, k: int, rng: np.random.Generator) -> tuple[Any, ...]:
    """Rows already in feature space for the large workloads: K Gaussian classes in R^d,
    rows scaled into the unit ball (no RFF map: at d = 4,096 and n = 10^6 the map would be
    the benchmark). Generated in float32 chunks, returned as float64."""
    centers = rng.normal(size=(k, d)).astype(np.float32) / np.sqrt(d)
    y = rng.integers(0, k, size=n)
    X = np.empty((n, d))
    for start in range(0, n, 50_000):
        part = centers[y[start : start + 50_000]]
        part = part + rng.standard_normal(part.shape, dtype=np.float32) * np.float32(
            1.5 / np.sqrt(d)
        )
        X[start : start + 50_000] = part / np.linalg.norm(part, axis=1, keepdims=True).clip(1.0)
    return X, y


def gpu_memory() -> dict[str, float] | None:
    """Peak and current GPU memory (GB) of this process, None on the CPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    return {
        "peak_allocated_gb": torch.cuda.max_memory_allocated() / 1e9,
        "allocated_gb": torch.cuda.memory_allocated() / 1e9,
        "peak_reserved_gb": torch.cuda.max_memory_reserved() / 1e9,
    }


def large_workload(
    head: CertifiedHead,
    order: np.ndarray,
    args: argparse.Namespace,
    console: Console,
    save: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """The large workloads, without copies of the head (it holds tens of GB): a Hessian build,
    ``--stream`` single removals (rate and amortised cost, retrains included), one batch per
    ``--batches`` size, then a retrain from scratch; the memory after each. ``save`` gets the
    figures so far after every stage (a timeout keeps them)."""
    out: dict[str, Any] = {"hessian_build": hessian_build(head), "memory_after_build": gpu_memory()}
    save(out)
    st = stream(head, order[: args.stream], console)
    steps = st["step_seconds_mean"]
    out["stream"] = st
    out["single_removals_per_second"] = 1.0 / steps if steps else None
    out["memory_after_singles"] = gpu_memory()
    save(out)
    used = args.stream
    batches: dict[str, Any] = {}
    for m in args.batches:
        ids = [int(i) for i in order[used : used + m]]
        used += m
        r = head.remove(ids)
        batches[str(m)] = {"seconds": r.timings["total"], "timings": r.timings,
                           "certified_without_retrain": not r.retrained,
                           "budget_used_ratio": r.cumulative / head.budget}  # fmt: skip
        out["batches"] = batches
        save(out)
    out["memory_after_batches"] = gpu_memory()
    out["retrain_seconds"] = head.retrain("benchmark")
    out["memory_after_retrain"] = gpu_memory()
    save(out)
    return out


def with_config(head: CertifiedHead, **changes: Any) -> CertifiedHead:
    """A deep copy of ``head`` (same rows, factors, ``b``) with other settings."""
    twin = copy.deepcopy(head)
    twin.config = dataclasses.replace(head.config, **changes)
    return twin


def budget_cycle(head: CertifiedHead, ids: np.ndarray, console: Console) -> dict[str, Any]:
    """Single removals until one forces a retrain (or the ids run out)."""
    kept: list[float] = []
    phases: dict[str, list[float]] = {}
    anchors = 0
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
            anchors += r.anchored
            for phase, seconds in r.timings.items():
                phases.setdefault(phase, []).append(seconds)
    out: dict[str, Any] = {
        "removals_before_retrain": len(kept),
        "exact_passes_before_retrain": anchors,
        "removals_before_retrain_capped": retrain_s is None,
        "removals_per_second": len(kept) / sum(kept) if kept else None,
        "retrain_seconds": retrain_s,
        # where a kept step's time goes: mean seconds per phase (RemovalReport.timings; a
        # phase that only some steps have, e.g. ``exact``, is averaged over those)
        "phase_seconds_mean": {p: float(np.mean(v)) for p, v in phases.items()},
    }
    if retrain_total is not None:
        out["amortised_seconds_per_removal"] = (sum(kept) + retrain_total) / (len(kept) + 1)
    else:  # no retrain within the cap: a lower bound on the amortised cost
        out["amortised_seconds_per_removal"] = sum(kept) / len(kept) if kept else None
    return out


def stream(
    head: CertifiedHead,
    ids: np.ndarray,
    console: Console,
    progress: Any = None,
) -> dict[str, Any]:
    """Single removals of ``ids`` in order, retrains included: wall time per removal.

    Also the terms of the model ``cycles x (removals per cycle x step + retrain)``: the mean
    seconds of a kept step and of a forced retrain (the removal that retrains: its step, the
    retrain, the new factorisations). ``progress(summary)`` is called every 250 removals with
    the figures so far (a long stream keeps what it measured if it is stopped).
    """
    retrains: list[float] = []
    retrain_totals: list[float] = []
    iterations: list[int] = []
    steps: list[float] = []
    anchors: list[float] = []
    t = time.perf_counter()

    def summary(done: int) -> dict[str, Any]:
        total = time.perf_counter() - t
        return {
            "removals": done,
            "seconds": total,
            "amortised_seconds_per_removal": total / max(1, done),
            "retrains": len(retrains),
            "exact_passes": len(anchors),
            "exact_pass_removal_seconds_mean": float(np.mean(anchors)) if anchors else None,
            "retrain_seconds_mean": float(np.mean(retrains)) if retrains else None,
            "retrain_seconds": retrains,
            "retrain_removal_seconds_mean": (
                float(np.mean(retrain_totals)) if retrain_totals else None
            ),
            "retrain_iterations_mean": float(np.mean(iterations)) if iterations else None,
            "step_seconds_mean": float(np.mean(steps)) if steps else None,
            "removals_per_cycle": done / (len(retrains) + 1),
            "load_average": os.getloadavg(),
        }

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"stream ({head.config.accounting})", total=len(ids))
        for i, sid in enumerate(ids):
            r = head.remove([int(sid)])
            bar.advance(task)
            if r.retrained:
                retrains.append(r.timings["retrain"])
                retrain_totals.append(r.timings["total"])
                iterations.append(r.retrain_iterations)
            elif r.anchored:
                anchors.append(r.timings["total"])
            else:
                steps.append(r.timings["total"])
            if progress is not None and (i + 1) % 250 == 0:
                progress(summary(i + 1))
    return summary(len(ids))


def hessian_build(head: CertifiedHead) -> dict[str, Any]:
    """One exact Hessian build over the retained rows, and the rate it reached."""
    data = head.data
    t = time.perf_counter()
    stats = data.statistics(
        StatisticsRequest(head._W, hessian=True)
    )  # the backend array, not a numpy copy
    float(stats.hessian[0, 0, 0])  # type: ignore[index]  # wait for an asynchronous device
    seconds = time.perf_counter() - t
    flops = head.data.columns * data.retained_count * data.dim**2  # syrk: n d^2 per class
    return {"seconds": seconds, "flops": flops, "gflops_per_second": flops / seconds / 1e9}


def batch_charges(
    head: CertifiedHead, order: np.ndarray, sizes: list[int] | tuple[int, ...] = BATCHES
) -> dict[str, Any]:
    """Each batch size from the fresh head, removed as the mode does it (a retrain when it does
    not fit), and the step's bounds measured on a copy that never retrains."""
    out: dict[str, Any] = {}
    for m in sizes:
        if m >= order.size:
            continue
        ids = [int(i) for i in order[:m]]
        real = with_config(head).remove(ids)
        probe = with_config(head, epsilon=1e12, report_exact=True).remove(ids)
        out[str(m)] = {
            "seconds": real.timings["total"],
            "timings": real.timings,
            "certified_without_retrain": not real.retrained,
            "anchored": real.anchored,
            "charged": real.charged,
            "budget_used_ratio": (real.cumulative / head.budget if not real.retrained else None),
            "bounds": {
                "worst": probe.residual_worst,
                "data": probe.residual_data,
                "tight": probe.residual_tight,
                "exact": probe.residual_exact,
            },
        }
    return out


def versus_retraining(
    head: CertifiedHead, ids: list[int], X: Any, y: Any, Xte: Any, yte: Any
) -> dict[str, Any]:
    """One certified batch (exact accounting) against exact retraining with the same ``b``."""
    r = head.remove(ids)
    keep = head.data.retained_ids  # type: ignore[attr-defined]
    t = time.perf_counter()
    k = head.data.num_classes
    ref = train_head(LocalHeadData(X[keep], y[keep], k), head.b, lam=head.config.lam)
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


def parse_args() -> argparse.Namespace:
    """The command line (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=60000)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--seq-cap", type=int, default=3000)
    p.add_argument("--naive", type=int, default=2, help="single removals on the naive path")
    p.add_argument("--stream", type=int, default=300, help="single removals in the stream")
    p.add_argument("--backend", choices=("numpy", "torch"), default="numpy")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="skip the naive path and the cold retrain from scratch (slow at full size)",
    )
    p.add_argument(
        "--accounting",
        nargs="+",
        default=["anchored", "guo", "exact"],
        choices=("anchored", "guo", "exact", "worst"),
    )
    p.add_argument(
        "--stream-accounting",
        nargs="+",
        default=None,
        choices=("anchored", "guo", "exact", "worst"),
        help="the accountings that run the --stream single removals (default: every one)",
    )
    p.add_argument(
        "--only-stream",
        action="store_true",
        help="only the stream of --stream single removals per accounting (no budget cycle, "
        "no batches, no Hessian build): the long amortised runs",
    )
    p.add_argument(
        "--head-cache",
        type=Path,
        default=None,
        help="pickle of the freshly trained head: loaded when it exists (same n, d, backend), "
        "written after training otherwise (skips the initial cold training of later runs)",
    )
    p.add_argument("--k", type=int, default=10, help="classes (synthetic features only)")
    p.add_argument(
        "--features", choices=("fashion", "synthetic"), default="fashion",
        help="fashion: Fashion-MNIST through a d-dimensional RFF map (K = 10); synthetic: K "
        "Gaussian classes directly in R^d (the large workloads)",
    )  # fmt: skip
    p.add_argument("--data-dir", type=Path, default=FMNIST, help="Fashion-MNIST IDX files")
    p.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    p.add_argument(
        "--large", action="store_true",
        help="the large workloads' path: no copies of the head (build, --stream singles, "
        "--batches, one retrain, memory after each); no accounting comparison",
    )  # fmt: skip
    p.add_argument("--out", default=None, help="default: bench/results/removal-<device>.json")
    args = p.parse_args()
    if args.out is None:
        args.out = f"bench/results/removal-{args.device}.json"
    return args


@dataclasses.dataclass(frozen=True)
class Workload:
    """The rows of a run: training and test features with their labels, K and their source."""

    Xtr: np.ndarray
    ytr: np.ndarray
    Xte: np.ndarray
    yte: np.ndarray
    k: int
    source: str


def workload(args: argparse.Namespace, rng: np.random.Generator) -> Workload:
    """Fashion-MNIST through a d-dimensional RFF map, or synthetic Gaussian classes in R^d."""
    if args.features == "synthetic":
        Xtr, ytr = synthetic_features(args.n, args.d, args.k, rng)
        Xte, yte = synthetic_features(10_000, args.d, args.k, np.random.default_rng(1))
        return Workload(Xtr, ytr, Xte, yte, args.k, f"synthetic features: {args.k} Gaussian "
                        f"classes in R^{args.d}")  # fmt: skip
    xtr, ytr, xte, yte, source = load_inputs(args.n, rng, args.data_dir)
    rff = RandomFourierFeatures.draw(
        xtr.shape[1], args.d, bandwidth=median_bandwidth(xtr, rng=rng), rng=rng
    )
    Xtr, Xte = clip_to_unit_ball(rff.transform(xtr)), clip_to_unit_ball(rff.transform(xte))
    return Workload(Xtr, ytr, Xte, yte, 10, source)


def trained_head(
    args: argparse.Namespace, rows: Workload, console: Console
) -> tuple[CertifiedHead, float]:
    """The freshly trained head and its training seconds (from ``--head-cache`` when there)."""
    cfg = HeadConfig(
        lam=1e-3, sigma=10.0, epsilon=1.0, delta=1e-4, report_exact=False,
        device=args.device, backend=args.backend,
    )  # fmt: skip
    cache = args.head_cache
    if cache is not None and cache.exists():
        with cache.open("rb") as fh:
            fresh, train_s = pickle.load(fh)
        console.print(f"loaded the trained head from {cache} (trained in {train_s:.1f} s)")
        return fresh, train_s
    t = time.perf_counter()
    data = LocalHeadData(
        rows.Xtr, rows.ytr, rows.k, backend=make_backend(args.device, args.backend)
    )
    fresh = CertifiedHead(data, cfg, rng=np.random.default_rng(1))
    train_s = time.perf_counter() - t
    if cache is not None:
        with cache.open("wb") as fh:
            pickle.dump((fresh, train_s), fh, protocol=pickle.HIGHEST_PROTOCOL)
    return fresh, train_s


def machine_line() -> str:
    return f"{platform.machine()} ({platform.node()}), {os.cpu_count()} cores"


def write(path: str, body: dict[str, Any]) -> None:
    """The result file (partial results too: a timeout or a stop keeps what was measured)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(body, indent=2) + "\n")


def run_large(
    args: argparse.Namespace, fresh: CertifiedHead, order: np.ndarray, run: dict[str, Any],
    console: Console,
) -> None:  # fmt: skip
    """The large workloads' path (``--large``): no copies of the head."""
    body = {
        **run, "accounting": fresh.config.accounting,
        "memory_after_training": gpu_memory(), "budget": fresh.budget,
    }  # fmt: skip

    def save(figures: dict[str, Any]) -> None:
        write(args.out, {**body, **figures})

    body |= large_workload(fresh, order, args, console, save)
    body["load_average_at_end"] = os.getloadavg()
    save({})
    rate = body["single_removals_per_second"]
    console.print(
        f"n={args.n} d={args.d} K={run['k']}: train {run['train_seconds']:.1f} s, build "
        f"{body['hessian_build']['seconds']:.2f} s, "
        f"{'-' if rate is None else f'{rate:.0f}'} single removals/s, stream "
        f"{body['stream']['amortised_seconds_per_removal'] * 1e3:.2f} ms/removal, "
        + ", ".join(f"batch {m}: {b['seconds'] * 1e3:.1f} ms" for m, b in body["batches"].items())
        + f", retrain {body['retrain_seconds']:.1f} s; memory {body['memory_after_retrain']}"
    )


def per_accounting(
    args: argparse.Namespace, fresh: CertifiedHead, order: np.ndarray, run: dict[str, Any],
    console: Console,
) -> dict[str, Any]:  # fmt: skip
    """For each ``--accounting``: its budget cycle and batches, and its ``--stream``."""
    streamed = set(args.accounting if args.stream_accounting is None else args.stream_accounting)
    modes: dict[str, Any] = {}

    def save_partial() -> None:  # a 10,000-removal stream on 2 cores takes most of an hour
        write(args.out, {"provenance": run["provenance"], "partial": True, "modes": modes, **run})

    for accounting in args.accounting:
        modes[accounting] = {"accounting": accounting}
        if not args.only_stream:
            head = with_config(fresh, accounting=accounting)
            cycle = budget_cycle(head, order[: args.seq_cap], console)
            modes[accounting] |= {
                **cycle,
                "amortised_seconds_per_removal_one_cycle": cycle["amortised_seconds_per_removal"],
                "batches": batch_charges(
                    with_config(fresh, accounting=accounting), order, args.batches
                ),
            }
        if args.stream and accounting in streamed:

            def progress(so_far: dict[str, Any], accounting: str = accounting) -> None:
                modes[accounting]["stream"] = so_far
                save_partial()

            st = stream(
                with_config(fresh, accounting=accounting), order[: args.stream], console, progress
            )
            modes[accounting]["stream"] = st
            modes[accounting]["amortised_seconds_per_removal"] = st["amortised_seconds_per_removal"]
        console.print(f"{accounting}: {modes[accounting].get('removals_before_retrain')} removals")
        save_partial()
    return modes


def references(
    args: argparse.Namespace, fresh: CertifiedHead, order: np.ndarray, rows: Workload
) -> tuple[float | None, dict[str, Any] | None]:
    """The naive path's single removals per second and the exact batch against retraining."""
    if args.no_reference:
        return None, None
    naive = with_config(fresh, hessian_mode="rebuild")
    t = time.perf_counter()
    for sid in order[: args.naive]:
        naive.remove([int(sid)])
    naive_rate = args.naive / (time.perf_counter() - t)
    vs = versus_retraining(
        with_config(fresh, accounting="exact", report_exact=True),
        [int(i) for i in order[:1000]],
        rows.Xtr, rows.ytr, rows.Xte, rows.yte,
    )  # fmt: skip
    return naive_rate, vs


def print_tables(
    args: argparse.Namespace, modes: dict[str, Any], result: dict[str, Any], console: Console
) -> None:
    """The cost per accounting, every bound of one batch, the build and the references."""
    table = Table(title="certified removal: cost per accounting (Fashion-MNIST, n, d, K above)")
    table.add_column("metric")
    for mode in modes:
        table.add_column(mode, justify="right")

    def cell(mode: str, key: str, fmt: str) -> str:
        value = modes[mode].get(key)
        if key == "amortised_seconds_per_removal" and "stream" not in modes[mode]:
            value = None  # no stream for this accounting: the figure is one cycle's
        return "-" if value is None else format(value, fmt)

    for key, label, fmt in (
        ("removals_before_retrain", "single removals before retrain", "d"),
        ("removals_per_second", "single removals / s (kept steps)", ".1f"),
        ("retrain_seconds", "retrain (s)", ".1f"),
        ("amortised_seconds_per_removal_one_cycle", "amortised s / removal, one cycle", ".3f"),
        ("amortised_seconds_per_removal", "amortised s / removal, stream", ".3f"),
    ):
        table.add_row(label, *(cell(m, key, fmt) for m in modes))
    for m in args.batches:
        row = []
        for mode in modes:
            b = modes[mode]["batches"].get(str(m))
            row.append(
                "-"
                if b is None
                else f"{b['seconds']:.2f} s, "
                + (
                    f"certified ({b['budget_used_ratio']:.2g}x budget)"
                    if b["certified_without_retrain"]
                    else "RETRAIN"
                )
            )
        table.add_row(f"batch of {m:,}", *row)
    console.print(table)
    bounds = Table(title="one batch from the fresh head: every bound of the step / budget")
    bounds.add_column("batch")
    for kind in ("worst", "data", "tight", "exact"):
        bounds.add_column(kind, justify="right")
    for m in args.batches:
        b = next(iter(modes.values()))["batches"].get(str(m))
        if b is not None:
            bounds.add_row(
                f"{m:,}", *(f"{b['bounds'][k] / result['budget']:.3g}" for k in b["bounds"])
            )
    console.print(bounds)
    build, vs = result["hessian_build"], result["exact_batch_vs_retraining"]
    console.print(
        f"one exact Hessian build: {build['seconds']:.2f} s "
        f"({build['gflops_per_second']:.1f} GF/s over K n d^2 = {build['flops']:.2e} flops)"
    )
    if vs is not None:
        console.print(
            f"exact accounting, batch of 1,000: {vs['batch_removal_seconds']:.2f} s vs "
            f"retraining {vs['retrain_from_scratch_seconds']:.1f} s; accuracy gap "
            f"{vs['accuracy_gap_points']:.3f} points; distance "
            f"{vs['relative_param_distance']:.1e}; naive path "
            f"{result['naive_removals_per_second']:.3f} removals/s"
        )


def main() -> None:
    """Stages: the workload, the trained head, then the large path, or each accounting, the
    build and the references; the tables; the result file."""
    args = parse_args()
    load_start = os.getloadavg()
    console = Console()
    rng = np.random.default_rng(0)
    rows = workload(args, rng)
    device_name = "cpu"
    if args.device == "cuda":
        import torch

        device_name = torch.cuda.get_device_name(0)
    origin = provenance(None if args.device == "cpu" else device_name)
    console.print(
        f"[bold]workload[/]: n={args.n} d={args.d} K={rows.k} ({rows.source}); "
        f"{args.backend} on {device_name}"
    )
    fresh, train_s = trained_head(args, rows, console)
    console.print(f"trained in {train_s:.1f} s ({fresh.last_fit_iterations} Newton iterations)")
    order = rng.permutation(args.n)
    run = {
        "provenance": origin, "n": args.n, "d": args.d, "k": rows.k, "backend": args.backend,
        "device": args.device, "device_name": device_name, "source": rows.source,
        "stream_removals": args.stream, "train_seconds": train_s,
        "machine": machine_line(), "load_average_at_start": load_start,
    }  # fmt: skip
    if args.large:
        run_large(args, fresh, order, run, console)
        console.print(f"wrote {args.out}")
        return
    modes = per_accounting(args, fresh, order, run, console)
    if args.only_stream:
        write(args.out, {**run, "modes": modes, "budget": fresh.budget,
                         "load_average_at_end": os.getloadavg()})  # fmt: skip
        for mode, body in modes.items():
            st = body["stream"]
            console.print(
                f"{mode}: {st['removals']} removals in {st['seconds']:.1f} s, "
                f"{st['amortised_seconds_per_removal']:.4f} s/removal, {st['retrains']} retrains"
            )
        console.print(f"wrote {args.out}")
        return
    build = hessian_build(fresh)
    naive_rate, vs = references(args, fresh, order, rows)
    headline = next(iter(modes))  # the first --accounting (default: anchored, the default)
    result = {
        **run,
        "accounting": headline,  # the headline figures below; every mode in "modes"
        "removals_before_retrain": modes[headline]["removals_before_retrain"],
        "retrain_seconds": modes[headline]["retrain_seconds"],
        "amortised_seconds_per_removal": modes[headline]["amortised_seconds_per_removal"],
        "modes": modes,
        "memory": gpu_memory(),
        "hessian_build": build,
        "budget": fresh.budget,
        "training_residual": fresh.cumulative_residual,
        "naive_removals_per_second": naive_rate,
        "exact_batch_vs_retraining": vs,
        "load_average_at_end": os.getloadavg(),
    }
    print_tables(args, modes, result, console)
    write(args.out, result)
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
