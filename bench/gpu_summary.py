"""The one JSON of ``bench/gpu`` (issue 27): every figure, the device, each target met or not.

Reads what the steps of ``bench/gpu`` wrote in OUT (``device.txt``, ``removal.json``,
``removal-stream.json``, ``stream.json``, ``removal-tall.json``, ``removal-wide.json``, each
step's log, and where the optional steps ran, the headline of ``stream-tall.json`` and the
points of ``scale.json``, which stay files of their own) and writes ``OUT/gpu.json``; prints a
table. A step that failed or ran out of time is reported with the end of its log instead of
figures.

Targets (issue 27, the benchmark workload with the default charge ``anchored``): >= 400 single
removals per second, <= 5 ms per removal amortised over 10,000 removals, a 1,000-row batch in
<= 10 ms, and the Kafka stream at 60,000 rows with p99 request-to-receipt <= 0.5 s.

Usage: ``python bench/gpu_summary.py OUT``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from provenance import provenance
from rich.console import Console
from rich.table import Table

TARGETS = {
    "single_removals_per_second": (">=", 400.0),
    "amortised_ms_per_removal": ("<=", 5.0),
    "batch_1000_ms": ("<=", 10.0),
    "kafka_p99_seconds": ("<=", 0.5),
}


def load(out: Path, name: str) -> dict[str, Any] | None:
    """A step's JSON, or None when the step wrote none."""
    path = out / name
    return json.loads(path.read_text()) if path.exists() else None


def log_tail(out: Path, step: str, lines: int = 8) -> list[str]:
    """The last lines of a step's log."""
    path = out / f"{step}.txt"
    return path.read_text().splitlines()[-lines:] if path.exists() else ["(no log)"]


def headline(
    removal: dict[str, Any] | None,
    long_stream: dict[str, Any] | None,
    stream: dict[str, Any] | None,
) -> dict[str, Any]:
    """The figures that the targets name, from the benchmark workload's JSONs."""
    out: dict[str, Any] = {}
    if long_stream is not None:
        st = long_stream["modes"]["anchored"].get("stream")
        if st is not None:
            out["amortised_ms_per_removal"] = 1e3 * st["amortised_seconds_per_removal"]
            out["stream_removals"] = st["removals"]
            out["stream_exact_passes"] = st["exact_passes"]
            out["stream_retrains"] = st["retrains"]
    if removal is not None:
        mode = removal["modes"].get("anchored", {})
        out["single_removals_per_second"] = mode.get("removals_per_second")
        batch = mode.get("batches", {}).get("1000")
        if batch is not None:
            out["batch_1000_ms"] = 1e3 * batch["seconds"]
            out["batch_1000_certified"] = batch["certified_without_retrain"]
        out["retrain_seconds"] = mode.get("retrain_seconds")
        out["hessian_build_seconds"] = removal["hessian_build"]["seconds"]
    if stream is not None:
        out["kafka_p99_seconds"] = stream.get("latency_p99_seconds")
        out["kafka_requests_per_second"] = stream.get("requests_per_second")
    return out


def verdicts(figures: dict[str, Any]) -> dict[str, bool | None]:
    """Each target: met (True), missed (False), or not measured (None)."""
    out: dict[str, bool | None] = {}
    for key, (op, bound) in TARGETS.items():
        value = figures.get(key)
        out[key] = None if value is None else (value >= bound if op == ">=" else value <= bound)
    return out


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-out")
    device = (out / "device.txt").read_text() if (out / "device.txt").exists() else ""
    removal = load(out, "removal.json")
    long_stream = load(out, "removal-stream.json")
    stream = load(out, "stream.json")
    figures = headline(removal, long_stream, stream)
    nosnap = load(out, "stream-nosnap.json")
    if nosnap is not None:
        figures["kafka_p99_seconds_without_snapshots"] = nosnap.get("latency_p99_seconds")
    tall_stream = load(out, "stream-tall.json")
    if tall_stream is not None:
        figures["kafka_tall_p99_seconds"] = tall_stream.get("latency_p99_seconds")
        figures["kafka_tall_consumer_peak_rss_gb"] = tall_stream.get("consumer_peak_rss_gb")
        figures["kafka_tall_gpu_memory_peak_gb"] = tall_stream.get("gpu_memory_used_peak_gb")
    scale = load(out, "scale.json")
    if scale is not None:
        figures["scale_points"] = len(scale.get("points", []))
    body = {
        "device": device.splitlines(),
        "device_name": None if removal is None else removal.get("device_name"),
        "accounting": "anchored",
        "figures": figures,
        "targets": {k: f"{op} {v}" for k, (op, v) in TARGETS.items()},
        "met": verdicts(figures),
        "benchmark_workload": removal,
        "single_removal_stream": long_stream,
        "kafka_stream": stream,
        "kafka_stream_without_snapshots": load(out, "stream-nosnap.json"),
        "tall": load(out, "removal-tall.json"),
        "wide": load(out, "removal-wide.json"),
        "logs": {
            s: log_tail(out, s)
            for s in (
                "tests",
                "removal",
                "stream",
                "kafka",
                "kafka-nosnap",
                "tall",
                "wide",
                "scale",
                "kafka-tall",
            )
        },
    }
    body = {"provenance": provenance(body["device_name"]), **body}
    (out / "gpu.json").write_text(json.dumps(body, indent=2) + "\n")
    table = Table(title=f"GPU figures ({body['device_name']}, anchored)")
    for col in ("figure", "value", "target", "met"):
        table.add_column(col, justify="right")
    for key, value in figures.items():
        target = TARGETS.get(key)
        table.add_row(
            key,
            "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value),
            "" if target is None else f"{target[0]} {target[1]:g}",
            str(body["met"].get(key, "")),
        )
    Console(width=120).print(table)
    for name in ("tall", "wide"):
        w = body[name]
        if w is None or "retrain_seconds" not in w:
            print(f"{name}: incomplete;", " | ".join(body["logs"][name][-3:]))
            continue
        rate = w["single_removals_per_second"]
        print(
            f"{name} (n={w['n']}, d={w['d']}, K={w['k']}): train {w['train_seconds']:.1f} s, "
            f"build {w['hessian_build']['seconds']:.2f} s, "
            f"{'-' if rate is None else f'{rate:.0f}'} removals/s, batches "
            + ", ".join(f"{m}: {1e3 * b['seconds']:.1f} ms" for m, b in w["batches"].items())
            + f", retrain {w['retrain_seconds']:.1f} s, memory {w['memory_after_retrain']}"
        )
    print(f"wrote {out / 'gpu.json'}")


if __name__ == "__main__":
    main()
