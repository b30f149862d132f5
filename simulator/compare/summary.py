"""One verdict table over several comparison folders (``docs/comparison.md``'s main table).

Reads every folder's ``verdict.csv`` (written by :func:`simulator.compare.write_comparison`)
and lays out, for one metric kind (``acc`` or ``f1``) at each folder's last removal count, one
row per (folder, DecoRemoval variant, split): CR and DR mean ± std over seeds, the paired
difference with its 95% t interval, the test's own p value, the p value Holm-adjusted over every
test of the folder's ``verdict.csv`` (what the verdict reads, :mod:`simulator.compare.verdict`),
and the verdict. ``unlearnsim compare summary FOLDER...``
prints it.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from simulator.compare.verdict import label


def _f(text: str) -> float:
    return float(text) if text else float("nan")


def _p(text: str | None) -> str:
    value = _f(text or "")
    return "n/a" if not math.isfinite(value) else f"{value:.3g}"


def summary_markdown(folders: Sequence[Path], kind: str = "acc") -> str:
    """The Markdown table (see the module docstring); folders without a verdict are skipped."""
    scale, digits = (100.0, 1) if kind == "acc" else (1.0, 3)

    def pm(mean: float, std: float) -> str:
        if not math.isfinite(mean):
            return "n/a"
        if not math.isfinite(std):
            return f"{mean * scale:.{digits}f}"
        return f"{mean * scale:.{digits}f} ± {std * scale:.{digits}f}"

    def signed(v: float) -> str:
        return "n/a" if not math.isfinite(v) else f"{v * scale:+.{digits + 1}f}"

    lines = [
        "| data | removed | seeds | split | CR | DR variant | DR | DR - CR [95% CI, this test] | p "
        "| p (Holm) | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for folder in folders:
        path = folder / "verdict.csv"
        if not path.is_file():
            continue
        rows = [r for r in csv.DictReader(path.open()) if r["metric"].startswith(f"{kind}_")]
        if not rows:
            continue
        last = max(int(r["removed"]) for r in rows)
        for r in rows:
            if int(r["removed"]) != last:
                continue
            lines.append(
                f"| {folder.name} | {last} | {r['seeds']} | {r['metric'].split('_', 1)[1]} "
                f"| {pm(_f(r['mean_base']), _f(r['std_base']))} | {label(r['method'])} "
                f"| {pm(_f(r['mean_method']), _f(r['std_method']))} "
                f"| {signed(_f(r['diff']))} [{signed(_f(r['t_low']))}, {signed(_f(r['t_high']))}] "
                f"| {_p(r['p_value'])} | {_p(r.get('p_holm'))} | {r['verdict']} |"
            )
    return "\n".join(lines) + "\n"
