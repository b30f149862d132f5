#!/usr/bin/env python3
"""Write (or check) docs/comparison.md's verdict table: the render of the committed results.

The table sits between ``<!-- verdict-table:start -->`` and ``<!-- verdict-table:end -->``
and is ``unlearnsim compare summary`` over :data:`FOLDERS` (each folder's ``verdict.csv``,
whose verdicts are Holm-adjusted, ``simulator/compare/verdict.py``), so the page cannot quote
a verdict that its result files do not hold. After ``unlearnsim compare retable`` or a new
comparison, run this script; ``--check`` exits 1 when the page is out of date
(``tests/test_docs.py`` runs it).

Usage: scripts/verdict_table.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from generated_block import write_or_check  # noqa: E402

from simulator.compare.summary import summary_markdown  # noqa: E402

DOC = ROOT / "docs" / "comparison.md"
FOLDERS = ("compare_fashion_pair", "compare_fashion10", "compare_mnist_3v8_ood", "compare_survey")
START, END = "<!-- verdict-table:start -->", "<!-- verdict-table:end -->"


def table(results: Path = ROOT / "results") -> str:
    """The table's Markdown, markers included."""
    body = summary_markdown([results / name for name in FOLDERS])
    return f"{START}\n\n{body}\n{END}"


def updated(text: str, results: Path = ROOT / "results") -> str:
    """``text`` with the table between its markers replaced."""
    if START not in text or END not in text:
        raise SystemExit(f"{DOC} has no {START} ... {END} block")
    head, rest = text.split(START, 1)
    return head + table(results) + rest.split(END, 1)[1]


def main(argv: list[str]) -> int:
    new = updated(DOC.read_text(encoding="utf-8"))
    return write_or_check(DOC, new, argv, "scripts/verdict_table.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
