"""``unlearnsim run --audit`` (issue 26): "where does it leak?" at every reference checkpoint."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.scenarios import QUICKSTART, TEN_CLIENTS, quiet, scenario

from server.cli import main
from simulator.errors import ConfigError
from simulator.metrics.membership_audit import ATTACKS, MODELS
from simulator.runner import ReportingConfig, build_federation, run_scenario
from simulator.runner.federation import Federation
from simulator.runner.pipeline import apply_batch
from simulator.runner.run_audit import audit_checkpoint, head_on, retrained_extractor
from simulator.runner.run_state import RunState
from simulator.runner.scoring import retrained_head
from simulator.stream import batches

Events = list[dict[str, Any]]


def events_of(folder: Path) -> Events:
    return [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]


def checkpoints_of(events: Events) -> list[dict[str, Any]]:
    return [c for e in events for c in e.get("checkpoints", [])]


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Events]:
    """TEN_CLIENTS (decoremoval, private extractor) through the command line with --audit."""
    folder = tmp_path_factory.mktemp("audit") / "run"
    sets = [x for o in TEN_CLIENTS for x in ("--set", o)]
    argv = ["run", str(QUICKSTART), *sets, "--audit", "--output", str(folder)]
    assert main([*argv, "--no-progress", "--no-plots"]) == 0
    return folder, events_of(folder)


def test_every_checkpoint_scores_the_three_models(audited: tuple[Path, Events]) -> None:
    _, events = audited
    (entry,) = checkpoints_of(events)  # TEN_CLIENTS: evaluation.checkpoints=[20]
    audit = entry["audit"]
    assert audit["removed"] >= entry["checkpoint"]
    assert 0 < audit["members"] == audit["nonmembers"] <= audit["removed"]
    assert set(audit["models"]) == set(MODELS)
    for model in audit["models"].values():
        assert set(model["auc"]) == set(ATTACKS)
        assert all(0.0 <= v <= 1.0 for v in model["auc"].values())
        assert 0.2 < model["acc_test"] <= 1.0  # far above chance on the synthetic classes
    # (c) is the released head, (b) the head retrained on the same extractor: a certified
    # removal keeps them close, and (a)'s extractor was retrained on D' (private)
    a, b, c = (audit["models"][m] for m in MODELS)
    assert abs(c["acc_test"] - b["acc_test"]) <= 0.02
    assert audit["extractor"] | {"seconds": 0} == {
        "provenance": "private",
        "retrained": True,
        "how": "FedAvg on every client's retained rows, RFF bandwidth on them",
        "seconds": 0,
    }
    assert a["auc"] != b["auc"]  # another extractor: other features, other scores
    for attack, gap in audit["gaps"].items():
        assert gap["extractor"] == pytest.approx(b["auc"][attack] - a["auc"][attack])
        assert gap["head"] == pytest.approx(c["auc"][attack] - b["auc"][attack])
    assert audit["leak"] == "undetermined" and "one seed" in audit["leak_note"]
    (batch,) = [e for e in events if e.get("checkpoints")]
    assert batch["timings"]["audit"] > 0


def test_the_run_writes_audit_json_and_markdown(audited: tuple[Path, Events]) -> None:
    folder, events = audited
    (entry,) = checkpoints_of(events)
    removed = entry["audit"]["removed"]
    body = json.loads((folder / "audit.json").read_text())
    assert (body["method"], body["seed"]) == ("decoremoval", 7)
    (cp,) = body["checkpoints"]
    assert (cp["checkpoint"], cp["removed"]) == (20, removed)
    assert [s["model"] for s in cp["scores"]] == list(MODELS)
    assert cp["scores"][0]["auc"] == entry["audit"]["models"]["retrained"]["auc"]
    assert cp["methods"][0]["answer"] == "undetermined"
    assert cp["extractor"]["provenance"] == "private"
    md = (folder / "audit.md").read_text()
    assert f"## Checkpoint 20: {removed} rows removed" in md
    assert "(c) unlearned" in md and "undetermined" in md
    summary = (folder / "summary.md").read_text()
    assert f"membership audit at {removed} removals" in summary


def test_the_audit_off_changes_nothing_else(audited: tuple[Path, Events], tmp_path: Path) -> None:
    folder, on = audited
    run_scenario(
        scenario(TEN_CLIENTS),
        ReportingConfig(console=quiet(), progress=False, plots=False),
        output_dir=tmp_path,
    )
    off = events_of(tmp_path)
    assert not (tmp_path / "audit.json").exists() and not (tmp_path / "audit.md").exists()
    assert all("audit" not in c for c in checkpoints_of(off))
    wall = {"retrain_seconds", "timings", "seconds", "audit", "evaluation_seconds"}

    def stable(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: stable(v) for k, v in value.items() if k not in wall}
        if isinstance(value, list):
            return [stable(v) for v in value]
        return value

    batches_on = [stable(e) for e in on if e.get("event") == "deletion_batch"]
    batches_off = [stable(e) for e in off if e.get("event") == "deletion_batch"]
    assert len(batches_off) == 9 and checkpoints_of(batches_off)
    assert batches_on == batches_off


def removed_some(fed: Federation, count: int) -> RunState:
    run = RunState(evaluate=False)
    tick = timedelta(seconds=fed.scenario.stream.tick_seconds)
    for batch in batches(fed.requests, fed.scenario.stream.max_batch_requests):
        if len(run.forgotten) >= count:
            break
        apply_batch(fed, run, batch, now=batch[0].requested_at + tick)
    return run


def test_model_a_retrains_the_builds_extractor_and_b_is_the_reference() -> None:
    fed = build_federation(scenario(TEN_CLIENTS, "evaluation.audit=true"))
    # nothing removed yet: the federation's own training on D' = D is the build's, bit for bit
    assert np.array_equal(retrained_extractor(fed).train, fed.train_features)
    run = removed_some(fed, 20)
    assert len(run.forgotten) >= 20
    W_ref, _, _ = retrained_head(fed)  # the checkpoint's reference A(D')
    np.testing.assert_allclose(head_on(fed, fed.train_features), W_ref, rtol=0, atol=1e-12)
    fresh = retrained_extractor(fed)
    assert fresh.retrained and not np.array_equal(fresh.train, fed.train_features)
    assert not np.allclose(head_on(fed, fresh.train), W_ref, atol=1e-3)


def test_a_public_extractor_is_kept_for_model_a(monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.runner.run_audit as run_audit

    fed = build_federation(
        scenario(TEN_CLIENTS, "model.extractor_data=public", "evaluation.audit=true")
    )
    run = removed_some(fed, 20)

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a public extractor is not retrained")

    monkeypatch.setattr(run_audit, "train_featurizer", never)
    monkeypatch.setattr(run_audit, "train_dp_generation", never)
    audit = audit_checkpoint(fed, run.forgotten, 20)
    assert audit["extractor"]["provenance"] == "public"
    assert audit["extractor"]["retrained"] is False
    assert "never read a client row" in audit["extractor"]["how"]
    models = audit["models"]
    # same extractor, same cold-fit head: (a) and (b) are one model
    assert models["retrained"]["auc"] == models["same_extractor"]["auc"]
    assert models["retrained"]["acc_test"] == models["same_extractor"]["acc_test"]
    assert all(math.isfinite(v) for m in models.values() for v in m["auc"].values())


def test_a_dp_extractor_is_retrained_by_dp_fedavg_on_the_retained_rows() -> None:
    fed = build_federation(
        scenario(TEN_CLIENTS, "model.extractor_data=dp", "evaluation.audit=true")
    )
    # generation 0 on D' = D with fresh accountants is the build's DP extractor, bit for bit
    assert np.array_equal(retrained_extractor(fed).train, fed.train_features)
    run = removed_some(fed, 20)
    audit = audit_checkpoint(fed, run.forgotten, 20)
    assert audit["extractor"]["provenance"] == "dp" and audit["extractor"]["retrained"]
    assert "DP-FedAvg" in audit["extractor"]["how"]
    models = audit["models"]
    assert models["retrained"]["auc"] != models["same_extractor"]["auc"]
    assert all(0.0 <= v <= 1.0 for m in models.values() for v in m["auc"].values())


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["transport=flower-sim"], "transport 'inprocess' only"),
        (["evaluation.checkpoints=[]"], "runs at the reference checkpoints"),
        (["evaluation.retrain_reference=false"], "runs at the reference checkpoints"),
    ],
)
def test_the_scenario_refuses_an_audit_it_cannot_run(extra: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=r"evaluation\.audit") as err:
        scenario(TEN_CLIENTS, "evaluation.audit=true", *extra)
    assert says in str(err.value)


def test_the_command_line_refuses_the_audit_on_the_kafka_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = [x for o in TEN_CLIENTS for x in ("--set", o)]
    argv = ["run", str(QUICKSTART), *sets, "--audit", "--stream", "kafka"]
    assert main([*argv, "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "evaluation.audit" in err and "Kafka stream" in err
    assert not (tmp_path / "x").exists()  # refused before anything was written
