"""``scripts/mutation-check`` still applies to the code: every mutant's original text is there.

The script finds each mutant by one textual occurrence; a refactor that reformats a bound makes
the script stop with an error instead of checking anything (it did once). Running the mutants is
``scripts/mutation-check`` itself (about 2 minutes); this test only keeps it applicable.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys

import pytest
from support.scenarios import ROOT


def _script() -> object:
    loader = importlib.machinery.SourceFileLoader(
        "mutation_check", str(ROOT / "scripts" / "mutation-check")
    )
    spec = importlib.util.spec_from_loader("mutation_check", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_check"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


MUTANTS = _script().MUTANTS  # type: ignore[attr-defined]


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_finds_its_original_text_once(mutant: object) -> None:
    text = (ROOT / mutant.path).read_text()  # type: ignore[attr-defined]
    assert text.count(mutant.old) == 1  # type: ignore[attr-defined]
    assert mutant.old != mutant.new  # type: ignore[attr-defined]
