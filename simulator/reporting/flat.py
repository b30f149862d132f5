"""``batches.csv``: one row per deletion batch, every scalar of the event as a column.

Nested keys are flattened with dots (``privacy.attacks.loss.auc``), lists of records by index
(``checkpoints.0.param_distance_relative``), lists of scalars joined with ``;``
(``withdrawn_clients``). The columns are the union over the batches, in order of first
appearance; a batch without a value leaves the cell empty. The recorder writes it for every
run (:mod:`simulator.runner.recorder`); ``unlearnsim compare runs`` reads the same rows.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BATCHES_CSV = "batches.csv"
Scalar = str | int | float | bool | None


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Scalar]:
    """``record`` as ``{dotted key: scalar}`` (module docstring); the ``event`` key is dropped."""
    out: dict[str, Scalar] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if not prefix and key == "event":
            continue
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            if value and all(isinstance(v, dict) for v in value):
                for i, v in enumerate(value):
                    out.update(flatten(v, f"{name}.{i}."))
            elif all(not isinstance(v, dict | list | tuple) for v in value):
                out[name] = ";".join(str(v) for v in value)
        elif value is None or isinstance(value, str | int | float | bool):
            out[name] = value
        else:  # numpy scalars and the like
            out[name] = float(value) if hasattr(value, "__float__") else str(value)
    return out


def _cell(v: Scalar) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)


def write_batches_csv(path: Path, batches: Iterable[dict[str, Any]]) -> Path:
    """Write the flat per-batch table to ``path``."""
    rows = [flatten(b) for b in batches]
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row.get(c)) for c in columns])
    tmp.replace(path)
    return path


def batch_events(folder: Path) -> list[dict[str, Any]]:
    """The ``deletion_batch`` records of a run folder's ``events.jsonl`` (every run has it).

    A line cut by a crash is skipped; the rest is intact.
    """
    path = folder / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("event") == "deletion_batch":
            out.append(record)
    return out


def read_batches(folder: Path) -> list[dict[str, Scalar]]:
    """A run folder's batches, flat (:func:`batch_events`, numbers parsed)."""
    return [flatten(record) for record in batch_events(folder)]
