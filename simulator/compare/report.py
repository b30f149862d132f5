"""Write a comparison's outputs: tables (Markdown, CSV), raw runs, fit records, PNG plots.

Only into a folder that holds none of these names or that a comparison wrote (its
``fits.json``, :func:`comparison_outputs`): files of the same names that someone else wrote are
never replaced.
"""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path
from typing import Any

from simulator.compare.audit_report import (
    AUDIT_FILE,
    audit_json,
    audit_markdown,
    load_audit_scores,
)
from simulator.compare.harness import Comparison
from simulator.compare.plots import AUDIT_FIGURE, FIGURES, plot_audit, plot_comparison
from simulator.compare.provenance import Provenance, record
from simulator.compare.provenance import markdown as provenance_markdown
from simulator.compare.table import markdown, runs_csv, summarize, summary_csv
from simulator.compare.verdict import verdict_csv, verdicts
from simulator.errors import ConfigError
from simulator.owned_files import Outputs, check_overwrite

#: The files a comparison writes (and ``retable`` rewrites), its plots aside.
TABLES = ("table.md", "summary.csv", "runs.csv", "fits.json", "command.txt", "verdict.csv")
#: The keys of the ``fits.json`` that :func:`write_comparison` writes.
FITS_KEYS = frozenset({"scenario", "methods", "seeds", "fits"})


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def wrote_comparison(folder: Path) -> bool:
    """``folder`` holds a ``fits.json`` that :func:`write_comparison` wrote."""
    try:
        meta = json.loads((folder / "fits.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and set(meta) >= FITS_KEYS


def comparison_outputs() -> Outputs:
    """What ``unlearnsim compare`` writes into its ``--output``, and how it is recognised."""
    return Outputs(
        kind="comparison folder",
        marker="fits.json written by unlearnsim compare",
        proof=wrote_comparison,
        files=(*TABLES, AUDIT_FILE, AUDIT_FIGURE, *(name for name, _ in FIGURES)),
    )


def check_comparison_output(folder: Path, option: str = "--output") -> None:
    """``folder`` may take a comparison's files (:func:`simulator.owned_files.check_overwrite`).

    Raises
    ------
    ConfigError
        ``folder`` holds a file of a comparison's names that no comparison wrote.
    """
    check_overwrite(folder, comparison_outputs(), option)


def write_comparison(
    comparison: Comparison, folder: Path, *, command: str, plots: bool = True
) -> dict[str, Path]:
    """Write every output file into ``folder`` (created); returns them by role.

    ``command.txt`` holds ``command``, the exact command line that produced the folder.
    """
    import torch

    check_comparison_output(folder)
    folder.mkdir(parents=True, exist_ok=True)
    summaries = summarize(comparison.measurements, comparison.methods)
    files = {
        "table": folder / "table.md",
        "summary": folder / "summary.csv",
        "runs": folder / "runs.csv",
        "fits": folder / "fits.json",
        "command": folder / "command.txt",
    }
    rows = verdicts(comparison.measurements, comparison.methods)
    files["verdict"] = folder / "verdict.csv"
    files["verdict"].write_text(verdict_csv(rows))
    extractor = record(comparison.provenance, comparison.fits)
    table = markdown(comparison, summaries, rows, comparison.split_notes)
    table += "\n" + provenance_markdown(extractor)
    _write_audit(comparison, folder, files, plots=plots, extractor=extractor)
    if comparison.audit:
        table += "\n" + audit_markdown(comparison.audit, comparison.audit_skipped)
    files["table"].write_text(table)
    files["summary"].write_text(summary_csv(summaries))
    files["runs"].write_text(runs_csv(comparison.measurements))
    fits = [
        {"method": f.method, "seed": f.seed, "seconds": f.seconds, "info": _finite(f.info)}
        for f in comparison.fits
    ]
    meta = {
        "scenario": comparison.scenario,
        "methods": list(comparison.methods),
        "seeds": list(comparison.seeds),
        "wall_seconds": comparison.seconds,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "notes": list(comparison.notes),
        "extractor": extractor,
        "fits": fits,
    }
    files["fits"].write_text(json.dumps(meta, indent=2) + "\n")
    files["command"].write_text(command.rstrip("\n") + "\n")
    if plots:
        for path in plot_comparison(
            folder, summaries, comparison.methods, f"{comparison.scenario}: mean ± std over seeds"
        ):
            files[path.stem] = path
    return files


def _write_audit(
    comparison: Comparison,
    folder: Path,
    files: dict[str, Path],
    *,
    plots: bool,
    extractor: dict[str, Any] | None = None,
) -> None:
    """``audit.json`` (and ``audit.png``) of the comparison's audit.

    A comparison without an audit removes the ones an earlier comparison wrote into this
    folder (:func:`check_comparison_output` has proven the folder's files of these names are
    a comparison's), so that the folder never shows another run's audit.
    """
    paths = [folder / AUDIT_FILE, folder / AUDIT_FIGURE]
    if not comparison.audit:
        for path in paths:
            path.unlink(missing_ok=True)
        return
    files["audit"] = paths[0]
    paths[0].write_text(
        audit_json(
            comparison.scenario, comparison.audit, comparison.audit_skipped, extractor=extractor
        )
    )
    if plots:
        files["audit_plot"] = plot_audit(paths[1], comparison.audit, comparison.scenario)


def load_comparison(folder: Path) -> Comparison:
    """Read back a folder written by :func:`write_comparison`.

    It reads ``runs.csv``, ``fits.json`` and the split list of ``table.md``; predictions are not
    stored, so none are restored.
    """
    import csv

    from simulator.compare.harness import FitRecord, Measurement

    meta = json.loads((folder / "fits.json").read_text())
    fixed = {
        "removal_seconds",
        "removal_calls",
        "retrains",
        "mia_auc",
        "fit_seconds",
        "disagreement",
        "acc_gap",
    }
    measurements = []
    with (folder / "runs.csv").open() as handle:
        for row in csv.DictReader(handle):

            def num(text: str) -> float:
                return float(text) if text else float("nan")

            scores = {
                k: num(v)
                for k, v in row.items()
                if k not in fixed and k not in ("method", "seed", "removed")
            }
            measurements.append(
                Measurement(
                    method=row["method"],
                    seed=int(row["seed"]),
                    removed=int(row["removed"]),
                    scores=scores,
                    removal_seconds=num(row["removal_seconds"]),
                    removal_calls=int(num(row["removal_calls"])),
                    retrains=int(num(row["retrains"])),
                    mia_auc=num(row["mia_auc"]),
                    fit_seconds=num(row["fit_seconds"]),
                    disagreement=num(row["disagreement"]),
                    acc_gap=num(row["acc_gap"]),
                )
            )
    fits = tuple(
        FitRecord(
            f["method"],
            int(f["seed"]),
            float(f["seconds"]),
            {k: (float("nan") if v is None else float(v)) for k, v in f["info"].items()},
            (),
        )
        for f in meta["fits"]
    )
    table = (folder / "table.md").read_text().splitlines()
    split_notes = _split_notes(table)
    return Comparison(
        meta["scenario"],
        tuple(meta["methods"]),
        tuple(int(s) for s in meta["seeds"]),
        tuple(measurements),
        fits,
        tuple(meta["notes"]),
        float(meta["wall_seconds"]),
        split_notes,
        provenance=Provenance.from_json(dict(meta.get("extractor") or {}).get("provenance")),
    )


def _split_notes(table: list[str]) -> tuple[str, ...]:
    """The items of ``table.md``'s "Evaluation splits:" list (the first list after it)."""
    if "Evaluation splits:" not in table:
        return ()
    out: list[str] = []
    for line in table[table.index("Evaluation splits:") + 1 :]:
        if line.startswith("* "):
            out.append(line[2:])
        elif out:
            break
    return tuple(out)


def retable(folder: Path) -> dict[str, Path]:
    """Rewrite ``table.md``, ``summary.csv`` and ``verdict.csv`` of ``folder`` from ``runs.csv``.

    The tables use the current statistics; ``runs.csv``, ``fits.json``, ``command.txt`` and the
    plots are left as they are.

    Raises
    ------
    ConfigError
        ``folder`` is not a comparison folder (no ``fits.json`` written by a comparison).
    """
    if not wrote_comparison(folder):
        raise ConfigError(
            f"{folder} is not a comparison folder (it holds no fits.json written by unlearnsim "
            "compare); nothing was rewritten",
            str(folder),
        )
    comparison = load_comparison(folder)
    summaries = summarize(comparison.measurements, comparison.methods)
    rows = verdicts(comparison.measurements, comparison.methods)
    files = {
        "table": folder / "table.md",
        "summary": folder / "summary.csv",
        "verdict": folder / "verdict.csv",
    }
    files["verdict"].write_text(verdict_csv(rows))
    files["summary"].write_text(summary_csv(summaries))
    table = markdown(comparison, summaries, rows, comparison.split_notes)
    extractor = json.loads((folder / "fits.json").read_text()).get("extractor")
    if extractor:  # a folder written before the provenance was recorded has none
        table += "\n" + provenance_markdown(extractor)
    if (folder / AUDIT_FILE).exists():
        scores, skipped = load_audit_scores(folder / AUDIT_FILE)
        table += "\n" + audit_markdown(scores, skipped)
    files["table"].write_text(table)
    return files
