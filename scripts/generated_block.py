"""A page with a generated block: write the new text, or check (``--check``) that it is current.

Shared by the scripts that render part of a page from the code or the results
(``module_index.py``, ``verdict_table.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(doc: Path, new: str, argv: list[str], script: str) -> int:
    """Write ``new`` to ``doc``; with ``--check`` in ``argv`` only compare (1 when it differs)."""
    if "--check" in argv:
        if new != doc.read_text(encoding="utf-8"):
            print(f"{doc} is out of date: run {script}", file=sys.stderr)
            return 1
        return 0
    doc.write_text(new, encoding="utf-8")
    return 0
