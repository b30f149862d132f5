"""What the test suite left in the working tree: ``git status`` before and after.

Tests never write into the checkout (they use ``tmp_path``). :func:`changes` lists what git
sees (untracked, ignored and modified paths) outside the caches that running Python and its
tools always leave (:data:`CACHES`); ``tests/conftest.py`` compares it before and after the
session and fails the run on anything new (a ``runs/`` folder, a ``results/`` file).
"""

from __future__ import annotations

import fnmatch
import subprocess
from pathlib import Path

#: Path components every run of the tools leaves behind (they are in ``.gitignore``).
CACHES = (
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    ".mypy_cache",
    ".ruff_cache",
    "*.egg-info",
    ".venv",
    "*.pyc",
)


def changes(root: Path) -> set[str] | None:
    """``git status`` lines of ``root`` outside :data:`CACHES` (None: not a git checkout)."""
    skip = [f":(exclude,glob){c}" for c in (".venv/**", *(f"**/{c}/**" for c in CACHES))]
    command = ["git", "status", "--porcelain=v1", "--ignored", "--untracked-files=all", "-z"]
    try:
        out = subprocess.run(
            [*command, "--", ".", *skip],
            cwd=root, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return {entry for entry in out.stdout.split("\0") if entry and not _cache(entry[3:])}


def _cache(path: str) -> bool:
    return any(fnmatch.fnmatchcase(part, c) for part in Path(path).parts for c in CACHES)


def new_changes(before: set[str], after: set[str]) -> list[str]:
    """What ``after`` has that ``before`` had not, sorted."""
    return sorted(after - before)
