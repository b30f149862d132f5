"""Benchmark: the same federation on each transport, and where the time goes (issue 4).

Workload: ``scenarios/federation_tiny.yaml`` scaled to 10 IID clients (100 rows each, 1,000
in all), one FedAvg round, 32 random Fourier features, DecoRemoval head, a deletion stream of
single-client requests spread over all clients, no attacks, detectors or retrained reference
(they run on the server alike for every transport). Each transport runs through the command
line (``unlearnsim run --transport ...``) in a fresh process; for each one:

* total wall time of the command, and the run's own wall time (``metrics.json``); the
  difference is engine start-up (Ray, or SuperLink + SuperNodes + ``flwr run``);
* per message type (Flower transports, ``transport.json``): round trips, mean wall time per
  round trip, and the slowest client's own handler time in it (``timing`` record); the
  rest is Flower (polling, process launch per message on the Deployment Engine, transfer);
* per-round overhead: a FedAvg round (``train``) and a head statistics round
  (``query.gradhess``), wall minus client compute;
* end-to-end deletion latency: one certified removal batch (deletions routed to the owners
  and answered, Newton step, exact residual round), mean and max over batches;
* the largest difference of the final head from the in-process one.

Prints a table and writes ``bench/results/federation.json`` (run folders under
``runs/bench-federation/``).

Usage: ``python bench/federation.py [--clients 10] [--transports inprocess,flower-sim,...]``
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
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "federation_tiny.yaml"
RESULTS = ROOT / "bench" / "results"
RUNS = ROOT / "runs" / "bench-federation"  # run folders (not committed)


def overrides(clients: int) -> list[str]:
    return [
        f"partition.num_clients={clients}",
        f"data.synthetic.n_train={100 * clients}",
        "stream.phases.0.target.kind=random",
        "stream.phases.0.target.client=null",
        "stream.phases.0.ticks=4",
        "stream.phases.0.rate=3",
        "stream.phases.0.samples_per_request=1",
        "evaluation.checkpoints=[]",
        "evaluation.attacks=[]",
        "evaluation.detectors=[]",
    ]


def run(transport: str, clients: int, folder: Path, timeout: float) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "server.cli", "run", str(SCENARIO), "--transport", transport,
        "--output", str(folder), "--no-progress", "--no-plots",
    ]  # fmt: skip
    for o in overrides(clients):
        cmd += ["--set", o]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    total = time.perf_counter() - started
    (folder / "bench.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{transport} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    out = summarise(transport, folder, total)
    # the machine may be shared: Deployment Engine numbers scale with the load
    out["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
    return out


def summarise(transport: str, folder: Path, total: float) -> dict[str, Any]:
    final = json.loads((folder / "metrics.json").read_text())
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    removals = [
        e["timings"]["total"] for e in events if e["event"] == "deletion_batch" and "timings" in e
    ]
    out: dict[str, Any] = {
        "transport": transport,
        "total_seconds": total,
        "run_seconds": final["wall_seconds"],
        "startup_seconds": total - final["wall_seconds"],
        "deletion_batches": len(removals),
        "deletion_latency_mean_seconds": sum(removals) / max(1, len(removals)),
        "deletion_latency_max_seconds": max(removals, default=0.0),
        "messages": {},
    }
    path = folder / "transport.json"
    if path.exists():
        for name, s in json.loads(path.read_text())["messages"].items():
            n = max(1, s["round_trips"])
            out["messages"][name] = {
                "round_trips": s["round_trips"],
                "wall_per_round_trip": s["wall_seconds"] / n,
                "client_per_round_trip": s["client_seconds"] / n,
                "overhead_per_round_trip": s["overhead_seconds"] / n,
            }
        # hello happens while connecting, before the run's own clock starts
        timed = [
            m for k, m in json.loads(path.read_text())["messages"].items() if k != "query.hello"
        ]
        wall = sum(m["wall_seconds"] for m in timed)
        own = sum(m["client_seconds"] for m in timed)
        out["messaging_seconds"] = wall
        out["client_compute_seconds"] = own
        out["flower_overhead_share"] = (wall - own) / max(out["run_seconds"], 1e-9)
    return out


def table(results: list[dict[str, Any]]) -> Table:
    t = Table(title="federation, seconds (round trips: wall / slowest client's compute)")
    for col in (
        "transport", "total", "start", "run", "FedAvg round", "stats round",
        "deletion (mean/max)", "Flower share", "max |dW|",
    ):  # fmt: skip
        t.add_column(col, justify="right")
    for r in results:
        m = r["messages"]

        def pair(name: str, m: dict[str, Any] = m) -> str:
            s = m.get(name)
            if s is None:
                return "in-process"
            return f"{s['wall_per_round_trip']:.2f} / {s['client_per_round_trip']:.2f}"

        share = r.get("flower_overhead_share")
        t.add_row(
            r["transport"],
            f"{r['total_seconds']:.1f}",
            f"{r['startup_seconds']:.1f}",
            f"{r['run_seconds']:.1f}",
            pair("train"),
            pair("query.gradhess"),
            f"{r['deletion_latency_mean_seconds']:.2f} / {r['deletion_latency_max_seconds']:.2f}",
            "-" if share is None else f"{share:.0%} of run",
            f"{r.get('head_max_abs_diff_vs_inprocess', float('nan')):.1e}",
        )
    return t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--transports", default="inprocess,flower-sim,flower-deploy")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per transport")
    args = p.parse_args()
    console = Console(width=140)
    results = []
    for transport in args.transports.split(","):
        console.print(f"[bold]{transport}[/]: running {args.clients} clients ...")
        results.append(run(transport, args.clients, RUNS / transport, args.timeout))
    heads = {r["transport"]: np.load(RUNS / r["transport"] / "head.npz")["W"] for r in results}
    base = heads.get("inprocess")
    for r in results:
        if base is not None:
            r["head_max_abs_diff_vs_inprocess"] = float(np.abs(heads[r["transport"]] - base).max())
    console.print(table(results))
    payload = {
        "benchmark": "federation",
        "clients": args.clients,
        "scenario": str(SCENARIO.relative_to(ROOT)),
        "overrides": overrides(args.clients),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "results": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "federation.json").write_text(json.dumps(payload, indent=2) + "\n")
    console.print(f"wrote {RESULTS / 'federation.json'}")


if __name__ == "__main__":
    main()
