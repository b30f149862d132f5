"""Privacy, drift and certificate metrics in a real (short) run, ours vs the retrained head."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support.scenarios import SCENARIOS, SMALL

from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import load_scenario

ATTACKS = {"loss", "confidence", "entropy", "modified_entropy", "lira"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("metrics_run")
    scenario = load_scenario(SCENARIOS / "quickstart.yaml", overrides=SMALL)
    run_scenario(
        scenario, ReportingConfig(console=Console(quiet=True), progress=False), output_dir=folder
    )
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    return folder, events


def test_every_batch_has_privacy_drift_and_certificate(
    run: tuple[Path, list[dict[str, Any]]],
) -> None:
    _, events = run
    batches = [e for e in events if e["event"] == "deletion_batch"]
    assert batches
    for b in batches:
        p = b["privacy"]
        assert set(p["attacks"]) == ATTACKS
        assert p["samples"]["forget"] == min(b["removed_total"], 2000)
        for s in p["attacks"].values():
            assert 0.0 <= s["auc"] <= 1.0 and 0.0 <= s["advantage"] <= 1.0
            assert set(s["tpr_at_fpr"]) == {"0.01", "0.001"}
        assert 0.0 <= p["efficacy"] <= 1.0
        d = b["drift"]
        assert set(d["feature"]) == {"forget_vs_retain", "test_vs_reference"}
        for f in d["feature"].values():
            assert 0.0 < f["p_value"] <= 1.0
        assert set(d["label"]) == {
            "forget_vs_retain",
            "test_vs_reference",
            "retained_vs_initial",
            "predicted_test_vs_start",
        }
        c = b["certificate"]
        assert c["used_ratio"] == pytest.approx(b["budget_used_ratio"])
        assert c["epsilon_spent"] == pytest.approx(b["epsilon_spent"])
        assert (c["epsilon_target"], c["delta"]) == (1.0, 1e-4)
        for key in ("evaluation_utility", "evaluation_mia", "evaluation_drift", "evaluation"):
            assert b["timings"][key] >= 0.0
    assert "monitor_start" in batches[0]["timings"]


def test_checkpoint_compares_with_the_retrained_head(
    run: tuple[Path, list[dict[str, Any]]],
) -> None:
    _, events = run
    at = [e for e in events if e.get("checkpoints")]
    assert len(at) == 1
    ours, ref = at[0]["privacy"], at[0]["checkpoints"][0]["privacy"]
    assert set(ref["attacks"]) == ATTACKS
    assert at[0]["timings"]["lira_references"] > 0 and at[0]["timings"]["reference"] > 0
    # the certified head is within 1e-2 of the retrained one: its attack numbers are too
    assert at[0]["checkpoints"][0]["param_distance_relative"] < 1e-2
    for attack in ATTACKS:
        assert ours["attacks"][attack]["auc"] == pytest.approx(
            ref["attacks"][attack]["auc"], abs=0.02
        ), attack
    assert ref["samples"] == ours["samples"]
    tv = at[0]["checkpoints"][0]["drift"]["label"]["predicted_test_vs_start"]["tv"]
    assert 0.0 <= tv <= 1.0


def test_drift_sees_the_noise_shift_and_the_class_purge(
    run: tuple[Path, list[dict[str, Any]]],
) -> None:
    _, events = run
    batches = [e for e in events if e["event"] == "deletion_batch"]
    before = [b for b in batches if b["tick"] < 4]  # SMALL: noise on the test set from tick 4
    after = [b for b in batches if b["tick"] >= 4]
    mmd = lambda b: b["drift"]["feature"]["test_vs_reference"]["mmd2"]  # noqa: E731
    assert max(mmd(b) for b in before) < min(mmd(b) for b in after)
    # the class-1 purge (phase 2) makes the forget set's labels unlike the retained rows'
    purge = [b for b in batches if b["phase"] == "class-1-purge"]
    tv = purge[-1]["drift"]["label"]["forget_vs_retain"]["tv"]
    assert tv > batches[0]["drift"]["label"]["forget_vs_retain"]["tv"]
    assert tv > 0.1


def test_plots_and_summary_show_ours_vs_retrained(run: tuple[Path, list[dict[str, Any]]]) -> None:
    folder, _ = run
    for name in ("mia.png", "drift.png"):
        assert (folder / name).stat().st_size > 10_000, name
    summary = (folder / "summary.md").read_text()
    mia = summary.split("## Membership inference")[1]
    assert "| metric | ours (end, " in mia and "| retrained from scratch at 20 removals |" in mia
    loss = next(line for line in mia.splitlines() if line.startswith("| AUC loss |"))
    assert loss.count("|") == 5  # one value per cell: ours (end), ours and retrained at 20
    assert "| MIA efficacy |" in mia and "feature MMD^2 test_vs_reference" in summary
    main_table = summary.split("| metric | value |")[1].split("\n\n")[0]
    rows = [line for line in main_table.splitlines() if line.startswith("| ")]
    assert rows and all(line.count("|") == 3 for line in rows)  # values never break the table


def test_metrics_can_be_turned_off(tmp_path: Path) -> None:
    scenario = load_scenario(
        SCENARIOS / "quickstart.yaml",
        overrides=[
            *SMALL,
            "evaluation.attacks=[]",
            "evaluation.detectors=[]",
            "evaluation.retrain_reference=false",
        ],
    )
    run_scenario(
        scenario,
        ReportingConfig(console=Console(quiet=True), progress=False, plots=False),
        output_dir=tmp_path,
    )
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    b = [e for e in events if e["event"] == "deletion_batch"][-1]
    assert b["privacy"]["attacks"] == {}
    assert b["drift"]["detections"] == [] and "checkpoints" not in b
    assert not math.isnan(b["privacy"]["forget_loss"])
