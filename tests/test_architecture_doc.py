"""docs/ARCHITECTURE.md names every module (its module index is generated and must be current)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_module_index_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "module_index.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_every_module_is_named() -> None:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    modules = [
        p.relative_to(ROOT).as_posix()
        for package in ("simulator", "server", "clients")
        for p in (ROOT / package).rglob("*.py")
    ]
    assert modules and [m for m in modules if f"`{m}`" not in doc] == []
