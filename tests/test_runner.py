"""The in-process runner end to end: outputs, receipts, determinism, every shipped scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.scenarios import SCENARIOS, SMALL, quiet

from server.cli import main
from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import load_scenario
from simulator.stream import DeletionReceipt


def run_small(tmp: Path, *extra: str):
    scenario = load_scenario(SCENARIOS / "quickstart.yaml", overrides=[*SMALL, *extra])
    return run_scenario(scenario, ReportingConfig(console=quiet(), progress=False), output_dir=tmp)


def strip_timings(line: str) -> dict:
    record = json.loads(line)
    record.pop("timings", None)
    record.pop("wall_seconds", None)
    record.pop("setup_seconds", None)
    record.pop("run_id", None)  # unique per run by design (run.json's id)
    for c in record.get("checkpoints", []):
        c.pop("retrain_seconds", None)
    return record


def test_quickstart_outputs_and_receipts(tmp_path: Path) -> None:
    result = run_small(tmp_path)
    for name in (
        "resolved_scenario.yaml",
        "events.jsonl",
        "receipts.jsonl",
        "metrics.json",
        "summary.md",
        "accuracy.png",
        "budget.png",
        "residuals.png",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "end"
    batches = [e for e in events if e["event"] == "deletion_batch"]
    receipts = [
        DeletionReceipt.from_json(x) for x in (tmp_path / "receipts.jsonl").read_text().splitlines()
    ]
    # every request gets exactly one receipt; the removed count adds up
    assert len(receipts) == sum(b["requests"] for b in batches) == events[0]["requests"]
    assert len({r.request_id for r in receipts}) == len(receipts)
    assert all(r.status == "applied" for r in receipts)
    assert batches[-1]["removed_total"] == result.final["removed_total"]
    assert result.final["retained"] + result.final["removed_total"] == 600
    # the withdrawal removed the whole shard of client 4
    withdrawal = [b for b in batches if b["withdrawn_clients"]]
    assert withdrawal and withdrawal[0]["clients"].get("4", 0) > 50
    # the certificate holds: cumulative residual within budget unless a retrain happened
    for b in batches:
        assert b["cumulative_residual"] <= b["budget"] or b["retrained"]
    # the checkpoint compares with the exactly retrained head
    refs = [c for b in batches for c in b.get("checkpoints", [])]
    assert refs and refs[0]["param_distance_relative"] < 1e-2
    # the resolved scenario loads back to the same scenario
    again = load_scenario(tmp_path / "resolved_scenario.yaml")
    assert again == load_scenario(SCENARIOS / "quickstart.yaml", overrides=SMALL)


def test_same_scenario_and_seed_give_identical_event_log(tmp_path: Path) -> None:
    run_small(tmp_path / "a")
    run_small(tmp_path / "b")
    a = (tmp_path / "a" / "events.jsonl").read_text().splitlines()
    b = (tmp_path / "b" / "events.jsonl").read_text().splitlines()
    assert [strip_timings(x) for x in a] == [strip_timings(x) for x in b]
    assert (tmp_path / "a" / "receipts.jsonl").read_text() == (
        tmp_path / "b" / "receipts.jsonl"
    ).read_text()


def test_other_seed_gives_other_stream(tmp_path: Path) -> None:
    run_small(tmp_path / "a")
    run_small(tmp_path / "b", "seed=8")
    a = (tmp_path / "a" / "receipts.jsonl").read_text()
    b = (tmp_path / "b" / "receipts.jsonl").read_text()
    assert a != b


@pytest.mark.parametrize("method", ["cr", "retrain_head"])
def test_other_methods_run(tmp_path: Path, method: str) -> None:
    result = run_small(tmp_path, f"method={method}")
    assert result.final["method"] == method
    if method == "retrain_head":
        assert result.final["retrains_method"] == len(
            [
                x
                for x in (tmp_path / "events.jsonl").read_text().splitlines()
                if "deletion_batch" in x
            ]
        )


#: The Fashion-MNIST comparison scenarios, shrunk (800 rows, a short stream).
SHORT_FASHION = [
    "data.max_train=800",
    "data.max_test=300",
    "model.rounds=1",
    "model.local_epochs=1",
    "rff.dim=64",
    "decorrelation.steps=10",
    "stream.phases.0.ticks=2",
    "stream.phases.0.rate=5",
    "evaluation.checkpoints=[20]",
]
#: Per shipped scenario: overrides that keep every stage but shrink sizes and the stream.
SHORT = {
    "mnist_3v8_ood.yaml": [
        "model.rounds=1",
        "rff.dim=128",
        "decorrelation.steps=10",
        "stream.phases.0.ticks=2",
        "stream.phases.1.ticks=2",
        "evaluation.checkpoints=[10]",
    ],
    "drift_stress.yaml": [
        "data.synthetic.n_train=2000",
        "data.synthetic.n_test=300",
        "model.rounds=1",
        "rff.dim=64",
        "decorrelation.steps=10",
    ],
    "client_withdrawal.yaml": ["model.rounds=1", "rff.dim=64", "decorrelation.steps=10"],
    "survey_ordinal.yaml": [
        "data.max_train=1200",
        "data.max_test=400",
        "model.rounds=1",
        "rff.dim=64",
        "decorrelation.steps=10",
        # 30 ticks at rate 8 would leave no subject 4 "not too happy" rows of the 1,200, and
        # the class purge that follows would generate nothing (an error)
        "stream.phases.0.rate=2",
    ],
    "sentiment.yaml": [
        "data.max_train=600",
        "data.max_test=200",
        "data.text.representation=tokens",
        "data.text.vocab_size=500",
        "model.backbone=lstm",
        "model.rounds=1",
        "rff.dim=64",
        "decorrelation.steps=10",
        "stream.phases.0.ticks=5",
    ],
    # comparison scenarios (``unlearnsim compare``) also run as plain runner scenarios
    "compare_mnist_3v8_ood.yaml": [
        "model.rounds=1",
        "rff.dim=64",
        "decorrelation.steps=10",
        "stream.phases.0.ticks=2",
        "evaluation.checkpoints=[10]",
    ],
    "compare_sentiment.yaml": [
        "data.max_train=600",
        "data.max_test=200",
        "model.rounds=1",
        "rff.dim=64",
        "decorrelation.steps=10",
        "stream.phases.0.ticks=2",
        "evaluation.checkpoints=[20]",
    ],
    "compare_fashion_pair.yaml": SHORT_FASHION,
    "compare_fashion10.yaml": SHORT_FASHION,
    "compare_survey.yaml": [
        "data.max_train=600",
        "data.max_test=200",
        "model.rounds=1",
        "rff.dim=64",
        "decorrelation.steps=10",
        "stream.phases.0.ticks=2",
        "evaluation.checkpoints=[20]",
    ],
}


@pytest.mark.parametrize("name", sorted(SHORT))
def test_every_shipped_scenario_runs(tmp_path: Path, name: str) -> None:
    from simulator.errors import DataUnavailableError

    scenario = load_scenario(SCENARIOS / name, overrides=SHORT[name])
    try:
        result = run_scenario(
            scenario,
            ReportingConfig(console=quiet(), progress=False, plots=False),
            output_dir=tmp_path,
        )
    except DataUnavailableError as exc:
        pytest.skip(f"optional data source not installed: {exc}")
    assert result.final["removed_total"] > 0
    assert (
        result.final["requests_applied"] + result.final["requests_rejected"]
        == result.final["requests"]
    )


def test_every_shipped_scenario_has_a_test() -> None:
    # federation_tiny.yaml is the Flower tests' scenario (tests/test_flower_*.py run it),
    # stack.yaml the operator stack's (tests/test_stack_native.py runs it)
    shipped = {p.name for p in SCENARIOS.glob("*.yaml")} - {
        "quickstart.yaml",
        "federation_tiny.yaml",
        "stack.yaml",
    }
    assert shipped <= set(SHORT)


def test_cli_validate_and_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *map(str, sorted(SCENARIOS.glob("*.yaml")))]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nstream: {phases: [{name: a, ticks: 1, rate: -1}]}\ndata: {source: mnist}\n"
    )
    assert main(["validate", str(bad)]) == 2
    assert "stream.phases.0.rate" in capsys.readouterr().out
    args = [
        "run",
        str(SCENARIOS / "quickstart.yaml"),
        "--output",
        str(tmp_path / "out"),
        "--no-progress",
        "--no-plots",
    ]
    for o in SMALL:
        args += ["--set", o]
    assert main(args) == 0
    assert (tmp_path / "out" / "metrics.json").exists()


def test_run_rejects_bad_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SCENARIOS / "quickstart.yaml"), "--set", "head.lam=-1"]) == 2
    assert "head.lam" in capsys.readouterr().err
