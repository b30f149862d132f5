"""Benchmark: which decorrelation objective should DecoRemoval use by default?

For every seed, the comparison workload of a scenario (default ``compare_mnist_3v8_ood``) trains
``cr`` (uniform weights) and ``decoremoval`` with each objective (``paper``, ``stablenet``,
``class_conditional``) on the same features, and measures accuracy on the in-distribution test
split and on covariate shifts of it (Gaussian pixel noise, random rotations), together with
what the weights did (``n_eff / n``, the smallest class share of the weight mass relative to
the class's share of the rows). Prints mean +- std over seeds and the paired difference to
``cr`` per split, and writes ``bench/results/objectives.json``.

Usage: ``python bench/objectives.py [--scenario S] [--seeds 5] [--set head.sigma=1 ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from provenance import provenance
from rich.console import Console
from rich.table import Table

from simulator.compare.workload import build_workload
from simulator.data.shift import gaussian_noise, rotate_images
from simulator.scenario import load_scenario
from simulator.unlearners import create_unlearner

VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("cr", {}),
    ("decoremoval:paper", {"objective": "paper"}),
    ("decoremoval:stablenet", {"objective": "stablenet"}),
    ("decoremoval:class_conditional", {"objective": "class_conditional"}),
)


def shifted_splits(x: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """The test inputs and covariate shifts of them (28 x 28 grey images)."""
    rng = np.random.default_rng([seed, 99])
    return {
        "test": x,
        "noise_0.5": gaussian_noise(x, 0.5, rng, clip=(0.0, 1.0)),
        "noise_1.0": gaussian_noise(x, 1.0, rng, clip=(0.0, 1.0)),
        "rotation_30": rotate_images(x, (1, 28, 28), 30.0, rng),
    }


def one_seed(scenario: Any, seed: int) -> dict[str, Any]:
    work = build_workload(scenario, seed)
    test = work.splits["test"]
    splits = shifted_splits(np.asarray(test.x, dtype=np.float32), seed)
    out: dict[str, Any] = {}
    for name, options in VARIANTS:
        method = name.split(":")[0]
        u = create_unlearner(method, work.settings, **options)
        report = u.fit(work.train, seed=seed)
        acc = {s: float(np.mean(u.predict(x) == test.y)) for s, x in splits.items()}
        info = report.info
        rows = np.bincount(work.train.y, minlength=work.train.num_classes) / work.train.n
        mass = [info.get(f"class_mass_{c}") for c in range(work.train.num_classes)]
        out[name] = {
            "accuracy": acc,
            "n_eff_ratio": info.get("weight_ess_ratio", 1.0),
            "class_mass_ratio_min": (
                min(m / r for m, r in zip(mass, rows, strict=True)) if None not in mass else 1.0
            ),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default="scenarios/compare_mnist_3v8_ood.yaml")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--set", action="append", default=[], dest="overrides")
    p.add_argument("--out", default="bench/results/objectives.json")
    args = p.parse_args()
    origin = provenance()  # command, commit, date, machine, load before the run
    console = Console()
    scenario = load_scenario(Path(args.scenario), overrides=args.overrides)
    t = time.perf_counter()
    runs = []
    for i in range(args.seeds):
        runs.append(one_seed(scenario, scenario.seed + i))
        console.print(f"seed {scenario.seed + i} done ({time.perf_counter() - t:.0f} s)")
    splits = list(runs[0]["cr"]["accuracy"])
    table = Table(title=f"{scenario.name}: accuracy (%) mean +- std over {args.seeds} seeds")
    table.add_column("variant")
    for s in splits:
        table.add_column(s, justify="right")
    table.add_column("n_eff/n", justify="right")
    table.add_column("min class mass / rows", justify="right")
    summary: dict[str, Any] = {}
    for name, _ in VARIANTS:
        acc = {s: np.array([100 * r[name]["accuracy"][s] for r in runs]) for s in splits}
        diff = {s: acc[s] - np.array([100 * r["cr"]["accuracy"][s] for r in runs]) for s in splits}
        ess = np.array([r[name]["n_eff_ratio"] for r in runs])
        mass = np.array([r[name]["class_mass_ratio_min"] for r in runs])
        summary[name] = {
            "accuracy_mean": {s: float(acc[s].mean()) for s in splits},
            "accuracy_std": {s: float(acc[s].std()) for s in splits},
            "minus_cr_mean": {s: float(diff[s].mean()) for s in splits},
            "minus_cr_std": {s: float(diff[s].std()) for s in splits},
            "n_eff_ratio_mean": float(ess.mean()),
            "class_mass_ratio_min": float(mass.min()),
        }
        table.add_row(
            name,
            *(
                f"{acc[s].mean():.1f} +- {acc[s].std():.1f}"
                + ("" if name == "cr" else f" ({diff[s].mean():+.1f})")
                for s in splits
            ),
            f"{ess.mean():.3f}",
            f"{mass.min():.3f}",
        )
    console.print(table)
    result = {
        "scenario": scenario.name,
        "overrides": args.overrides,
        "seeds": args.seeds,
        "head": scenario.head.model_dump(),
        "summary": summary,
        "runs": runs,
        "seconds": time.perf_counter() - t,
        "machine": f"{os.cpu_count()} cores, load {os.getloadavg()}",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"provenance": origin, **result}, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
