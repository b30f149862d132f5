"""Benchmark: the pre-flight time estimate against the measured time of every shipped scenario.

For each ``scenarios/*.yaml`` that ``unlearnsim run`` plays (the ``compare_*`` scenarios are
``unlearnsim compare``'s), this runs the real command in its own process,
``unlearnsim run SCENARIO --output TMP --no-progress --no-plots``, and compares:

* the estimate the pre-flight prints (:func:`simulator.scenario.preflight.estimate`);
* the measured wall time of the process (imports, set-up, stream, outputs), and its split
  from ``metrics.json``: ``setup_seconds`` (data, extractor, head) and ``wall_seconds`` (the
  stream).

A scenario passes when ``estimate / 2 <= measured <= 2 * estimate`` (the issue-29 target: the
estimate within 2x of the measured time on this machine). A scenario whose data or packages
are missing here is reported as skipped with the pre-flight's reason; one that runs past
``--timeout`` seconds counts as a failure at that time. The load average before and after each
run is recorded (this 2-core machine is shared: a run under load takes longer than idle).

Writes ``bench/results/estimates.json`` (every scenario's numbers, the machine, the load) and
prints a table; the exit status is 1 when any scenario that ran is off by more than 2x.

Usage: ``python bench/estimates.py [--only quickstart,drift_stress] [--timeout 900]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import provenance
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.errors import ConfigError  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402
from simulator.scenario.preflight import estimate, preflight  # noqa: E402

#: The estimate may be off by at most this factor either way.
FACTOR = 2.0
OUT = ROOT / "bench" / "results" / "estimates.json"


def shipped() -> list[Path]:
    """The shipped scenarios ``unlearnsim run`` plays, by name."""
    return sorted(
        p for p in (ROOT / "scenarios").glob("*.yaml") if not p.name.startswith("compare_")
    )


def measure(path: Path, timeout: float) -> dict[str, Any]:
    """Run one scenario in its own process; its estimate, measured times and verdict."""
    scenario = load_scenario(path)
    row: dict[str, Any] = {"scenario": path.stem, "estimate_seconds": estimate(scenario).seconds}
    try:
        preflight(scenario, source=str(path))
    except ConfigError as exc:
        return {**row, "status": "skipped", "why": str(exc).splitlines()[0]}
    with tempfile.TemporaryDirectory(prefix="estimates-") as tmp:
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "server.cli", "run", str(path), "--output", str(out),
                   "--no-progress", "--no-plots"]  # fmt: skip
        load = os.getloadavg()[0]
        started = time.perf_counter()
        try:
            done = subprocess.run(
                command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
            )
            seconds = time.perf_counter() - started
        except subprocess.TimeoutExpired:
            return {**row, "status": "timeout", "measured_seconds": timeout, "within": False}
        row |= {"measured_seconds": seconds, "load_before": load, "load_after": os.getloadavg()[0]}
        if done.returncode != 0:
            return {**row, "status": "failed", "within": False, "why": done.stderr[-500:]}
        final = json.loads((out / "metrics.json").read_text())
        phases = stream_phases(out / "events.jsonl")
    ratio = seconds / row["estimate_seconds"]
    return {
        **row,
        "status": "ran",
        "setup_seconds": final.get("setup_seconds"),
        "stream_seconds": final.get("wall_seconds"),
        "phases": phases,
        "ratio": ratio,
        "within": 1 / FACTOR <= ratio <= FACTOR,
    }


def stream_phases(events: Path) -> dict[str, float]:
    """Seconds of every timed phase summed over the run's deletion batches, and the counts
    (``batches``, ``evaluated``: batches with an evaluation) the pre-flight model is fitted to."""
    batches = [
        e
        for e in (json.loads(line) for line in events.read_text().splitlines())
        if e.get("event") == "deletion_batch"
    ]
    out: dict[str, float] = {"batches": len(batches)}
    out["evaluated"] = sum("evaluation" in e.get("timings", {}) for e in batches)
    for e in batches:
        for key, value in e.get("timings", {}).items():
            out[key] = out.get(key, 0.0) + float(value)
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure, print and write ``bench/results/estimates.json``; 1 when any is off by 2x."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated scenario names (default: every one)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per scenario")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args(argv)
    origin = provenance()  # command, commit, date, machine, load before the run
    paths = shipped()
    if args.only:
        wanted = set(args.only.split(","))
        paths = [p for p in paths if p.stem in wanted]
    console = Console()
    if not console.is_terminal:  # a log file: the whole table, not cut at 80 columns
        console = Console(width=160)
    rows = []
    for path in paths:
        console.print(f"{path.stem}: running", highlight=False)
        rows.append(measure(path, args.timeout))
    table = Table(title=f"pre-flight estimate vs measured (within {FACTOR:g}x)")
    for name in ("scenario", "estimate", "measured", "set-up + stream", "ratio", "within", "load"):
        table.add_column(name)
    for r in rows:
        split = (
            f"{r['setup_seconds']:.1f} + {r['stream_seconds']:.1f} s"
            if r.get("setup_seconds") is not None
            else r.get("why", "")[:60]
        )
        table.add_row(
            r["scenario"], f"{r['estimate_seconds']:.0f} s",
            f"{r['measured_seconds']:.0f} s" if "measured_seconds" in r else r["status"],
            split, f"{r['ratio']:.2f}" if "ratio" in r else "-",
            str(r.get("within", "-")), f"{r.get('load_before', float('nan')):.1f}",
        )  # fmt: skip
    console.print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.output.write_text(
        json.dumps({"provenance": origin, "factor": FACTOR, **meta, "scenarios": rows}, indent=2)
        + "\n"
    )
    ran = [r for r in rows if r["status"] != "skipped"]
    return 0 if all(r.get("within") for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
