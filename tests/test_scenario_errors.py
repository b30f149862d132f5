"""Every kind of mistake in a scenario file is reported with its YAML path and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.scenario import ScenarioError, load_scenario, parse_scenario

BAD = sorted((Path(__file__).parent / "bad_scenarios").glob("*.yaml"))
MARKER = "# <- here"


def _expectations(path: Path) -> tuple[str | None, list[str], int | None]:
    """Header comments ``# expect-path:`` / ``# expect-text:`` and the marked line."""
    expected_path, texts, marked = None, [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("# expect-path:"):
            expected_path = line.split(":", 1)[1].strip()
        elif line.startswith("# expect-text:"):
            texts.append(line.split(":", 1)[1].strip())
        if MARKER in line:
            marked = number
    return expected_path, texts, marked


def test_there_are_many_kinds_of_mistakes() -> None:
    assert len(BAD) >= 12


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_scenario_is_reported_where_it_is_wrong(path: Path) -> None:
    expected_path, texts, marked = _expectations(path)
    assert texts, f"{path.name} has no '# expect-text:' header"
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    message = str(info.value)
    if expected_path is None:
        relevant = message
    else:
        assert isinstance(info.value, ScenarioError)
        assert expected_path in [p.path for p in info.value.problems]
        pattern = rf"(^|: ){re.escape(expected_path)}: "
        lines = [line for line in message.splitlines() if re.search(pattern, line)]
        assert lines, f"no line names {expected_path}:\n{message}"
        relevant = lines[0]
    for text in texts:
        assert text in relevant, f"{text!r} not in {relevant!r}"
    assert relevant.startswith(str(path))
    if marked is not None:
        assert relevant.startswith(f"{path}:{marked}:"), relevant


def test_each_problem_gets_its_own_line() -> None:
    text = """\
name: bad
data: {source: synthetic}
rff: {dim: 0}
head: {delta: 2}
stream:
  phases:
    - {name: a, ticks: 0, rate: 1}
"""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, source="s.yaml")
    lines = str(info.value).splitlines()
    assert lines == [
        "s.yaml:3: rff.dim: should be greater than or equal to 1, got 0",
        "s.yaml:4: head.delta: should be less than 1, got 2",
        "s.yaml:7: stream.phases.0.ticks: should be greater than or equal to 1, got 0",
    ]
    assert info.value.location == "rff.dim"
    assert isinstance(info.value, ValueError)


def test_the_location_of_a_syntax_error_has_line_and_column() -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario("name: x\ndata: [1\n", source="s.yaml")
    assert info.value.location is not None
    assert re.fullmatch(r"s\.yaml:\d+:\d+", info.value.location)


def test_several_documents_are_an_error() -> None:
    with pytest.raises(ConfigError, match="YAML"):
        parse_scenario("name: a\n---\nname: b\n")


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_scenario(tmp_path / "nope.yaml")
