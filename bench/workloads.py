"""Memory and flops of the certified head at issue 16's workloads (a model, not a timing).

For each workload (n rows, d random features, K one-vs-rest columns, float64) the arrays the
head keeps (:mod:`simulator.head`): the rows ``X`` (n, d) and labels (n, K) of
:class:`~simulator.head.LocalHeadData` (a second copy of ``X`` on the device for torch), the
removal solver's K Hessians and their K Cholesky factors (``solver.HessianSolver``: ``2 K d^2``),
the Gram matrix (d, d). The peak adds a retrain's transients on top of the live solver: the
Hessian statistics, the objective Hessian (statistics + ``lam n I``), the new solver's copy of
it (its factors are the polish's, one more ``K d^2``): ``4 K d^2`` more, and one block of the
build (``BLOCK_FLOATS`` floats). And the flops: one Hessian build ``K n d^2`` (symmetric
rank-k updates), one gradient pass ``4 n d K``, a batch of m rows' downdate ``K m d^2`` and
refactorisation ``K d^3 / 3``; seconds at the given rates (``--cpu-gflops``, measured here
with nothing else running: 66 GF/s for the build; ``--gpu-tflops``: the H200's 25 TF/s).

Usage: ``python bench/workloads.py [--cpu-gflops 66] [--gpu-tflops 25]`` (writes
``bench/results/workloads.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from provenance import provenance
from rich.console import Console
from rich.table import Table

from simulator.head.backend import BLOCK_FLOATS

GB = 1e9
WORKLOADS = (
    {"name": "benchmark (Fashion-MNIST)", "n": 60_000, "d": 1_024, "k": 10, "batch": 1_000},
    {"name": "wide: d = 4,096, K = 100", "n": 200_000, "d": 4_096, "k": 100, "batch": 1_000},
    {"name": "tall: n = 1,000,000", "n": 1_000_000, "d": 1_024, "k": 10, "batch": 10_000},
)


def model(n: int, d: int, k: int, batch: int, cpu: float, gpu: float) -> dict[str, float]:
    """Bytes (float64) and flops of one workload; seconds at ``cpu`` / ``gpu`` flop rates."""
    rows = 8.0 * (n * d + n * k + 2 * n)  # X, signed labels, weights and flags
    solver = 8.0 * 2 * k * d * d  # K Hessians + K Cholesky factors
    gram = 8.0 * d * d
    steady = rows + solver + gram
    peak = steady + 8.0 * (4 * k * d * d + BLOCK_FLOATS + 6 * n * k)  # retrain transients
    build = float(k) * n * d * d
    gradient = 4.0 * n * d * k
    batch_flops = float(k) * batch * d * d + k * d**3 / 3.0
    return {
        "rows_gb": rows / GB,
        "solver_gb": solver / GB,
        "steady_gb": steady / GB,
        "peak_gb": peak / GB,
        "peak_gb_torch_cpu": (peak + 8.0 * n * d) / GB,  # the device copy of X
        "hessian_build_flops": build,
        "gradient_pass_flops": gradient,
        "batch_flops": batch_flops,
        "hessian_build_seconds_cpu": build / (cpu * 1e9),
        "hessian_build_seconds_gpu": build / (gpu * 1e12),
        "batch_seconds_cpu_floor": batch_flops / (cpu * 1e9),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu-gflops", type=float, default=66.0)
    p.add_argument("--gpu-tflops", type=float, default=25.0)
    p.add_argument("--cpu-memory-gb", type=float, default=12.0, help="what a CPU run may use")
    p.add_argument("--out", type=Path, default=Path("bench/results/workloads.json"))
    args = p.parse_args()
    origin = provenance()  # command, commit, date, machine, load before the run
    out = []
    table = Table(title="the head's memory (float64) and flops per workload")
    for col in ("workload", "n", "d", "K", "steady GB", "peak GB", "build flops", "build CPU s",
                "build GPU s", "fits CPU"):  # fmt: skip
        table.add_column(col, justify="right")
    for w in WORKLOADS:
        m = model(w["n"], w["d"], w["k"], w["batch"], args.cpu_gflops, args.gpu_tflops)
        m["fits_cpu"] = m["peak_gb"] <= args.cpu_memory_gb
        out.append({**w, **m})
        table.add_row(
            str(w["name"]), f"{w['n']:,}", f"{w['d']:,}", str(w["k"]), f"{m['steady_gb']:.1f}",
            f"{m['peak_gb']:.1f}", f"{m['hessian_build_flops']:.2e}",
            f"{m['hessian_build_seconds_cpu']:.0f}", f"{m['hessian_build_seconds_gpu']:.2f}",
            "yes" if m["fits_cpu"] else "no",
        )  # fmt: skip
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    body = {"cpu_gflops": args.cpu_gflops, "gpu_tflops": args.gpu_tflops,
            "cpu_memory_gb": args.cpu_memory_gb, "workloads": out}  # fmt: skip
    args.out.write_text(json.dumps({"provenance": origin, **body}, indent=2) + "\n")


if __name__ == "__main__":
    main()
