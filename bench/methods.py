"""Benchmark: removal time of every unlearning method on one workload, as a ratio to ``cr``.

Workload: one seed of a comparison scenario (default ``scenarios/compare_mnist_3v8_ood.yaml``,
seed 0: 800 MNIST 3/8 images, the scenario's deletion stream cut at its checkpoints). Every
method is fitted on the same rows and then

* applies the same removal steps (the stream's batches up to the last checkpoint): total
  seconds, median seconds per call, seconds per removed sample;
* removes ``--singles`` more samples one at a time (the same seeded ids for every method):
  median seconds per single removal (the streaming case).

Only :meth:`remove` is timed, never fitting or evaluation, two ways: the process CPU seconds
(``time.process_time``, all threads) around each call, and the wall seconds the method reports
(``RemovalOutcome.seconds``). The machines are shared (load averages of 10-20 were seen on two
cores) and wall times then swing 10x between identical runs; CPU seconds are what a method
costs whoever else runs, so the ratios to ``cr`` use them (the paper's Table 2 reads "closer
to CR is better"). torch runs single-threaded as in ``unlearnsim compare``. The whole sequence
runs ``--repeats`` times, methods interleaved, and each method's cheapest repeat is reported;
every repeat and the load average before and after are kept in the JSON.

Prints a table and writes ``bench/results/methods.json``.

Usage: ``python bench/methods.py [--scenario PATH] [--seed 0] [--singles 5] [--repeats 2]
[--methods a,b]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from provenance import provenance
from rich.console import Console
from rich.table import Table

from simulator.compare import build_workload
from simulator.scenario import load_scenario
from simulator.threads import thread_limits
from simulator.unlearners import create_unlearner, registered_unlearners


def time_method(name: str, workload: Any, singles: int) -> dict[str, Any]:
    """Fit ``name``, run the workload's steps and ``singles`` single removals; timings only."""
    u = create_unlearner(name, workload.settings)
    fit = u.fit(workload.train, seed=workload.seed)
    calls, calls_cpu = timed(u, workload.steps)
    rng = np.random.default_rng(12345)
    single_ids = rng.choice(u.retained_ids, size=singles, replace=False)
    one, one_cpu = timed(u, [np.array([i]) for i in single_ids])
    batch_total = sum(c.seconds for c in calls)
    samples = sum(c.removed for c in calls)
    return {
        "fit_seconds": fit.seconds,
        "batch": {
            "calls": len(calls),
            "samples": samples,
            "cpu_seconds": sum(calls_cpu),
            "total_seconds": batch_total,
            "median_call_seconds": statistics.median(c.seconds for c in calls),
            "cpu_seconds_per_sample": sum(calls_cpu) / max(samples, 1),
            "retrains": sum(int(c.retrained) for c in calls),
        },
        "single": {
            "calls": len(one),
            "median_cpu_seconds": statistics.median(one_cpu) if one else None,
            "median_seconds": statistics.median(c.seconds for c in one) if one else None,
            "retrains": sum(int(c.retrained) for c in one),
        },
    }


def timed(u: Any, batches: Sequence[Any]) -> tuple[list[Any], list[float]]:
    """Remove each batch; the outcomes (wall seconds inside) and the process CPU seconds."""
    outcomes, cpu = [], []
    for ids in batches:
        start = time.process_time()
        outcomes.append(u.remove(ids))
        cpu.append(time.process_time() - start)
    return outcomes, cpu


def fastest(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest repeat's numbers (batch and single separately), with every repeat kept."""
    best_batch = min(runs, key=lambda r: r["batch"]["cpu_seconds"])
    singles = [r for r in runs if r["single"]["median_cpu_seconds"] is not None]
    best_single = (
        min(singles, key=lambda r: r["single"]["median_cpu_seconds"]) if singles else runs[0]
    )
    return {
        "fit_seconds": min(r["fit_seconds"] for r in runs),
        "batch": dict(best_batch["batch"]),
        "single": dict(best_single["single"]),
        "repeats": runs,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default="scenarios/compare_mnist_3v8_ood.yaml")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--singles", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--methods", default=",".join(registered_unlearners()))
    p.add_argument("--out", default="bench/results/methods.json")
    args = p.parse_args()
    origin = provenance()  # command, commit, date, machine, load before the run
    methods = [m for m in args.methods.split(",") if m]
    if "cr" not in methods:
        methods.insert(0, "cr")
    console = Console()
    load_before = os.getloadavg()
    started = time.perf_counter()
    workload = build_workload(load_scenario(args.scenario), args.seed)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in methods}
    with thread_limits(torch=1):
        for r in range(args.repeats):
            for name in methods:
                console.print(f"repeat {r + 1}: timing {name} ...")
                runs[name].append(time_method(name, workload, args.singles))
    results = {name: fastest(got) for name, got in runs.items()}
    cr = results["cr"]
    for r in results.values():
        r["batch"]["ratio_to_cr"] = r["batch"]["cpu_seconds"] / cr["batch"]["cpu_seconds"]
        r["batch"]["wall_ratio_to_cr"] = r["batch"]["total_seconds"] / cr["batch"]["total_seconds"]
        single, ref = r["single"]["median_cpu_seconds"], cr["single"]["median_cpu_seconds"]
        r["single"]["ratio_to_cr"] = single / ref if single is not None and ref else None

    table = Table(title=f"removal time on {workload.scenario.name} seed {args.seed}")
    for col in (
        "method",
        "fit s",
        "steps CPU s",
        "ratio to cr",
        "steps wall s",
        "CPU s / sample",
        "single CPU s",
        "ratio to cr",
    ):
        table.add_column(col, justify="right")
    for name, r in results.items():
        b, s = r["batch"], r["single"]
        table.add_row(
            name,
            f"{r['fit_seconds']:.2f}",
            f"{b['cpu_seconds']:.3f}",
            f"{b['ratio_to_cr']:.3g}",
            f"{b['total_seconds']:.3f}",
            f"{b['cpu_seconds_per_sample']:.2e}",
            "-" if s["median_cpu_seconds"] is None else f"{s['median_cpu_seconds']:.4f}",
            "-" if s["ratio_to_cr"] is None else f"{s['ratio_to_cr']:.3g}",
        )
    console.print(table)
    out = {
        "scenario": args.scenario,
        "seed": args.seed,
        "train_rows": workload.train.n,
        "steps": len(workload.steps),
        "samples_in_steps": int(sum(s.size for s in workload.steps)),
        "singles": args.singles,
        "repeats": args.repeats,
        "methods": results,
        "torch_threads": 1,
        "torch": torch.__version__,
        "machine": f"{platform.machine()} {platform.processor()}".strip(),
        "cpus": os.cpu_count(),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "wall_seconds": time.perf_counter() - started,
        "command": "python bench/methods.py "
        + " ".join(
            f"--{k} {v}"
            for k, v in (
                ("scenario", args.scenario),
                ("seed", args.seed),
                ("singles", args.singles),
                ("repeats", args.repeats),
                ("methods", ",".join(methods)),
            )
        ),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"provenance": origin, **out}, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
