"""Benchmark: the same federation on each transport, and where the time goes (issues 4, 18).

Workload: ``scenarios/federation_tiny.yaml`` scaled to N IID clients (100 rows each), one
FedAvg round, 32 random Fourier features, DecoRemoval head (``guo`` accounting, the scenario
default; ``--set head.accounting=exact`` adds the all-client gradient round to every batch), a
deletion stream of single-client requests spread over all clients, no attacks,
detectors or retrained reference (they run on the server alike for every transport). Each
transport runs through the command line (``unlearnsim run --transport ...``) in a fresh
process, for each client count; for each run:

* total wall time of the command, and the run's own wall time (``metrics.json``); the
  difference is engine start-up and shut-down (Ray, or SuperLink + SuperNodes + ``flwr run``
  + the ServerApp's start);
* per message type (Flower transports, ``transport.json``): round trips, mean wall time per
  round trip, and the slowest client's own handler time in it; the rest is Flower (polling,
  transfer, the worker's fork);
* end-to-end deletion latency: one certified removal batch (deletions routed to the owners
  and answered, Newton step, and the exact residual round or a retrain when one is due),
  median, mean and max over batches, the batches that retrained, and the mean of its round
  trips (``statistics``: the owners' ``train.unlearn``; ``exact``: the gradient at the new
  head from every client, when computed);
* the largest difference of the final head from the in-process one.

``--idle SECONDS`` also measures the CPU an idle local Deployment Engine fleet burns (the
SuperLink, SuperNodes and workers, summed over the process trees, in % of one core) after it
settled: warm SuperNodes with the opt-in 0.05 s polls, warm with Flower's own waits, and stock
``flower-supernode`` processes (a SuperExec each, polling every 0.5 s as
``server/flower/environment.py`` sets).

Prints a table and writes ``bench/results/federation.json`` (run folders under
``runs/bench-federation/``), with the 1-minute load average before and after every run.

Usage: ``python bench/federation.py [--clients 3,10] [--transports inprocess,flower-sim,...]
[--idle 20]``
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

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "federation_tiny.yaml"
RESULTS = ROOT / "bench" / "results"
RUNS = ROOT / "runs" / "bench-federation"  # run folders (not committed)


def overrides(clients: int, rows_per_client: int = 100) -> list[str]:
    """``federation_tiny`` scaled to ``clients`` IID clients of ``rows_per_client`` rows, its
    stream as single-sample requests spread over all clients, no evaluation beyond utility."""
    return [
        f"partition.num_clients={clients}",
        f"data.synthetic.n_train={rows_per_client * clients}",
        "stream.phases.0.target.kind=random",
        "stream.phases.0.target.client=null",
        "stream.phases.0.ticks=8",
        "stream.phases.0.rate=3",
        "stream.phases.0.samples_per_request=1",
        "evaluation.checkpoints=[]",
        "evaluation.attacks=[]",
        "evaluation.detectors=[]",
    ]


def run(
    transport: str, clients: int, folder: Path, timeout: float, extra: list[str]
) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "server.cli", "run", str(SCENARIO), "--transport", transport,
        "--output", str(folder), "--overwrite", "--no-progress", "--no-plots",
    ]  # fmt: skip
    for o in [*overrides(clients), *extra]:
        cmd += ["--set", o]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    total = time.perf_counter() - started
    # beside the run folder, not in it: --overwrite clears only what a run wrote
    folder.with_name(f"{folder.name}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{transport} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    out = summarise(transport, folder, total)
    # the machine may be shared: Deployment Engine numbers scale with the load
    out["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
    return out


def summarise(transport: str, folder: Path, total: float) -> dict[str, Any]:
    final = json.loads((folder / "metrics.json").read_text())
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    timed = [e["timings"] for e in events if e["event"] == "deletion_batch" and "timings" in e]
    removals = [t["total"] for t in timed]
    out: dict[str, Any] = {
        "transport": transport,
        "total_seconds": total,
        "run_seconds": final["wall_seconds"],
        "startup_seconds": total - final["wall_seconds"],
        "deletion_batches": len(removals),
        "deletion_latency_median_seconds": float(np.median(removals)) if removals else 0.0,
        "deletion_latency_mean_seconds": sum(removals) / max(1, len(removals)),
        "deletion_latency_max_seconds": max(removals, default=0.0),
        # the batch's two round trips: the owners' deletion, every client's gradient
        "deletion_owners_round_trip_mean_seconds": _mean(t.get("statistics") for t in timed),
        "deletion_exact_round_trip_mean_seconds": _mean(t.get("exact") for t in timed),
        "deletion_batches_retrained": sum(1 for t in timed if "retrain" in t),
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


def _mean(values: Any) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def fleet_cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system) of ``pids`` and all their descendants, alive now."""
    from server.processes import descendants

    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in set(pids) | descendants(pids):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def idle_cpu(clients: int, seconds: float, settle: float = 25.0) -> list[dict[str, Any]]:
    """% of one core an idle local fleet uses, per SuperNode kind (see the module doc)."""
    from server.flower.processes import LOCAL_POLL, LocalFederation

    kinds = {
        f"warm, {LOCAL_POLL:g}-1 s polls (default)": {},
        "warm, Flower's waits": {"poll": None},
        "stock flower-supernode": {"warm": False, "poll": None},
    }
    out = []
    for label, options in kinds.items():
        folder = RUNS / f"idle-{clients}-{len(out)}"
        with LocalFederation(folder, clients, **options) as fed:
            fed.wait_ready()
            time.sleep(settle)  # imports done (stock SuperNodes start theirs now), polls backed off
            pids = [p.pid for p in fed.processes.values()]
            load, before, t0 = os.getloadavg()[0], fleet_cpu_seconds(pids), time.monotonic()
            time.sleep(seconds)
            used = fleet_cpu_seconds(pids) - before
            wall = time.monotonic() - t0
        out.append(
            {
                "supernodes": label,
                "clients": clients,
                "seconds": wall,
                "cpu_percent_of_one_core": 100.0 * used / wall,
                "load_average_1min": load,
            }
        )
    return out


def table(results: list[dict[str, Any]]) -> Table:
    t = Table(title="federation, seconds (round trips: wall / slowest client's compute)")
    for col in (
        "transport", "clients", "total", "start", "run", "FedAvg round", "stats round",
        "deletion (median/max)", "retrained", "owners / all", "Flower share", "max |dW|", "load",
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
        owners, exact = (
            "-" if v is None else f"{v:.2f}"
            for v in (
                r["deletion_owners_round_trip_mean_seconds"],
                r["deletion_exact_round_trip_mean_seconds"],
            )
        )
        load = r["load_average_1min"]
        t.add_row(
            r["transport"],
            str(r["clients"]),
            f"{r['total_seconds']:.1f}",
            f"{r['startup_seconds']:.1f}",
            f"{r['run_seconds']:.1f}",
            pair("train"),
            pair("query.gradhess"),
            f"{r['deletion_latency_median_seconds']:.2f} / {r['deletion_latency_max_seconds']:.2f}",
            f"{r['deletion_batches_retrained']} of {r['deletion_batches']}",
            f"{owners} / {exact}",
            "-" if share is None else f"{share:.0%} of run",
            f"{r.get('head_max_abs_diff_vs_inprocess', float('nan')):.1e}",
            f"{load['before']:.1f}-{load['after']:.1f}",
        )
    return t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", default="10", help="client counts, comma-separated")
    p.add_argument("--transports", default="inprocess,flower-sim,flower-deploy")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per transport")
    p.add_argument("--idle", type=float, default=0.0, help="seconds of idle-fleet CPU to sample")
    p.add_argument("--out", type=Path, default=RESULTS / "federation.json", help="JSON file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="one more scenario override for every run (repeatable)")  # fmt: skip
    args = p.parse_args()
    origin = provenance()  # command, commit, date, machine, load before the run
    console = Console(width=160)
    counts = [int(c) for c in args.clients.split(",")]
    results = []
    for clients in counts:
        for transport in [t for t in args.transports.split(",") if t]:
            console.print(f"[bold]{transport}[/]: running {clients} clients ...")
            folder = RUNS / f"{transport}-{clients}"
            results.append(run(transport, clients, folder, args.timeout, args.overrides))
            results[-1]["clients"] = clients
            results[-1]["folder"] = str(folder.relative_to(ROOT))
    ran = {(r["transport"], r["clients"]) for r in results}
    for r in results:  # against this invocation's own in-process run only
        base = RUNS / f"inprocess-{r['clients']}" / "head.npz"
        if ("inprocess", r["clients"]) in ran:
            W = np.load(ROOT / r["folder"] / "head.npz")["W"]
            r["head_max_abs_diff_vs_inprocess"] = float(np.abs(W - np.load(base)["W"]).max())
    console.print(table(results))
    idle = [row for c in counts for row in idle_cpu(c, args.idle)] if args.idle else []
    for row in idle:
        console.print(
            f"idle fleet, {row['clients']} SuperNodes, {row['supernodes']}: "
            f"{row['cpu_percent_of_one_core']:.1f}% of one core "
            f"(load {row['load_average_1min']:.1f})"
        )
    payload = {
        "benchmark": "federation",
        "clients": counts,
        "scenario": str(SCENARIO.relative_to(ROOT)),
        "overrides": {str(c): [*overrides(c), *args.overrides] for c in counts},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "results": results,
        "idle_fleet": idle,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"provenance": origin, **payload}, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
