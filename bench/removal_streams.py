"""The long streams of single removals side by side: amortised cost per backend and accounting.

Reads the JSON that ``bench/removal.py --only-stream`` wrote for each (backend, accounting)
pair (default: ``bench/results/removal-stream-*.json``), prints one table, and writes
``bench/results/removal-streams.json`` and a bar chart ``removal-streams.png`` of the amortised
seconds per removal against the 2-core targets (0.2 s under ``guo``, issue 16; 0.05 s under
``anchored``, the default since issue 25). A stream that was stopped
(``partial``) is shown with the removals it ran; nothing is extrapolated here.

Usage: ``python bench/removal_streams.py [FILES...] [--out JSON] [--png PNG]``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

RESULTS = Path("bench/results")
#: the issues' targets for the amortised cost per single removal, 2 cores
TARGET_GUO_SECONDS = 0.2
TARGET_ANCHORED_SECONDS = 0.05


def rows_of(path: Path) -> list[dict[str, Any]]:
    """One row per accounting mode in one ``--only-stream`` result file."""
    body = json.loads(path.read_text())
    rows = []
    for accounting, mode in body["modes"].items():
        s = mode.get("stream")
        if not s:
            continue
        rows.append(
            {
                "file": path.name,
                "backend": body["backend"],
                "device": body.get("device_name", body["device"]),
                "accounting": accounting,
                "complete": not body.get("partial", False)
                and s["removals"] == body["stream_removals"],
                "removals": s["removals"],
                "of": body["stream_removals"],
                "seconds": s["seconds"],
                "amortised_seconds_per_removal": s["amortised_seconds_per_removal"],
                "retrains": s["retrains"],
                "step_seconds_mean": s["step_seconds_mean"],
                "retrain_seconds_mean": s["retrain_seconds_mean"],
                "removals_per_cycle": s["removals_per_cycle"],
                "train_seconds": body["train_seconds"],
                "load_average_at_start": body["load_average_at_start"],
                "load_average_at_end": body.get("load_average_at_end", s["load_average"]),
            }
        )
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table_of(rows: list[dict[str, Any]]) -> Table:
    """The rich table printed by :func:`main`."""
    table = Table(title="single removals in a stream, retrains included (n, d, K of each file)")
    for name in (
        "backend",
        "accounting",
        "removals",
        "s / removal",
        "retrains",
        "step s",
        "retrain s",
        "per retrain",
        "load (1 min)",
    ):
        table.add_column(name, justify="left" if name in ("backend", "accounting") else "right")
    for r in rows:
        load = (r["load_average_at_start"][0], r["load_average_at_end"][0])
        table.add_row(
            r["backend"] + ("" if r["device"] == "cpu" else f" ({r['device']})"),
            r["accounting"],
            f"{r['removals']:,}" + ("" if r["complete"] else f" of {r['of']:,} (stopped)"),
            f"{r['amortised_seconds_per_removal']:.3f}",
            str(r["retrains"]),
            _fmt(r["step_seconds_mean"], ".3f"),
            _fmt(r["retrain_seconds_mean"], ".1f"),
            _fmt(r["removals_per_cycle"] if r["retrains"] else None, ".0f"),
            f"{load[0]:.1f} -> {load[1]:.1f}",
        )
    return table


def plot(rows: list[dict[str, Any]], png: Path) -> None:
    """Bars of the amortised cost per (backend, accounting), the ``guo`` target as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [f"{r['backend']}\n{r['accounting']}" for r in rows]
    values = [r["amortised_seconds_per_removal"] for r in rows]
    bars = ax.bar(labels, values, color=["C0" if r["complete"] else "C7" for r in rows])
    for bar, r in zip(bars, rows, strict=True):
        note = (
            f"{r['amortised_seconds_per_removal']:.3f} s\n{r['removals']:,} removals\n"
            f"load {r['load_average_at_start'][0]:.1f}"
        )
        ax.annotate(
            note,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.axhline(TARGET_GUO_SECONDS, color="C3", linestyle="--", label="target under guo (0.2 s)")
    ax.axhline(
        TARGET_ANCHORED_SECONDS, color="C2", linestyle=":", label="target under anchored (0.05 s)"
    )
    ax.set_ylabel("seconds per single removal (amortised)")
    ax.set_title("10,000 single removals, retrains included (grey: stopped early)", fontsize=10)
    ax.set_ylim(0, max([*values, TARGET_GUO_SECONDS]) * 1.35)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="*", type=Path)
    p.add_argument("--out", type=Path, default=RESULTS / "removal-streams.json")
    p.add_argument("--png", type=Path, default=RESULTS / "removal-streams.png")
    args = p.parse_args()
    files = args.files or sorted(RESULTS.glob("removal-stream-*.json"))
    rows = sorted(
        (row for path in files for row in rows_of(path)),
        key=lambda r: (r["backend"] != "numpy", r["device"], r["accounting"] != "guo"),
    )
    if not rows:
        raise SystemExit(f"no stream results in {[str(f) for f in files]}")
    Console(width=130).print(table_of(rows))
    args.out.write_text(
        json.dumps(
            {
                "target_guo_seconds": TARGET_GUO_SECONDS,
                "target_anchored_seconds": TARGET_ANCHORED_SECONDS,
                "streams": rows,
            },
            indent=2,
        )
        + "\n"
    )
    plot(rows, args.png)
    print(f"wrote {args.out} and {args.png}")


if __name__ == "__main__":
    main()
