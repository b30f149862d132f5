"""Benchmark: single removals after a class purge, with and without moving the reference point.

Workload: the stream benchmark's federation (``bench/stream_fmnist.yaml``: Fashion-MNIST's
60,000 training rows through a d = 1,024 random Fourier feature map, K = 10, 10 IID clients
in-process, ``anchored`` accounting, the exact residual not reported), or ``--scenario``. A
purge removes ``--purge`` rows of class ``--purge-class`` in batches of ``--purge-batch``;
then ``--singles`` randomly chosen rows are removed one at a time. The same removals run once
for every value of ``--after`` (``head.rereference_after``; 0: the reference point stays where
training left it) and every ``--epsilon`` (the budget: 1 is the scenario's, 0.1 a tenth of its
residual budget, where most removals anchor).

Reported per value: the single removals' exact passes (anchors and correction steps) and the
pass rate, the Hessian rebuilds, seconds in all and per removal (median, p99, max), the last
charge and epsilon, and the rebuild's and an exact pass's mean seconds; plus one exact pass,
one full rebuild and one rebuild of the classes that moved (``CertifiedHead._moved_classes``)
timed on their own at the head after the purge (the ratio that ``rereference_after`` should be
near: a full rebuild costs that many passes, one of ``s`` of the K classes about ``s / K`` of
it).

Usage: ``python bench/rereference.py [--after 0 50 160] [--epsilon 1 0.1] [--singles 300]
[--federation-cache PATH]``; writes ``bench/results/rereference-cpu.json``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import pickle
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

from simulator.federation import FederatedHeadData  # noqa: E402
from simulator.head import CertifiedHead  # noqa: E402
from simulator.runner.federation import Federation, build_federation  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

SCENARIO = ROOT / "bench" / "stream_fmnist.yaml"


def federation(args: argparse.Namespace) -> Federation:
    """The scenario's federation, built (and kept in ``--federation-cache``) or reloaded."""
    cache: Path | None = args.federation_cache
    if cache is not None and cache.exists():
        with cache.open("rb") as f:  # this script's, or bench/stream.py's (a header first)
            first = pickle.load(f)
            return pickle.load(f) if isinstance(first, dict) else first
    fed = build_federation(load_scenario(args.scenario, overrides=args.set))
    if cache is not None:
        with cache.open("wb") as f:
            pickle.dump(fed, f, protocol=5)
    return fed


def purge(head: CertifiedHead, data: FederatedHeadData, args: argparse.Namespace) -> list[int]:
    """Remove ``--purge`` rows of the class in batches; return the ids still retained."""
    ids, labels = all_rows(data)
    rng = np.random.default_rng(args.seed)
    target = rng.permutation(ids[labels == args.purge_class])[: args.purge]
    for start in range(0, len(target), args.purge_batch):
        report = head.remove([int(i) for i in target[start : start + args.purge_batch]])
        assert not report.retrained, report.retrain_reason
    return [int(i) for i in np.setdiff1d(ids, target)]


def all_rows(data: FederatedHeadData) -> tuple[np.ndarray, np.ndarray]:
    """Every retained global id and its class, over all clients."""
    ids, labels = [], []
    for client in data.clients.values():
        ids.append(client.retained_ids)
        labels.append(client.data.labels[client.data.retained_ids])
    return np.concatenate(ids), np.concatenate(labels)


def singles(head: CertifiedHead, ids: list[int]) -> dict[str, Any]:
    """Remove ``ids`` one at a time; what they cost."""
    seconds, passes, rebuilds, rebuild_s, pass_s = [], 0, 0, [], []
    for i in ids:
        t = time.perf_counter()
        report = head.remove([i])
        seconds.append(time.perf_counter() - t)
        assert not report.retrained, report.retrain_reason
        passes += int(report.anchored) + report.corrections
        if "rereference" in report.timings:
            rebuilds += 1
            rebuild_s.append(report.timings["rereference"])
        if "exact" in report.timings:
            pass_s.append(report.timings["exact"])
    s = np.array(seconds)
    return {
        "removals": len(ids),
        "exact_passes": passes,
        "pass_rate": passes / len(ids),
        "rebuilds": rebuilds,
        "seconds_total": float(s.sum()),
        "seconds_median": float(np.median(s)),
        "seconds_p99": float(np.percentile(s, 99)),
        "seconds_max": float(s.max()),
        "rebuild_seconds_mean": float(np.mean(rebuild_s)) if rebuild_s else None,
        "exact_pass_seconds_mean": float(np.mean(pass_s)) if pass_s else None,
        "charge_final": head.cumulative_residual,
        "epsilon_final": head.epsilon_spent,
    }


def costs(head: CertifiedHead) -> dict[str, Any]:
    """One exact pass, one full Hessian rebuild and one of the classes that moved, at the
    head, each timed on its own (copies)."""
    probe = copy.deepcopy(head)
    t = time.perf_counter()
    probe._gradient_exact(probe._W)
    exact = time.perf_counter() - t
    moved = probe._moved_classes()
    t = time.perf_counter()
    probe._refresh()
    rebuild = time.perf_counter() - t
    probe = copy.deepcopy(head)
    t = time.perf_counter()
    probe._refresh(moved)
    partial = time.perf_counter() - t
    return {
        "exact_pass_seconds": exact,
        "rebuild_seconds": rebuild,
        "ratio": rebuild / exact,
        "moved_classes": list(moved),
        "moved_rebuild_seconds": partial,
        "moved_ratio": partial / exact,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", type=Path, default=SCENARIO)
    p.add_argument("--set", action="append", default=[], help="scenario override")
    p.add_argument("--after", type=int, nargs="+", default=[0, 50, 160])
    p.add_argument("--purge-class", type=int, default=1)
    p.add_argument("--purge", type=int, default=4000, help="rows of the class purged")
    p.add_argument("--purge-batch", type=int, default=400)
    p.add_argument("--singles", type=int, default=300, help="single removals after the purge")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--epsilon", type=float, nargs="+", default=None,
        help="the head's epsilon for a whole run, one run each (default: the scenario's); a "
        "smaller one is a smaller residual budget, so more removals anchor",
    )  # fmt: skip
    p.add_argument("--federation-cache", type=Path, default=None)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rereference-cpu.json")
    args = p.parse_args()
    trained = federation(args).head
    budgets = []
    for epsilon in args.epsilon or [trained.config.epsilon]:
        base = copy.deepcopy(trained)  # the trained head, its data and clients, for each budget
        base.config = dataclasses.replace(base.config, rereference_after=0, epsilon=epsilon)
        t = time.perf_counter()
        retained = purge(base, base.data, args)
        purge_seconds = time.perf_counter() - t
        chosen = np.random.default_rng(args.seed + 1).permutation(retained)[: args.singles]
        runs = []
        for after in args.after:
            head = copy.deepcopy(base)  # the same purged head, data and clients for every value
            head.config = dataclasses.replace(head.config, rereference_after=after)
            runs.append({"rereference_after": after, **singles(head, [int(i) for i in chosen])})
        budgets.append(
            {
                "epsilon": epsilon,
                "budget": base.budget,
                "purge_seconds": purge_seconds,
                "runs": runs,
            }
        )
    measured = costs(base)
    out = {
        "provenance": provenance(),
        "benchmark": "rereference",
        "scenario": os.path.relpath(args.scenario, ROOT),
        "accounting": trained.config.accounting,
        "purge": {"class": args.purge_class, "rows": args.purge, "batch": args.purge_batch},
        "singles": args.singles,
        "costs_after_purge": measured,
        "budgets": budgets,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    show(out)
    Console().print(f"wrote {args.out}")


def show(out: dict[str, Any]) -> None:
    """Print the runs as a table, and the cost of a rebuild in exact passes."""
    table = Table(
        title=f"{out['singles']} single removals after purging {out['purge']['rows']} rows"
    )
    columns = ("budget", "after", "passes", "rate", "rebuilds", "total s", "median ms", "p99 ms")
    for col in columns:
        table.add_column(col, justify="right")
    for budget in out["budgets"]:
        for r in budget["runs"]:
            table.add_row(
                f"{budget['budget']:.3f}",
                str(r["rereference_after"]),
                str(r["exact_passes"]),
                f"{r['pass_rate']:.2f}",
                str(r["rebuilds"]),
                f"{r['seconds_total']:.2f}",
                f"{1000 * r['seconds_median']:.1f}",
                f"{1000 * r['seconds_p99']:.1f}",
            )
    console = Console()
    console.print(table)
    measured = out["costs_after_purge"]
    console.print(
        f"exact pass {1000 * measured['exact_pass_seconds']:.0f} ms, rebuild "
        f"{measured['rebuild_seconds']:.2f} s: a rebuild costs {measured['ratio']:.0f} passes; "
        f"of the classes that moved ({measured['moved_classes']}) "
        f"{measured['moved_rebuild_seconds']:.2f} s, {measured['moved_ratio']:.0f} passes"
    )


if __name__ == "__main__":
    main()
