"""The command names of the previous release, kept for one release with a note.

``compare SCENARIO`` is now ``compare run SCENARIO``, ``compare-summary`` ``compare summary``,
``compare-retable`` ``compare retable`` and ``runs compare`` ``compare runs``
(:mod:`server.commands.compare`). :func:`legacy_words` rewrites the old words before parsing.
"""

from __future__ import annotations

#: The actions of ``compare``.
ACTIONS = ("run", "runs", "summary", "retable")
#: Command names of the previous release -> their words now (kept for one release, with a note).
LEGACY = {
    ("compare-summary",): ("compare", "summary"),
    ("compare-retable",): ("compare", "retable"),
    ("runs", "compare"): ("compare", "runs"),
}


def legacy_words(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` with an old command name replaced by its new words, and a note saying so.

    ``compare SCENARIO`` (no action) is ``compare run SCENARIO``.
    """
    for old, new in LEGACY.items():
        if tuple(argv[: len(old)]) == old:
            return [*new, *argv[len(old) :]], _moved(old, new)
    if argv[:1] == ["compare"] and len(argv) > 1 and argv[1] not in {*ACTIONS, "-h", "--help"}:
        return ["compare", "run", *argv[1:]], _moved(("compare",), ("compare", "run"))
    return argv, None


def _moved(old: tuple[str, ...], new: tuple[str, ...]) -> str:
    return (
        f"note: 'unlearnsim {' '.join(old)}' is now 'unlearnsim {' '.join(new)}'; the old name "
        "goes in the next release"
    )
