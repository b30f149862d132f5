"""Where a single removal's time goes on the torch head (issue 27): ``torch.profiler``.

Workload: synthetic features in the benchmark workload's shape (n = 60,000, d = 1,024, K = 10,
sigma 10, ``anchored``), ``--removals`` single removals after a warm-up, profiled with CPU and
(where present) CUDA activities. Prints the operators by self time on the device and on the
host, the number of operator calls per removal, and the removal's phases from its report
(statistics, solve, bounds, exact); writes the tables and figures to ``--out`` (JSON).

Usage: ``python bench/gpu_profile.py [--device cuda] [--removals 200] [--out profile.json]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from removal import synthetic_features

from simulator.head import CertifiedHead, HeadConfig, LocalHeadData
from simulator.head.backend import TorchBackend


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--n", type=int, default=60_000)
    p.add_argument("--d", type=int, default=1_024)
    p.add_argument("--removals", type=int, default=200)
    p.add_argument("--out", type=Path, default=Path("profile.json"))
    args = p.parse_args()
    X, y = synthetic_features(args.n, args.d, 10, np.random.default_rng(0))
    config = HeadConfig(lam=1e-3, sigma=10.0, report_exact=False, device=args.device,
                        backend="torch")  # fmt: skip
    data = LocalHeadData(X, y, 10, backend=TorchBackend(args.device))
    head = CertifiedHead(data, config, rng=np.random.default_rng(1))
    order = np.random.default_rng(2).permutation(args.n)
    for sid in order[:20]:
        head.remove([int(sid)])
    activities = [ProfilerActivity.CPU]
    if args.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    phases: dict[str, list[float]] = {}
    with profile(activities=activities) as prof:
        for sid in order[20 : 20 + args.removals]:
            report = head.remove([int(sid)])
            for phase, seconds in report.timings.items():
                phases.setdefault(phase, []).append(seconds)
    events = prof.key_averages()
    device_key = "self_device_time_total" if args.device == "cuda" else "self_cpu_time_total"
    rows: list[dict[str, Any]] = []
    per = float(args.removals)
    for e in events:
        rows.append(
            {
                "op": e.key,
                "calls_per_removal": e.count / per,
                "self_cpu_us_per_removal": e.self_cpu_time_total / per,
                "self_device_us_per_removal": getattr(e, device_key, 0.0) / per,
            }
        )
    rows.sort(key=lambda r: -r["self_cpu_us_per_removal"])
    aten = [r["calls_per_removal"] for r in rows if r["op"].startswith("aten::")]
    body = {
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "workload": {"n": args.n, "d": args.d, "k": 10, "accounting": "anchored"},
        "removals": args.removals,
        "phase_ms_mean": {k: 1e3 * float(np.mean(v)) for k, v in phases.items()},
        "aten_calls_per_removal": sum(aten),
        "ops": rows[:60],
    }
    args.out.write_text(json.dumps(body, indent=2) + "\n")
    sort = "self_cuda_time_total" if args.device == "cuda" else "self_cpu_time_total"
    print(events.table(sort_by=sort, row_limit=20))
    print(events.table(sort_by="self_cpu_time_total", row_limit=20))
    print("phases (ms, mean):", {k: round(v, 3) for k, v in body["phase_ms_mean"].items()})
    print(f"aten calls per removal: {body['aten_calls_per_removal']:.0f}; wrote {args.out}")


if __name__ == "__main__":
    main()
