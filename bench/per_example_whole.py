"""Per-example audit of the whole model, the extractor trained again per draw (issue 26).

For each ``model.extractor_data`` in ``--provenances``: ``--draws`` models trained from scratch
on every client row, then ``--removed`` random client rows removed from the head in one
certified batch, against ``--draws`` models trained from scratch without those rows; every
model has its own seed (extractor initialisation, minibatches, DP noise, RFF map and the
head's perturbation). Each removed row's epsilon is bounded from below at 95% confidence
(``simulator/runner/whole_model_audit.py``), to compare with the release's certified epsilon:
the head's under ``public``, the head's plus the extractor's group charge under ``dp``, none
under ``private`` (the extractor read the rows and is not certified). Prints a table, writes
JSON and a PNG.

Usage: ``python bench/per_example_whole.py [--scenario scenarios/compare_mnist_3v8_ood.yaml]
[--provenances private public dp] [--draws 32] [--removed 20] [--set KEY=VALUE ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from provenance import provenance as benchmark_provenance
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from per_example import plot  # noqa: E402 (the head audit's strip plot, shared)

from simulator.runner.federation import load_dataset, split_clients  # noqa: E402
from simulator.runner.whole_model_audit import whole_model_audit  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

DEFAULT_SCENARIO = ROOT / "scenarios" / "compare_mnist_3v8_ood.yaml"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    p.add_argument("--provenances", nargs="+", default=["private", "public", "dp"])
    p.add_argument("--draws", type=int, default=32, help="models drawn per side")
    p.add_argument("--removed", type=int, default=20, help="client rows removed (one batch)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--no-removal",
        action="store_true",
        help="also audit a mechanism that forgets nothing (what a leak looks like here)",
    )
    p.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "per-example-whole.json"
    )
    args = p.parse_args()
    origin = benchmark_provenance()  # command, commit, date, machine, load before the run
    console = Console()
    rows: list[dict[str, Any]] = []
    settings = [(p, True) for p in args.provenances]
    settings += [(p, False) for p in args.provenances if args.no_removal]
    with Progress(console=console) as progress:
        for provenance, remove in settings:
            sc = load_scenario(
                args.scenario, overrides=[*args.set, f"model.extractor_data={provenance}"]
            )
            shards, _ = split_clients(sc, load_dataset(sc))
            held = np.sort(np.concatenate(shards))
            removed = np.random.default_rng(args.seed).choice(held, args.removed, replace=False)
            mechanism = "certified removal" if remove else "no removal"
            task = progress.add_task(f"{provenance}, {mechanism}: models", total=2 * args.draws)
            t = time.perf_counter()
            audit = whole_model_audit(
                sc, [int(i) for i in removed], draws=args.draws, seed=args.seed, remove=remove,
                progress=lambda n, task=task: progress.update(task, completed=n),
            )  # fmt: skip
            bounds = audit.epsilon_lower
            rows.append({
                "provenance": provenance,
                "sigma": sc.head.sigma,
                "mechanism": mechanism,
                "certified_epsilon": audit.certified_epsilon,
                "head_epsilon": audit.head_epsilon,
                "extractor_epsilon_per_row": audit.extractor_epsilon,
                "epsilon_lower_max": float(bounds.max()),
                "epsilon_lower_median": float(np.median(bounds)),
                "rows_above_zero": int((bounds > 0).sum()),
                "retrains": audit.retrains,
                "removed": audit.removed.tolist(),
                "epsilon_lower": bounds.tolist(),
                "seconds": time.perf_counter() - t,
            })  # fmt: skip
    table = Table(
        title=f"whole-model per-example epsilon lower bounds ({args.draws} draws per side, 95%)"
    )
    columns = ("extractor", "mechanism", "certified eps", "head eps", "bound: max", "median")
    for col in (*columns, "rows > 0", "s"):
        table.add_column(col, justify="right")
    for r in rows:
        cert = "none" if r["certified_epsilon"] is None else f"{r['certified_epsilon']:.3f}"
        table.add_row(
            r["provenance"], r["mechanism"], cert, f"{r['head_epsilon']:.3f}",
            f"{r['epsilon_lower_max']:.3f}", f"{r['epsilon_lower_median']:.3f}",
            f"{r['rows_above_zero']} / {args.removed}", f"{r['seconds']:.0f}",
        )  # fmt: skip
    console.print(table)
    result = {
        "workload": {
            "scenario": os.path.relpath(args.scenario.resolve(), ROOT),
            "set": args.set, "draws": args.draws, "removed": args.removed, "seed": args.seed,
            "head": "the scenario's head settings, uniform sample weights (cr)",
        },
        "rows": rows,
        "machine": {"platform": platform.platform(), "processor": platform.processor()},
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"provenance": origin, **result}, indent=2) + "\n")
    labels = [f"{r['provenance']}\n{r['mechanism']}" for r in rows]
    plot(rows, args.out.with_suffix(".png"), labels=labels)
    console.print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
