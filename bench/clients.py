"""Benchmark: a federation of 10, 100 and 1,000 clients on one machine (issue 45).

Workload: ``scenarios/federation_tiny.yaml`` scaled to N IID clients of
:data:`ROWS_PER_CLIENT` synthetic rows each (10 features, 2 classes), one FedAvg round of the
small MLP extractor, 32 random Fourier features, the DecoRemoval head with ``anchored``
accounting (the scenario's default), and a deletion stream of 8 ticks of 3 single-sample
requests aimed at random rows of all clients (7-8 batches); no attacks, detectors or retrained
reference. Each run is the real command (``unlearnsim run --transport T``) in a fresh process,
for each transport (``inprocess``, ``flower-sim``), client count and kind of batch:

* ``all-clients``: ``head.report_exact=true`` (the default off flower-deploy): every batch is a
  round trip to the owners of its rows (``train.unlearn``) plus one to *every* client for the
  gradient at the new head (the exact residual);
* ``owners``: ``head.report_exact=false``: a batch is one round trip to its owners only; an
  anchored exact pass (all clients) happens only when the summed bound would cross the budget.

Measured per run:

* set-up: the federation's build (data, FedAvg, the clients' head rows and weights, the
  head's training: ``setup_seconds`` of ``metrics.json``) and the rest of the command's wall
  time outside the stream (interpreter and imports, Ray's start and stop, the report);
* per deletion batch: the removal's wall time (``timings.total`` of each ``deletion_batch``
  event: routing, the owners' round trip, the Newton step, the bounds and, when made, the
  all-client round; the server's evaluation after it is left out, it is the same on every
  transport), median and max, and how many batches had an all-client round (``exact`` in the
  timings) or retrained;
* peak memory of the command's process tree (every descendant, Ray's GCS, raylet and workers
  included), sampled every :data:`SAMPLE_SECONDS`: the sum of the processes' proportional set
  sizes (PSS, shared pages split between the processes that map them) and of their resident
  sets (RSS, shared pages counted in each);
* equality: the final head (``head.npz``) and the receipts (``receipts.jsonl``) of each run
  against the ``inprocess`` run of the same client count and kind.

Prints a table and writes ``bench/results/clients-cpu.json`` (run folders under
``runs/bench-clients/``), with the provenance and the 1-minute load before and after each run.

Usage: ``python bench/clients.py [--clients 10,100,1000] [--transports inprocess,flower-sim]
[--kinds all-clients,owners]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from federation import overrides as federation_overrides
from provenance import provenance
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # server.processes, when run as ``python bench/clients.py``
SCENARIO = ROOT / "scenarios" / "federation_tiny.yaml"
RESULTS = ROOT / "bench" / "results"
RUNS = ROOT / "runs" / "bench-clients"  # run folders (not committed)

#: Rows of each client's shard (the synthetic training set is N times this).
ROWS_PER_CLIENT = 30
#: Seconds between two memory samples of the process tree.
SAMPLE_SECONDS = 0.25
#: Batch kinds: the scenario override that selects them.
KINDS = {"all-clients": "head.report_exact=true", "owners": "head.report_exact=false"}


def overrides(clients: int, kind: str) -> list[str]:
    """The scenario overrides of one run (``federation_tiny`` scaled to ``clients``, as
    ``bench/federation.py`` runs it, with ``ROWS_PER_CLIENT`` rows each)."""
    return [*federation_overrides(clients, ROWS_PER_CLIENT), KINDS[kind]]


# ---------------------------------------------------------------------------- memory
def _kib(pid: int, path: str, key: str) -> int:
    """``key``'s value in ``/proc/PID/<path>`` in KiB (0 when gone or missing)."""
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class TreeMemory(threading.Thread):
    """Samples the summed PSS and RSS of a process and its descendants until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_pss_kib = 0
        self.peak_rss_kib = 0
        self.peak_processes = 0
        self._halt = threading.Event()

    def run(self) -> None:
        from server.processes import descendants

        while not self._halt.is_set():
            pids = {self.pid} | descendants([self.pid])
            pss = sum(_kib(p, "smaps_rollup", "Pss:") for p in pids)
            rss = sum(_kib(p, "status", "VmRSS:") for p in pids)
            self.peak_pss_kib = max(self.peak_pss_kib, pss)
            self.peak_rss_kib = max(self.peak_rss_kib, rss)
            self.peak_processes = max(self.peak_processes, len(pids))
            self._halt.wait(SAMPLE_SECONDS)

    def stop(self) -> None:
        self._halt.set()
        self.join()


# ---------------------------------------------------------------------------- one run
def run(transport: str, clients: int, kind: str, timeout: float) -> dict[str, Any]:
    """One command; its figures (see the module docstring)."""
    folder = RUNS / f"{transport}-{clients}-{kind}"
    cmd = [
        sys.executable, "-m", "server.cli", "run", str(SCENARIO), "--transport", transport,
        "--output", str(folder), "--overwrite", "--no-progress", "--no-plots",
    ]  # fmt: skip
    for o in overrides(clients, kind):
        cmd += ["--set", o]
    load_before = os.getloadavg()[0]
    log = folder.with_name(f"{folder.name}.log")  # beside the run folder, not in it
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        memory = TreeMemory(proc.pid)
        memory.start()
        try:
            code = proc.wait(timeout=timeout)
        finally:
            memory.stop()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    total = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"{transport} failed:\n{log.read_text()[-3000:]}")
    out = summarise(folder, total)
    out.update(
        transport=transport,
        clients=clients,
        kind=kind,
        rows_per_client=ROWS_PER_CLIENT,
        folder=str(folder.relative_to(ROOT)),
        peak_memory_pss_mib=memory.peak_pss_kib / 1024,
        peak_memory_rss_mib=memory.peak_rss_kib / 1024,
        peak_processes=memory.peak_processes,
        load_average_1min={"before": load_before, "after": os.getloadavg()[0]},
    )
    return out


def summarise(folder: Path, total: float) -> dict[str, Any]:
    """Set-up, per-batch and round-trip figures of a finished run folder."""
    final = json.loads((folder / "metrics.json").read_text())
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    timed = [e["timings"] for e in events if e["event"] == "deletion_batch" and "timings" in e]
    batches = [t["total"] for t in timed]
    setup, stream = final["setup_seconds"], final["wall_seconds"]
    out: dict[str, Any] = {
        "total_seconds": total,
        "setup_seconds": setup,
        "stream_seconds": stream,
        "other_seconds": total - setup - stream,
        "deletion_batches": len(batches),
        "batch_median_seconds": float(np.median(batches)) if batches else None,
        "batch_max_seconds": max(batches, default=None),
        "batches_all_clients_round": sum(1 for t in timed if "exact" in t),
        "batches_owners_only": sum(1 for t in timed if "exact" not in t and "retrain" not in t),
        "batches_retrained": sum(1 for t in timed if "retrain" in t),
        "owners_round_mean_seconds": _mean(t.get("statistics") for t in timed),
        "all_clients_round_mean_seconds": _mean(t.get("exact") for t in timed),
        "certificate_held": final.get("certificate_held"),
    }
    path = folder / "transport.json"
    if path.exists():
        messages = json.loads(path.read_text())["messages"]
        out["round_trips"] = {
            k: {
                "round_trips": m["round_trips"],
                "messages": m["messages"],
                "wall_per_round_trip": m["wall_seconds"] / max(1, m["round_trips"]),
            }
            for k, m in sorted(messages.items())
        }
    return out


def _mean(values: Any) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def receipts(folder: Path) -> list[dict[str, Any]]:
    """The run's receipts, in order."""
    lines = (folder / "receipts.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def compare(results: list[dict[str, Any]]) -> None:
    """Head and receipts of every run against the in-process run of its clients and kind."""
    base = {(r["clients"], r["kind"]): r for r in results if r["transport"] == "inprocess"}
    for r in results:
        ref = base.get((r["clients"], r["kind"]))
        if ref is None:
            continue
        a, b = ROOT / r["folder"], ROOT / ref["folder"]
        W, W0 = np.load(a / "head.npz")["W"], np.load(b / "head.npz")["W"]
        r["head_max_abs_diff_vs_inprocess"] = float(np.abs(W - W0).max())
        r["receipts_equal_inprocess"] = receipts(a) == receipts(b)


# ---------------------------------------------------------------------------- report
def table(results: list[dict[str, Any]]) -> Table:
    t = Table(title=f"clients ({ROWS_PER_CLIENT} rows each): seconds, MiB")
    for col in (
        "transport", "clients", "kind", "set-up (build + other)", "batch median / max",
        "all-clients / owners-only / retrained", "rounds: owners / all", "peak PSS (RSS)",
        "= in-process", "load",
    ):  # fmt: skip
        t.add_column(col, justify="right")
    for r in results:
        same = r.get("receipts_equal_inprocess")
        diff = r.get("head_max_abs_diff_vs_inprocess")
        load = r["load_average_1min"]
        t.add_row(
            r["transport"],
            str(r["clients"]),
            r["kind"],
            f"{r['setup_seconds']:.1f} + {r['other_seconds']:.1f}",
            f"{r['batch_median_seconds']:.3f} / {r['batch_max_seconds']:.3f}",
            f"{r['batches_all_clients_round']} / {r['batches_owners_only']} / "
            f"{r['batches_retrained']}",
            f"{_fmt(r['owners_round_mean_seconds'])} / {_fmt(r['all_clients_round_mean_seconds'])}",
            f"{r['peak_memory_pss_mib']:,.0f} ({r['peak_memory_rss_mib']:,.0f})",
            "-"
            if same is None or r["transport"] == "inprocess"
            else f"receipts {'yes' if same else 'NO'}, |dW| {diff:.1e}",
            f"{load['before']:.1f}-{load['after']:.1f}",
        )
    return t


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", default="10,100,1000", help="client counts, comma-separated")
    p.add_argument("--transports", default="inprocess,flower-sim")
    p.add_argument("--kinds", default=",".join(KINDS), help="batch kinds, comma-separated")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--out", type=Path, default=RESULTS / "clients-cpu.json", help="JSON file")
    args = p.parse_args()
    origin = provenance()  # command, commit, date, machine, load before the run
    console = Console(width=180)
    counts = [int(c) for c in args.clients.split(",")]
    kinds = [k for k in args.kinds.split(",") if k]
    results = []
    for clients in counts:
        for kind in kinds:
            for transport in [t for t in args.transports.split(",") if t]:
                console.print(f"[bold]{transport}[/]: {clients} clients, {kind} ...")
                results.append(run(transport, clients, kind, args.timeout))
    compare(results)
    console.print(table(results))
    payload = {
        "benchmark": "clients",
        "clients": counts,
        "kinds": {k: KINDS[k] for k in kinds},
        "rows_per_client": ROWS_PER_CLIENT,
        "scenario": str(SCENARIO.relative_to(ROOT)),
        "overrides": {f"{c}-{k}": overrides(c, k) for c in counts for k in kinds},
        "results": results,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"provenance": origin, **payload}, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
