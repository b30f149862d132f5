"""A seeded sweep of the streaming scenario: one run per seed and method in one parent folder.

``unlearnsim run SCENARIO --seeds N --methods a,b`` runs the scenario itself (its federation,
timed shifts, phases and transport) once per seed ``scenario.seed + i`` and method, each in a
run folder of its own, ``PARENT/<method>-seed<seed>/``, seed by seed (so a sweep stopped early
holds complete pairs). ``PARENT/sweep.json`` (:data:`SWEEP_FILE`) names the scenario, the
methods, the seeds, the command and every run's folder; ``unlearnsim compare runs PARENT``
reads it for the paired verdicts (:mod:`simulator.reporting.sweep_compare`).

Pure standard library, like :mod:`.run_folder`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.owned_files import Outputs, foreign_reason

#: The file that marks a sweep's parent folder.
SWEEP_FILE = "sweep.json"
#: ``sweep.json``'s ``format``.
SWEEP_FORMAT = "unlearnsim-sweep/1"


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: its method, its seed and its folder's name under the parent."""

    method: str
    seed: int

    @property
    def name(self) -> str:
        """The run's folder name, ``<method>-seed<seed>``."""
        return f"{self.method}-seed{self.seed}"


def parse_methods(text: str) -> list[str]:
    """``"cr,decoremoval"`` as a list of distinct names (order kept).

    Raises
    ------
    ConfigError
        No name, or a name given twice.
    """
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise ConfigError("expected comma-separated method names, e.g. cr,decoremoval", "--methods")
    if len(set(names)) < len(names):
        raise ConfigError(f"a method is named twice in {text!r}", "--methods")
    return names


def sweep_plan(first_seed: int, seeds: int, methods: Sequence[str]) -> list[SweepRun]:
    """Every run of the sweep, seed by seed: ``seeds`` seeds from ``first_seed``, each method.

    Raises
    ------
    ConfigError
        Fewer than one seed, or no method.
    """
    if seeds < 1:
        raise ConfigError(f"must be >= 1, got {seeds}", "--seeds")
    if not methods:
        raise ConfigError("needs at least one method", "--methods")
    return [SweepRun(m, first_seed + i) for i in range(seeds) for m in methods]


def write_sweep(
    parent: Path, scenario: str, plan: Sequence[SweepRun], command: Sequence[str]
) -> Path:
    """Write ``parent/sweep.json`` (module docstring); returns its path."""
    methods = list(dict.fromkeys(r.method for r in plan))
    seeds = list(dict.fromkeys(r.seed for r in plan))
    data = {
        "format": SWEEP_FORMAT,
        "scenario": scenario,
        "methods": methods,
        "seeds": seeds,
        "command": list(command),
        "runs": [{"method": r.method, "seed": r.seed, "folder": r.name} for r in plan],
    }
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / SWEEP_FILE
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def read_sweep(parent: str | Path) -> dict[str, Any] | None:
    """``parent/sweep.json`` when a sweep wrote it, else None."""
    try:
        data = json.loads((Path(parent) / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != SWEEP_FORMAT:
        return None
    return data


def sweep_runs(parent: str | Path) -> list[tuple[SweepRun, Path]]:
    """The runs of the sweep in ``parent`` whose folder exists, in the sweep's order.

    Raises
    ------
    ConfigError
        ``parent`` holds no ``sweep.json`` written by a sweep.
    """
    data = read_sweep(parent)
    if data is None:
        raise ConfigError(f"{parent} holds no {SWEEP_FILE} written by unlearnsim run --seeds")
    out = []
    for item in data.get("runs", []):
        run = SweepRun(str(item["method"]), int(item["seed"]))
        folder = Path(parent) / str(item.get("folder", run.name))
        if folder.is_dir():
            out.append((run, folder))
    return out


def sweep_outputs(parent: Path) -> Outputs:
    """What a sweep writes into its parent folder, and how an earlier sweep's is recognised.

    ``sweep.json`` and the run folders it lists; the proof that ``parent`` is a sweep's: its
    ``sweep.json`` was written by a sweep and every run folder it lists holds nothing but a
    run's files (:func:`simulator.runner.run_folder.run_outputs`), so ``--overwrite`` deletes
    nothing a sweep did not write.
    """
    from simulator.runner.run_folder import run_outputs

    data = read_sweep(parent) or {}
    names = tuple(str(item.get("folder", "")) for item in data.get("runs", []))
    run = run_outputs()

    def proof(folder: Path) -> bool:
        if read_sweep(folder) is None:
            return False
        children = [folder / n for n in names if n and (folder / n).is_dir()]
        return all(foreign_reason(c, run) is None for c in children)

    return Outputs(
        kind="sweep folder",
        marker=f"{SWEEP_FILE} written by unlearnsim run --seeds, with only run folders",
        proof=proof,
        files=(SWEEP_FILE,),
        folders=tuple(n for n in names if n),
    )
