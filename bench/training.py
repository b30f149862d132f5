"""Benchmark: the head's training from zero, by L-BFGS from the Hessian at zero and by Newton.

Workload: the federation of ``--scenario`` (default ``bench/stream_synthetic.yaml``: synthetic
rows through a d = 1,024 random Fourier feature map, K = 10, 10 IID clients in process, two
client threads) at each ``--n-train``. The federation is built once per size; then the
certified head is trained from zero on its clients once per ``head.cold_solver`` (``lbfgs``:
:func:`simulator.head.train_head_from_zero`; ``newton``: damped Newton,
:func:`simulator.head.train_head`), with the same ``b``: the construction of a
:class:`~simulator.head.CertifiedHead`, i.e. the training, the residual check and the first
exact pass, as at a run's set-up.

Reported per size and solver: seconds, iterations and those that built the K Hessians (Newton
steps; ``lbfgs``'s polish is one), the training residual (stacked gradient norm), and the
largest distance between the two solvers' heads per class against the stopping rule's bound
``2 tol / lam``.

Usage: ``python bench/training.py [--n-train 100000] [--solvers lbfgs newton]``; writes
``bench/results/training-cpu.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from provenance import provenance  # noqa: E402

from simulator.head import CertifiedHead  # noqa: E402
from simulator.runner.configs import head_config  # noqa: E402
from simulator.runner.federation import build_federation  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402
from simulator.seeds import child_rng  # noqa: E402

SCENARIO = ROOT / "bench" / "stream_synthetic.yaml"


def one_size(args: argparse.Namespace, n_train: int, console: Console) -> dict[str, Any]:
    """Build the federation at ``n_train`` rows, then train the head by every solver."""
    sets = [f"data.synthetic.n_train={n_train}", "client_threads=2", *args.set]
    scenario = load_scenario(args.scenario, overrides=sets)
    t = time.perf_counter()
    fed = build_federation(scenario)
    build_seconds = time.perf_counter() - t
    config = head_config(scenario)
    runs, heads = [], {}
    for solver in args.solvers:
        console.print(f"n = {n_train:,}: training from zero by {solver}")
        t = time.perf_counter()
        head = CertifiedHead(
            fed.head_data,
            dataclasses.replace(config, cold_solver=solver),
            rng=child_rng(scenario.seed, "head"),  # the build's: the same b
        )
        seconds = time.perf_counter() - t
        heads[solver] = head.W
        runs.append(
            {
                "solver": solver,
                "seconds": seconds,
                "iterations": head.last_fit_iterations,
                "newton_iterations": head.last_fit_newton_iterations,
                "residual": float(np.linalg.norm(head.gradient_norms())),
                "budget": head.budget,
            }
        )
    gaps = None
    if len(heads) == 2:
        first, second = heads.values()
        gaps = np.linalg.norm(first - second, axis=0).tolist()
    return {
        "n_train": n_train,
        "dim": fed.head_data.dim,
        "columns": fed.head_data.columns,
        "clients": len(fed.clients),
        "build_seconds": build_seconds,
        "runs": runs,
        "head_distance_per_class": gaps,
        "head_distance_bound": 2 * config.tol / config.lam,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", type=Path, default=SCENARIO)
    p.add_argument("--n-train", type=int, nargs="+", default=[100_000])
    p.add_argument("--solvers", nargs="+", choices=("lbfgs", "newton"), default=["lbfgs", "newton"])
    p.add_argument("--set", action="append", default=[], help="scenario override KEY=VALUE")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "training-cpu.json")
    args = p.parse_args()
    console = Console()
    sizes = [one_size(args, n, console) for n in args.n_train]
    out = {
        "provenance": provenance(),
        "benchmark": "training",
        "scenario": os.path.relpath(args.scenario, ROOT),
        "sizes": sizes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    show(out, console)
    console.print(f"wrote {args.out}")


def show(out: dict[str, Any], console: Console) -> None:
    """One row per size and solver."""
    table = Table(title=f"the head trained from zero ({out['scenario']})")
    for column in ("n", "solver", "seconds", "iterations", "Newton iterations", "residual"):
        table.add_column(column, justify="right")
    for size in out["sizes"]:
        for run in size["runs"]:
            table.add_row(
                f"{size['n_train']:,}",
                run["solver"],
                f"{run['seconds']:.1f}",
                str(run["iterations"]),
                str(run["newton_iterations"]),
                f"{run['residual']:.2e}",
            )
    console.print(table)
    for size in out["sizes"]:
        if size["head_distance_per_class"] is not None:
            worst = max(size["head_distance_per_class"])
            console.print(
                f"n = {size['n_train']:,}: the heads differ by at most {worst:.2e} per class "
                f"(bound 2 tol / lam = {size['head_distance_bound']:.1e})"
            )


if __name__ == "__main__":
    main()
