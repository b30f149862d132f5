"""What a run returns (light: no torch, so launchers that only wait for a run can import it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunResult:
    """Where the run wrote its files, and its final metrics."""

    output_dir: Path
    final: dict[str, Any]
    summary: list[tuple[str, str]]
