"""Where a benchmark figure comes from: the command, commit, date and machine that made it.

Every benchmark's JSON carries :func:`provenance` under ``provenance``: the command line, the
git commit (with ``-dirty`` when the tree had changes), the UTC date, and the machine: CPU
model and cores (or the GPU's name), memory, the load average before the run, and the host's
speed on one fixed dense product (float64 GFLOP/s, single-threaded and with every core), so
that figures from two hosts can be compared.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

#: The fixed dense product that measures a host: (n x n) @ (n x n), float64.
PRODUCT_N = 1024


def commit() -> str:
    """The checkout's commit, ``-dirty`` when tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    """Total memory in GiB (``/proc/meminfo``), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def host_gflops(threads: int | None = None, repeats: int = 5) -> float | None:
    """Best-of-``repeats`` float64 GFLOP/s of the fixed product on ``threads`` BLAS threads
    (None where ``threadpoolctl`` is missing, as on a bare GPU host: the count is unknown)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None

    rng = np.random.default_rng(0)
    a = rng.standard_normal((PRODUCT_N, PRODUCT_N))
    b = rng.standard_normal((PRODUCT_N, PRODUCT_N))
    best = float("inf")
    with threadpool_limits(limits=threads, user_api="blas"):
        a @ b  # warm the pool and the caches
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t)
    return 2 * PRODUCT_N**3 / best / 1e9


def rounded(x: float | None) -> float | None:
    """``x`` to two decimals, None as None."""
    return None if x is None else round(x, 2)


def machine(device: str | None = None) -> dict[str, Any]:
    """The machine a figure was measured on, with its load and speed now."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory_gib(),
        "device": device or "cpu",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "gflops_1_thread": rounded(host_gflops(1)),
        "gflops_all_threads": rounded(host_gflops(None)),
    }


def provenance(device: str | None = None) -> dict[str, Any]:
    """Command, commit, date and machine of the run that calls it."""
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(device),
    }
