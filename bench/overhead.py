"""Benchmark: the per-removal Python overhead of the certified head (issue 27).

Workload: a small synthetic head where flops are nothing (n = 20,000 rows on the unit sphere,
d = 64, K = 10 one-vs-rest columns, sigma 10, eps 1, delta 1e-4, lam 1e-3, uniform weights,
``report_exact`` off): what a single removal costs here is Python, kernel launches and
device-to-host transfers, the part of a removal that a GPU does not speed up. Per backend
(numpy; torch on the CPU) and accounting: the median and mean seconds of ``--removals`` single
removals (a removal that retrains is left out and counted), and the device-to-host transfers
per removal (torch only, on a head that takes the GPU's code path:
``tests/support/transfers.py``).

torch on the CPU computes the head's small arrays with numpy on the same memory
(``Backend.small_work``); ``--gpu-path`` times torch's own arrays throughout instead
(``UNLEARNSIM_TORCH_GPU_PATH=1``), the calls a GPU dispatches. Trees before that variable
existed (7c4b210) had no numpy shortcut, so their torch row is the GPU's path either way.

Run it on two source trees to compare before and after a change, e.g.
``PYTHONPATH=/path/to/old/tree python bench/overhead.py --out /tmp/before.json``.

Usage: ``python bench/overhead.py [--removals 400] [--gpu-path] [--out PATH]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from provenance import provenance
from rich.console import Console
from rich.table import Table

from simulator.head import CertifiedHead, HeadConfig, LocalHeadData
from simulator.head.backend import make_backend

GPU_PATH_VARIABLE = "UNLEARNSIM_TORCH_GPU_PATH"  # simulator.head.backend's (older trees lack it)

N, D, K = 20_000, 64, 10


def small_head(backend: str, accounting: str) -> CertifiedHead:
    """The overhead workload's freshly trained head (seeded: the same on every run)."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(K, D))
    y = rng.integers(0, K, size=N)
    X = centers[y] + 2.0 * rng.normal(size=(N, D))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    cfg = HeadConfig(lam=1e-3, sigma=10.0, epsilon=1.0, delta=1e-4, report_exact=False,
                     accounting=accounting, device="cpu", backend=backend)  # fmt: skip
    data = LocalHeadData(X, y, K, backend=make_backend("cpu", backend))
    return CertifiedHead(data, cfg, rng=np.random.default_rng(1))


def transfers_per_removal(accounting: str, ids: np.ndarray) -> float | None:
    """Mean device-to-host transfers per removal (retrains left out) of a torch head on the
    GPU's code path.

    Counted by the tests' counter (``tests/support/transfers.py``) on a head built with
    ``UNLEARNSIM_TORCH_GPU_PATH=1`` (what a GPU runs); None in a tree without the counter.
    """
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from support.transfers import TransferCounter
    except ImportError:  # an older tree without the counter
        return None
    previous = os.environ.get(GPU_PATH_VARIABLE)
    os.environ[GPU_PATH_VARIABLE] = "1"
    counts = []
    try:
        head = small_head("torch", accounting)
        for sid in ids:
            with TransferCounter() as counter:
                report = head.remove([int(sid)])
            if not report.retrained:  # a retrain's Newton iterations read back by design
                counts.append(counter.count)
    finally:
        if previous is None:
            del os.environ[GPU_PATH_VARIABLE]
        else:
            os.environ[GPU_PATH_VARIABLE] = previous
    return float(np.mean(counts)) if counts else None


def measure(backend: str, accounting: str, removals: int) -> dict[str, Any]:
    """Seconds per single removal (median, mean) and transfers per removal."""
    head = small_head(backend, accounting)
    order = np.random.default_rng(2).permutation(N)
    for sid in order[:20]:  # warm-up: first calls import and allocate
        head.remove([int(sid)])
    seconds = []
    retrains = 0
    for sid in order[20 : 20 + removals]:
        t = time.perf_counter()
        report = head.remove([int(sid)])
        if report.retrained:  # a retrain is flops, not overhead: left out, and counted
            retrains += 1
        else:
            seconds.append(time.perf_counter() - t)
    counted = None
    if backend == "torch":
        counted = transfers_per_removal(accounting, order[20 : 20 + 100])
    return {
        "backend": backend,
        "accounting": accounting,
        "removals": removals,
        "retrains_left_out": retrains,
        "median_seconds": float(np.median(seconds)),
        "mean_seconds": float(np.mean(seconds)),
        "transfers_per_removal": counted,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--removals", type=int, default=400)
    p.add_argument("--accounting", nargs="+", default=["anchored", "guo"])
    p.add_argument("--out", type=Path, default=Path("bench/results/overhead.json"))
    p.add_argument(
        "--gpu-path",
        action="store_true",
        help="time torch on the GPU's code path (UNLEARNSIM_TORCH_GPU_PATH=1: torch's arrays "
        "throughout, no numpy on the CPU), the part of a removal that a GPU pays per call",
    )
    args = p.parse_args()
    origin = provenance()  # command, commit, date, machine, load before the run
    if args.gpu_path:
        os.environ[GPU_PATH_VARIABLE] = "1"
    console = Console()
    load = os.getloadavg()
    rows = [measure(b, a, args.removals) for b in ("numpy", "torch") for a in args.accounting]
    table = Table(title=f"per-removal overhead (n={N}, d={D}, K={K}, CPU)")
    for col in ("backend", "accounting", "median ms", "mean ms", "transfers / removal"):
        table.add_column(col, justify="right")
    for r in rows:
        t = r["transfers_per_removal"]
        ms = f"{1e3 * r['median_seconds']:.2f}", f"{1e3 * r['mean_seconds']:.2f}"
        table.add_row(r["backend"], r["accounting"], *ms, "-" if t is None else f"{t:.1f}")
    console.print(table)
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()  # fmt: skip
    body = {
        "workload": {"n": N, "d": D, "k": K, "sigma": 10.0, "report_exact": False},
        "torch_code_path": "gpu" if args.gpu_path else "cpu",
        "rows": rows,
        "commit": commit,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} ({platform.node()}), {os.cpu_count()} cores",
        "load_average_at_start": load,
        "load_average_at_end": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"provenance": origin, **body}, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
