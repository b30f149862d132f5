"""Benchmark: a snapshot written on a thread, and how much it slows the thread beside it.

The consumer writes its snapshot (the head's state: base and factors, K d^2 floats each) on a
thread while the next batches run on the main one (``server/kafka/checkpoint.py``). What the
writer holds the GIL for is time the main thread, host-bound on the GPU path, cannot use.
Workload: a state of two (K, d, d) float64 arrays and one (m, d), as the solver's, written with
``simulator.state_files.write_state`` (fsync on) on a thread while the main thread runs a pure
Python loop; printed per writer: the write's seconds and the loop's rate during the write as a
fraction of its rate alone (1.0: no interference). ``--tree`` compares another source tree's
``simulator/state_files.py`` (e.g. one extracted with ``git show REV:simulator/state_files.py``
into a folder's ``simulator/``).

Usage: ``python bench/state_writer.py [--k 10 --d 1024 --rows 8000] [--repeats 3]
[--tree DIR] [--out bench/results/state-writer.json]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from provenance import provenance
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def writer_module(tree: Path | None) -> ModuleType:
    """``simulator.state_files`` of this checkout, or of ``tree``."""
    if tree is None:
        sys.path.insert(0, str(ROOT))
        import simulator.state_files as current

        return current
    spec = importlib.util.spec_from_file_location(
        "other_state_files", tree / "simulator" / "state_files.py"
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"no simulator/state_files.py under {tree}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loop_rate(seconds: float) -> float:
    """Iterations per second of a small pure-Python step, alone."""
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        sum(range(100))
        n += 1
    return n / (time.perf_counter() - t)


def one_write(module: ModuleType, state: dict[str, Any], folder: Path) -> tuple[float, float]:
    """Seconds of one threaded write, and the loop's rate meanwhile (iterations per second)."""
    thread = threading.Thread(target=module.write_state, args=(folder / "state.npz", state))
    n, t = 0, time.perf_counter()
    thread.start()
    while thread.is_alive():
        sum(range(100))
        n += 1
    seconds = time.perf_counter() - t
    return seconds, n / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--rows", type=int, default=8000, help="rows of the (m, d) array")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tree", type=Path, default=None, help="another tree's state_files.py")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "state-writer.json")
    args = p.parse_args()
    origin = provenance()  # command, commit, date, machine, load before the run
    module = writer_module(args.tree)
    rng = np.random.default_rng(0)
    state = {
        "base": rng.normal(size=(args.k, args.d, args.d)),
        "factors": rng.normal(size=(args.k, args.d, args.d)),
        "rows": rng.normal(size=(args.rows, args.d)),
    }
    megabytes = sum(a.nbytes for a in state.values()) / 1e6
    alone = loop_rate(1.0)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            seconds, rate = one_write(module, state, Path(tmp))
            runs.append({"seconds": seconds, "loop_fraction": rate / alone})
    result = {
        "tree": str(args.tree or ROOT),
        "megabytes": megabytes,
        "write_seconds_median": statistics.median(r["seconds"] for r in runs),
        "loop_fraction_median": statistics.median(r["loop_fraction"] for r in runs),
        "runs": runs,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
    }
    table = Table(title=f"a {megabytes:.0f} MB state written on a thread")
    for column in ("tree", "write s (median)", "main-thread loop vs alone (median)"):
        table.add_column(column)
    table.add_row(
        result["tree"],
        f"{result['write_seconds_median']:.2f}",
        f"{result['loop_fraction_median']:.2f}",
    )
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"provenance": origin, **result}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
