"""One certificate scope, shown the same way everywhere: the console, ``summary.md``, the
receipts and the end event, for a private, a public and a DP extractor; where the whole model
is not covered, one line says why and which setting would cover it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.scenarios import QUICKSTART, SMALL

from server.cli import main
from simulator.head.scope import ExtractorGuarantee, certificate_scope, max_group


def sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def flat(text: str) -> str:
    """Console text with its wrapping undone (every run of white space one space)."""
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("provenance", ["private", "public", "dp"])
def test_one_scope_in_the_console_summary_and_receipts(
    provenance: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if provenance == "dp":
        pytest.importorskip("opacus")
    out = tmp_path / provenance
    argv = ["run", str(QUICKSTART), *sets(SMALL), "--set", f"model.extractor_data={provenance}"]
    assert main([*argv, "--output", str(out), "--no-plots", "--no-progress"]) == 0
    console = capsys.readouterr().out
    end = json.loads((out / "metrics.json").read_text())
    summary = (out / "summary.md").read_text()
    (line,) = [x[2:] for x in summary.splitlines() if x.startswith("- scope: ")]
    (guarantee,) = [x[2:] for x in summary.splitlines() if x.startswith("- guarantee: ")]
    # the console shows the very same lines
    assert line in flat(console) and guarantee in flat(console)
    assert flat(console).count("scope: ") == 1
    receipts = [json.loads(x) for x in (out / "receipts.jsonl").read_text().splitlines()]
    applied = [r for r in receipts if r["status"] == "applied"]
    assert applied and applied[-1]["scope"] == end["scope"]
    for r in applied:  # a reason exactly where the whole model is not covered
        assert (r["scope"] == "head") == bool(r["scope_reason"])
    if provenance == "public":
        assert end["scope"] == "whole_model" and end["scope_reason"] is None
        assert line.startswith("scope: whole_model (extractor_data public): total epsilon spent")
        assert "of the whole model" in guarantee and "head only" not in guarantee
        assert {r["scope"] for r in applied} == {"whole_model"}
        return
    # private; dp once the rows removed make the extractor's group bound vacuous
    assert end["scope"] == "head" and end["scope_uncovered"] in (
        "private_extractor",
        "dp_group_vacuous",
    )
    reason = end["scope_reason"]
    assert line == (
        f"scope: head (extractor_data {provenance}): the whole model is not covered, no total "
        f"epsilon: {reason}"
    )
    assert applied[-1]["scope_reason"] == reason  # the last receipt, at the end's k
    assert "would cover it" in reason and "\n" not in reason
    setting = "model.extractor_data" if provenance == "private" else "extractor_epsilon_limit"
    assert setting in reason
    assert "of the linear head only" in guarantee and "extractor" not in guarantee


def test_a_dp_extractor_covers_a_group_while_its_bound_says_something() -> None:
    """Group privacy: k rows of an (eps_x, delta_x) extractor cost (k eps_x, k e^((k-1)
    eps_x) delta_x); past the largest k with a total delta below 1 only the head is covered,
    and the reason names k and that largest group."""
    part = ExtractorGuarantee(4.224, 1e-5)
    most = max_group(part, 1e-4)
    assert most == 3
    inside = certificate_scope("dp", 0.5, 1e-4, rows=most, extractor=part)
    assert inside.scope == "whole_model" and inside.reason is None
    assert inside.total_epsilon == pytest.approx(0.5 + 3 * 4.224)
    outside = certificate_scope("dp", 0.5, 1e-4, rows=most + 1, extractor=part)
    assert outside.scope == "head" and outside.uncovered == "dp_group_vacuous"
    assert outside.reason is not None and "for the 4 rows" in outside.reason
    assert "at most 3" in outside.reason
    assert max_group(ExtractorGuarantee(0.0, 0.0), 1e-4) is None  # public: any group
    assert max_group(ExtractorGuarantee(None), 1e-4) == 0  # private: none
