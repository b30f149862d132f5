#!/usr/bin/env python3
"""Write (or check) the module index of docs/ARCHITECTURE.md: every module, one line each.

The index sits between the markers ``<!-- module-index:start -->`` and
``<!-- module-index:end -->``; each row is a module's path and the first sentence of its
docstring, so the architecture document names every module and says what it is in the
module's own words. ``--check`` exits 1 (naming the difference) when the file is out of date;
``tests/test_architecture_doc.py`` runs it.

Usage: scripts/module_index.py [--check]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from generated_block import write_or_check  # noqa: E402

DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("simulator", "server", "clients")
START, END = "<!-- module-index:start -->", "<!-- module-index:end -->"


def summary(path: Path) -> str:
    """The first sentence of a module's docstring (its first paragraph, one line)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.split("\n\n", 1)[0].split())
    return first.replace("|", "\\|") or "(no docstring)"


def index() -> str:
    """The index's Markdown, markers included."""
    rows = [START, "", "| module | what it is |", "|---|---|"]
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            rows.append(f"| `{rel}` | {summary(path)} |")
    return "\n".join([*rows, "", END])


def updated(text: str) -> str:
    """``text`` with its index replaced (appended under a heading when missing)."""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        return head + index() + rest.split(END, 1)[1]
    return text.rstrip() + "\n\n## Module index\n\n" + index() + "\n"


def main(argv: list[str]) -> int:
    new = updated(DOC.read_text(encoding="utf-8"))
    return write_or_check(DOC, new, argv, "scripts/module_index.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
