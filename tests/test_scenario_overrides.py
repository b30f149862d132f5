"""``--set dotted.path=value`` overrides."""

from __future__ import annotations

import pytest
from support.scenarios import QUICKSTART

from simulator.errors import ConfigError
from simulator.scenario import ScenarioError, apply_overrides, parse_scenario

BASE = """\
name: base
data: {source: synthetic}
stream:
  phases:
    - {name: a, ticks: 5, rate: 1}
    - {name: b, ticks: 5, rate: 2}
"""


def test_list_items_are_addressed_by_index() -> None:
    scenario = parse_scenario(BASE, overrides=["stream.phases.0.rate=50"])
    assert scenario.stream.phases[0].rate == 50.0
    assert scenario.stream.phases[1].rate == 2.0


def test_values_are_yaml_scalars_and_sections_are_created() -> None:
    scenario = parse_scenario(
        BASE,
        overrides=[
            "rff.dim=128",
            "rff.bandwidth=2.5",
            "decorrelation.enabled=false",
            "method=cr",
            "data.synthetic.n_classes=3",
            "data.classes=[0, 2]",
            "name=renamed",
        ],
    )
    assert scenario.rff.dim == 128
    assert scenario.rff.bandwidth == 2.5
    assert scenario.decorrelation.enabled is False
    assert scenario.method == "cr"
    assert scenario.data.classes == [0, 2]
    assert scenario.output_dir == "runs/renamed"


def test_later_overrides_win_and_the_input_is_not_modified() -> None:
    raw = {"name": "x", "rff": {"dim": 4}}
    out = apply_overrides(raw, ["rff.dim=8", "rff.dim=16"])
    assert out["rff"]["dim"] == 16
    assert raw["rff"]["dim"] == 4


def test_optional_section_can_be_filled_in() -> None:
    scenario = parse_scenario(
        BASE,
        overrides=[
            "stream.phases.1.burst.every=2",
            "stream.phases.1.burst.size=3",
            "stream.phases.0.target.kind=class",
            "stream.phases.0.target.class_id=1",
        ],
    )
    burst = scenario.stream.phases[1].burst
    assert burst is not None and (burst.every, burst.size) == (2, 3)
    assert scenario.stream.phases[0].target.class_id == 1


@pytest.mark.parametrize(
    ("override", "location", "text"),
    [
        ("stream.phases.0.ratez=1", "stream.phases.0.ratez", "unknown key 'ratez'"),
        ("foo=1", "foo", "allowed: name"),
        ("rff.dim.x=1", "rff.dim.x", "unknown key 'x'"),
        ("stream.phases.first.rate=1", "stream.phases.first.rate", "not an index"),
        ("stream.phases.5.rate=1", "stream.phases.5", "out of range (the list has 2 items)"),
        ("stream.withdrawals.0.at=1", "stream.withdrawals.0", "out of range"),
        ("rff.dim", "--set rff.dim", "dotted.path=value"),
        ("=3", "--set =3", "dotted.path=value"),
        ("rff.dim=[1", "--set rff.dim", "not valid YAML"),
    ],
)
def test_bad_override_paths_are_config_errors(override: str, location: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(BASE, overrides=[override])
    assert info.value.location == location
    assert text in str(info.value)
    assert str(info.value).startswith("--set")  # the origin, as for a bad value (issue 29)


def test_bad_override_values_go_through_validation() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(BASE, overrides=["stream.phases.1.rate=-3", "rff.dim=lots"])
    message = str(info.value)
    assert "--set: stream.phases.1.rate: should be greater than or equal to 0, got -3" in message
    assert "--set: rff.dim: should be a valid integer, got 'lots'" in message


def test_an_unknown_override_key_names_its_origin_on_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from server.cli import main

    assert main(["run", str(QUICKSTART), "--set", "head.sigam=1"]) == 2  # before any folder
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --set: head.sigam: unknown key 'sigam' (allowed: ")
