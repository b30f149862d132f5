"""Shipped scenarios validate, round-trip through the resolved YAML, and are documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.scenario import (
    Scenario,
    load_scenario,
    parse_scenario,
    scenario_to_yaml,
    validate_files,
)
from simulator.scenario.schema import leaf_paths

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))
EXPECTED = {
    "quickstart",
    "mnist_3v8_ood",
    "sentiment",
    "survey_ordinal",
    "drift_stress",
    "client_withdrawal",
}


def test_the_expected_scenarios_ship() -> None:
    assert {path.stem for path in SHIPPED} >= EXPECTED


def test_every_shipped_scenario_validates() -> None:
    results = validate_files(SHIPPED)
    assert [r.error for r in results if not r.ok] == []
    assert len(results) == len(SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_scenario_is_described_and_named_after_its_file(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.description.strip()
    assert scenario.name == path.stem
    assert scenario.output_dir == f"runs/{scenario.name}"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_resolved_yaml_round_trips(path: Path) -> None:
    scenario = load_scenario(path)
    text = scenario_to_yaml(scenario)
    again = parse_scenario(text, source="resolved.yaml")
    assert again == scenario
    assert scenario_to_yaml(again) == text


def test_quickstart_is_small() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    synthetic = scenario.data.synthetic
    assert synthetic is not None and synthetic.n_train <= 3000
    expected_samples = sum(
        (p.rate * p.ticks + (p.burst.size * -(-p.ticks // p.burst.every) if p.burst else 0))
        * p.samples_per_request
        for p in scenario.stream.phases
    )
    assert 200 <= expected_samples <= 400
    assert scenario.stream.withdrawals and scenario.shifts
    assert scenario.evaluation.checkpoints == [100, 250]


def test_mnist_scenario_is_the_papers_ood_setting() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "mnist_3v8_ood.yaml")
    assert scenario.data.classes == [3, 8]
    assert scenario.ood is not None
    assert (scenario.ood.source_class, scenario.ood.target_class) == (3, 8)
    assert scenario.ood.fraction == pytest.approx(0.1)
    assert scenario.rff.dim == 1024
    scenario.check_against(num_classes=10)


def test_docs_mention_every_key() -> None:
    docs = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    missing = []
    for path in leaf_paths(Scenario):
        key = ".".join("N" if isinstance(part, int) else part for part in path)
        if f"`{key}`" not in docs:
            missing.append(key)
    assert missing == []
