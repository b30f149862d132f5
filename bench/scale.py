"""Benchmark: what the certified head costs against n, d and K, one axis at a time.

Each point is one run of ``bench/removal.py --features synthetic --large`` (K Gaussian classes
directly in R^d, rows in the unit ball; eps = 1, delta = 1e-4, sigma = 10, lam = 1e-3,
``anchored`` accounting, the default) in its own process, so that the figures come from the
removal benchmark's code and each point's peak memory is its own. Per point:

* ``train_seconds``: the head's set-up (rows onto the backend and the Newton fit);
* ``removal_seconds``: a certified single removal, amortised over a stream of ``--stream``
  single removals from the fresh head, every exact pass and retrain the budget forces
  included (``retrains`` and ``exact_passes`` count them);
* ``batch_seconds``: one removal of a 1,000-row batch (exact passes, any retrain included)
  and whether it was certified without a retrain;
* ``hessian_build_seconds`` and ``retrain_seconds``: one exact Hessian build and one retrain;
* ``peak_rss_gb``: the process's peak resident memory (``wait4``'s ``ru_maxrss``; it includes
  the interpreter and libraries, ``baseline_rss_gb`` in the JSON, and the benchmark's rows);
  on CUDA also ``peak_gpu_gb``, the most the process allocated on the card.

The base point is ``--base`` (default per device: CPU n = 20,000, d = 512, K = 10, which fits
a 2-core host; CUDA n = 60,000, d = 1,024, K = 10, the benchmark workload's shape) and each
``--axis`` varies one coordinate over its range (``RANGES``); the base point is measured once.
A point whose estimated memory exceeds 80 % of the host's (or the card's) is skipped and says
so; a point that runs past ``--point-timeout`` keeps what its stages measured and is marked
``timed_out``. The federation's client count is benchmarked by ``bench/clients.py``.

Writes ``bench/results/scale-<device>.json`` (``--out``) after every point, with its provenance
(``bench/provenance.py``), and prints a table.

Usage: ``python bench/scale.py [--device cpu|cuda] [--axis n d k] [--stream 200]
[--point-timeout 900] [--base N D K] [--n-values ...] [--d-values ...] [--k-values ...]
[--out PATH]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provenance import memory_gib, provenance
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
REMOVAL = ROOT / "bench" / "removal.py"
AXES = ("n", "d", "k")
BATCH = 1000

#: Base point and per-axis values by device. On 2 CPU cores the d axis stops at 2,048 (a point
#: at d = 4,096 takes about ten minutes: training grows as n d^2 K per Newton step); on CUDA
#: the ranges span n = 10^4-10^6, d = 256-4,096, K = 2-100.
RANGES: dict[str, dict[str, Any]] = {
    "cpu": {
        "base": {"n": 20_000, "d": 512, "k": 10},
        "n": [10_000, 20_000, 60_000, 200_000, 1_000_000],
        "d": [256, 512, 1024, 2048],
        "k": [2, 10, 30, 100],
    },
    "cuda": {
        "base": {"n": 60_000, "d": 1024, "k": 10},
        "n": [10_000, 60_000, 200_000, 1_000_000],
        "d": [256, 1024, 2048, 4096],
        "k": [2, 10, 30, 100],
    },
}


@dataclass(frozen=True)
class Point:
    """One workload shape: rows, feature dimension and classes."""

    n: int
    d: int
    k: int

    def estimated_bytes(self) -> int:
        """Rough peak: the rows in float64 twice (generation, backend copy), a 10,000-row test
        set, and five K d x d float64 blocks (Hessian, factors, the removal's workspace)."""
        return 8 * (2 * self.n * self.d + 10_000 * self.d + 5 * self.k * self.d**2)


def rusage_wait(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, float, bool]:
    """Wait for ``proc`` (killing it after ``timeout`` seconds).

    Parameters
    ----------
    proc : subprocess.Popen
        A child of this process.
    timeout : float
        Seconds before it is killed.

    Returns
    -------
    tuple of (int, float, bool)
        Its exit code, its peak resident memory in GB (``ru_maxrss``) and whether it was
        killed for the timeout.
    """
    deadline = time.monotonic() + timeout
    killed = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if not killed and time.monotonic() > deadline:
            proc.kill()
            killed = True
        time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss * 1024 / 1e9, killed


def baseline_rss_gb() -> float:
    """Peak resident memory (GB) of an interpreter that only imports what a point imports."""
    code = "import numpy, scipy, rich, torch, simulator.head"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    return rusage_wait(proc, 120.0)[1]


def device_limit_gb(device: str) -> float | None:
    """Memory a point may use: the card's on CUDA, the host's on the CPU (GB)."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_properties(0).total_memory / 1e9
    total = memory_gib()
    return None if total is None else total * 2**30 / 1e9


def summarise(body: dict[str, Any]) -> dict[str, Any]:
    """The user's costs from one ``bench/removal.py --large`` result (None where a stage did
    not finish)."""
    st = body.get("stream") or {}
    batch = (body.get("batches") or {}).get(str(BATCH)) or {}
    stages = ("retrain", "batches", "singles", "build", "training")  # the last stage first
    memory: dict[str, float] = next(
        (body[f"memory_after_{s}"] for s in stages if body.get(f"memory_after_{s}")), {}
    )
    return {
        "train_seconds": body.get("train_seconds"),
        "removal_seconds": st.get("amortised_seconds_per_removal"),
        "stream_removals": st.get("removals"),
        "retrains": st.get("retrains"),
        "exact_passes": st.get("exact_passes"),
        "batch_seconds": batch.get("seconds"),
        "batch_certified": batch.get("certified_without_retrain"),
        "hessian_build_seconds": (body.get("hessian_build") or {}).get("seconds"),
        "hessian_build_gflops": (body.get("hessian_build") or {}).get("gflops_per_second"),
        "retrain_seconds": body.get("retrain_seconds"),
        "peak_gpu_gb": memory.get("peak_allocated_gb"),
        "peak_gpu_reserved_gb": memory.get("peak_reserved_gb"),
    }


def measure(
    point: Point, args: argparse.Namespace, work: Path, limit: float | None
) -> dict[str, Any]:
    """One point: ``bench/removal.py`` in a child process, its figures and peak memory."""
    shape = {"n": point.n, "d": point.d, "k": point.k}
    estimate = point.estimated_bytes() / 1e9
    if limit is not None and estimate > 0.8 * limit:
        return {**shape, "status": f"skipped: needs ~{estimate:.0f} GB of {limit:.0f} GB",
                "estimated_gb": estimate}  # fmt: skip
    out = work / f"n{point.n}-d{point.d}-k{point.k}.json"
    backend = "numpy" if args.device == "cpu" else "torch"
    command = [
        sys.executable, str(REMOVAL), "--features", "synthetic", "--large",
        "--n", str(point.n), "--d", str(point.d), "--k", str(point.k),
        "--stream", str(args.stream), "--batches", str(BATCH),
        "--backend", backend, "--device", args.device, "--out", str(out),
    ]  # fmt: skip
    load = os.getloadavg()
    t = time.perf_counter()
    log = out.with_suffix(".log")
    with log.open("wb") as sink:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
        code, rss, killed = rusage_wait(proc, args.point_timeout)
    wall = time.perf_counter() - t
    try:  # a point killed while writing leaves a cut file
        body = json.loads(out.read_text()) if out.exists() else {}
    except ValueError:
        body = {}
    status = "ok" if code == 0 else ("timed_out" if killed else f"failed (exit {code})")
    result = {
        **shape, "status": status, **summarise(body), "peak_rss_gb": rss,
        "estimated_gb": estimate, "wall_seconds": wall, "load_average_at_start": load,
        "command": " ".join(["python", "bench/removal.py", *command[2:-2]]),
    }  # fmt: skip
    if code != 0:
        result["log_tail"] = log.read_text(errors="replace")[-2000:]
    return result


def plan_of(args: argparse.Namespace) -> dict[str, Any]:
    """The device's ``RANGES`` with the command line's ``--base`` and value lists."""
    plan = dict(RANGES[args.device])
    if args.base is not None:
        plan["base"] = dict(zip(AXES, args.base, strict=True))
    for axis in AXES:
        if getattr(args, f"{axis}_values") is not None:
            plan[axis] = getattr(args, f"{axis}_values")
    return plan


def points(args: argparse.Namespace) -> list[tuple[str, Point]]:
    """(axis, point) in order; the base point once, under the first axis that holds it."""
    plan = plan_of(args)
    base = Point(**plan["base"])
    seen: set[Point] = set()
    out: list[tuple[str, Point]] = []
    for axis in args.axis:
        for value in plan[axis]:
            point = Point(**{**plan["base"], axis: value})
            if point not in seen:
                seen.add(point)
                out.append(("base" if point == base else axis, point))
    return out


def cell(value: float | None, fmt: str, scale: float = 1.0) -> str:
    """``value * scale`` formatted, ``-`` for None."""
    return "-" if value is None else format(value * scale, fmt)


def show(document: dict[str, Any], console: Console) -> None:
    """The sweep as a table."""
    base = document["base"]
    table = Table(
        title=f"certified head against n, d, K ({document['device_name']}; base n={base['n']:,} "
        f"d={base['d']:,} K={base['k']})"
    )
    gpu = document["device"] == "cuda"
    columns = ["axis", "n", "d", "K", "train s", "removal ms", "retrains / exact"]
    columns += ["batch 1,000 ms", "build s", "retrain s", "peak RSS GB"]
    for col in [*columns, *(["GPU GB"] if gpu else []), "status"]:
        table.add_column(col, justify="right")  # fmt: skip
    for p in document["points"]:
        table.add_row(
            p["axis"], f"{p['n']:,}", f"{p['d']:,}", str(p["k"]),
            cell(p.get("train_seconds"), ".1f"), cell(p.get("removal_seconds"), ".2f", 1e3),
            f"{p.get('retrains', '-')} / {p.get('exact_passes', '-')}",
            cell(p.get("batch_seconds"), ".0f", 1e3), cell(p.get("hessian_build_seconds"), ".2f"),
            cell(p.get("retrain_seconds"), ".1f"), cell(p.get("peak_rss_gb"), ".2f"),
            *([cell(p.get("peak_gpu_gb"), ".1f")] if gpu else []), p["status"],
        )  # fmt: skip
    console.print(table)


def parse_args() -> argparse.Namespace:
    """The command line (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--axis", nargs="+", choices=AXES, default=list(AXES))
    p.add_argument("--base", type=int, nargs=3, metavar=("N", "D", "K"), default=None,
                   help="the base point (default per device: RANGES)")  # fmt: skip
    for axis in AXES:
        p.add_argument(f"--{axis}-values", type=int, nargs="+", default=None,
                       help=f"the {axis} axis' values (default per device: RANGES)")  # fmt: skip
    p.add_argument("--stream", type=int, default=200, help="single removals per point")
    p.add_argument("--point-timeout", type=float, default=900.0, help="seconds per point")
    p.add_argument(
        "--out", type=Path, default=None, help="default bench/results/scale-<device>.json"
    )
    args = p.parse_args()
    if args.out is None:
        args.out = ROOT / "bench" / "results" / f"scale-{args.device}.json"
    return args


def main() -> None:
    """Every point of every ``--axis`` in turn; the JSON after each; the table."""
    args = parse_args()
    console = Console()
    plan = plan_of(args)
    name = "cpu"
    if args.device == "cuda":
        import torch

        name = torch.cuda.get_device_name(0)
    document: dict[str, Any] = {
        "provenance": provenance(None if args.device == "cpu" else name),
        "device": args.device, "device_name": name, "base": plan["base"],
        "ranges": {a: plan[a] for a in args.axis},
        "stream_removals": args.stream, "batch_rows": BATCH, "accounting": "anchored",
        "point_timeout_seconds": args.point_timeout, "baseline_rss_gb": baseline_rss_gb(),
        "partial": True, "points": [],
    }  # fmt: skip
    limit = device_limit_gb(args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for axis, point in points(args):
            console.print(f"{axis}: n={point.n:,} d={point.d:,} K={point.k} ...")
            result = {"axis": axis, **measure(point, args, Path(tmp), limit)}
            document["points"].append(result)
            console.print(
                f"  {result['status']}: train {cell(result.get('train_seconds'), '.1f')} s, "
                f"removal {cell(result.get('removal_seconds'), '.2f', 1e3)} ms, batch "
                f"{cell(result.get('batch_seconds'), '.0f', 1e3)} ms, peak "
                f"{cell(result.get('peak_rss_gb'), '.2f')} GB in "
                f"{cell(result.get('wall_seconds'), '.0f')} s"
            )
            args.out.write_text(json.dumps(document, indent=2) + "\n")
    document["partial"] = False
    document["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    show(document, console)
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
