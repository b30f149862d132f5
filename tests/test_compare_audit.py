"""The membership audit of ``compare run --audit``: the leak rule and the three models."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from server.cli import main
from simulator.compare import build_workload, run_comparison, run_method, write_comparison
from simulator.compare.audit import (
    ATTACKS,
    MODELS,
    AuditConfig,
    SeedAudit,
    audit_method,
    head_from_scratch,
)
from simulator.compare.leak import LeakVerdict, auc_null_std, combine, leak_verdict
from simulator.compare.profiles import QUICK
from simulator.compare.report import retable
from simulator.errors import ConfigError
from simulator.head import LocalHeadData
from simulator.head.logistic import StatisticsRequest, objective_gradient
from simulator.metrics import roc_auc
from simulator.scenario import load_scenario
from simulator.unlearners import BaseUnlearner
from simulator.unlearners.headbased import CertifiedHeadUnlearner
from simulator.unlearners.retrain import Retrain

ROOT = Path(__file__).resolve().parents[1]
SURVEY = ROOT / "scenarios" / "compare_survey.yaml"


# ------------------------------------------------------------------ the rule, constructed numbers
# (a) has a seed standard deviation of exactly 0.02 (0.48, 0.50, 0.52): tolerance 0.04 at factor 2
A = [0.48, 0.50, 0.52]


def shifted(values: list[float], by: float) -> list[float]:
    return [v + by for v in values]


def test_nothing_leaks_when_all_three_agree() -> None:
    v = leak_verdict(A, shifted(A, 0.01), shifted(A, 0.015))
    assert v.where == "neither" and v.tolerance == pytest.approx(0.04)
    assert v.extractor_gap == pytest.approx(0.01) and v.head_gap == pytest.approx(0.005)


def test_the_extractor_leaks_when_b_is_above_a_by_more_than_the_spread() -> None:
    b = shifted(A, 0.05)
    v = leak_verdict(A, b, b)
    assert (v.where, v.extractor, v.head) == ("extractor", True, False)


def test_the_head_leaks_when_c_is_above_b_by_more_than_the_spread() -> None:
    v = leak_verdict(A, A, shifted(A, 0.05))
    assert (v.where, v.extractor, v.head) == ("head", False, True)


def test_both_parts_can_leak() -> None:
    v = leak_verdict(A, shifted(A, 0.05), shifted(A, 0.10))
    assert v.where == "head and extractor" and v.head and v.extractor


def test_a_gap_inside_two_standard_deviations_of_retrain_is_not_a_leak() -> None:
    # 0.03 is 1.5 seed standard deviations of (a) but 2.6 standard errors of its mean
    # (0.02 / sqrt(3)): a rule that compared with one standard deviation, with the standard
    # error, or with no spread at all would call both parts leaking
    v = leak_verdict(A, shifted(A, 0.03), shifted(A, 0.06))
    assert v.where == "neither"
    assert leak_verdict(A, shifted(A, 0.045), shifted(A, 0.09)).where == "head and extractor"


def test_the_spread_is_never_narrower_than_the_aucs_own_sampling_noise() -> None:
    flat = [0.50, 0.50, 0.50]  # seeds that happen to agree: a standard deviation of 0
    b = shifted(flat, 0.015)
    assert leak_verdict(flat, b, b, floor=0.01).where == "neither"  # tolerance 0.02
    assert leak_verdict(flat, b, b, floor=0.005).where == "extractor"  # tolerance 0.01


def test_lower_auc_than_retrain_is_not_membership() -> None:
    assert leak_verdict(A, shifted(A, -0.2), shifted(A, -0.4)).where == "neither"


def test_one_seed_gives_no_spread_and_no_answer() -> None:
    v = leak_verdict([0.5], [0.9], [0.95])
    assert v.where == "undetermined" and math.isnan(v.tolerance) and v.seeds == 1
    # a NaN drops the seed from all three models
    assert leak_verdict([0.5, math.nan], [0.9, 0.9], [0.9, 0.9]).where == "undetermined"


def test_lira_does_not_vote_on_the_extractor() -> None:
    extractor = LeakVerdict("extractor", 0.0, 0.1, 0.04, 3)
    neither = LeakVerdict("neither", 0.0, 0.0, 0.04, 3)
    head = LeakVerdict("head", 0.1, 0.0, 0.04, 3)
    assert combine({"loss": neither, "lira": extractor}) == "neither"
    assert combine({"loss": extractor, "lira": neither}) == "extractor"
    assert combine({"loss": extractor, "lira": head}) == "head and extractor"
    undetermined = LeakVerdict("undetermined", math.nan, math.nan, math.nan, 1)
    assert combine({"loss": undetermined}) == "undetermined"


def test_the_null_spread_of_the_auc_matches_simulation() -> None:
    rng = np.random.default_rng(0)
    m, n = 40, 60
    aucs = [roc_auc(rng.normal(size=m), rng.normal(size=n)) for _ in range(3000)]
    assert float(np.std(aucs)) == pytest.approx(auc_null_std(m, n), rel=0.06)
    assert auc_null_std(1000, 1000) == pytest.approx(0.012913, abs=1e-6)


# ------------------------------------------------------------------ the three models
def quick_survey(*overrides: str) -> Any:
    return load_scenario(SURVEY, overrides=[*QUICK, *overrides])


def final_models(scenario: Any, methods: list[str]) -> tuple[Any, dict[str, BaseUnlearner[Any]]]:
    workload = build_workload(scenario, scenario.seed, checkpoints=[10, 30])
    kept: dict[str, BaseUnlearner[Any]] = {}
    for name in methods:
        run_method(name, workload, keep=lambda u: kept.__setitem__(u.name, u))
    return workload, kept


@pytest.fixture(scope="module")
def survey_models() -> tuple[Any, dict[str, BaseUnlearner[Any]]]:
    """One seed of the quick survey, certified updates (no retrains), every method's last model."""
    scenario = quick_survey("head.accounting=anchored")
    return final_models(scenario, ["retrain", "cr", "decoremoval"])


def test_the_three_models_are_what_they_claim(
    survey_models: tuple[Any, dict[str, BaseUnlearner[Any]]],
) -> None:
    workload, kept = survey_models
    retrain, cr, dr = kept["retrain"], kept["cr"], kept["decoremoval"]
    assert isinstance(retrain, Retrain) and isinstance(cr, CertifiedHeadUnlearner)
    rows = cr.retained_ids
    assert workload.train.n - rows.size == 30  # the final removed set
    own, fresh = cr.featurizer(workload.train.x), retrain.featurizer(workload.train.x)
    assert not np.allclose(own, fresh)  # retrain's extractor never saw the removed rows

    # (b) is the exact minimiser of the head's objective on D' with (c)'s extractor and b
    Wb = head_from_scratch(cr.head, own, rows)
    data = LocalHeadData(own[rows], workload.train.y[rows], workload.train.num_classes)
    grad = objective_gradient(
        data.statistics(StatisticsRequest(Wb)), Wb, cr.head.b, lam=cr.head.config.lam
    )
    assert float(np.linalg.norm(grad)) < 1e-6 * rows.size
    assert float(np.linalg.norm(Wb - cr.head.W)) > 0  # (c) is a Newton update, not a retrain

    config = AuditConfig(references=4)
    scores = {s.model: s for s in audit_method(cr, retrain.featurizer, workload, config)}
    # the collector gives the same scores whichever of the two models it is given first
    collector = SeedAudit(workload, config)
    collector.add(cr)
    collector.add(retrain)
    timeless = [replace(s, seconds=0.0) for s in scores.values()]
    assert [replace(s, seconds=0.0) for s in collector.finish()] == timeless
    # cr and decoremoval share their extractor and so its references: DR's scores are the same
    # whether it is audited alone or after cr
    collector.add(dr)
    shared = [replace(s, seconds=0.0) for s in collector.finish() if s.method == "decoremoval"]
    assert isinstance(dr, CertifiedHeadUnlearner) and dr.featurizer is cr.featurizer
    alone = audit_method(dr, retrain.featurizer, workload, config)
    assert shared == [replace(s, seconds=0.0) for s in alone]
    lonely = SeedAudit(workload, config)
    lonely.add(cr)
    with pytest.raises(ConfigError, match="retrain baseline"):
        lonely.finish()
    assert set(scores) == set(MODELS)
    for s in scores.values():
        assert s.removed == 30 and s.members == 30 and s.nonmembers == 30
        assert set(s.auc) == set(ATTACKS) and all(0 <= v <= 1 for v in s.auc.values())
        assert 0.3 < s.acc_test <= 1
    # (a) and (b) differ in the extractor: some attack tells them apart
    assert any(scores["retrained"].auc[a] != scores["same_extractor"].auc[a] for a in ATTACKS)

    # given (c)'s own extractor as the "retrained" one, (a) is (b): the threshold attacks agree
    same = {s.model: s for s in audit_method(cr, cr.featurizer, workload, config)}
    for attack in ATTACKS[:-1]:
        assert same["retrained"].auc[attack] == same["same_extractor"].auc[attack]

    # once (c)'s head is retrained from scratch, (b) and (c) are one model on one extractor:
    # every attack, LiRA's shared references included, gives the same AUC
    cr.head.retrain()
    again = {s.model: s for s in audit_method(cr, retrain.featurizer, workload, config)}
    for attack in ATTACKS:
        assert again["same_extractor"].auc[attack] == pytest.approx(
            again["unlearned"].auc[attack], abs=1e-12
        )


def test_decoremoval_heads_are_refitted_with_its_cold_weights(
    survey_models: tuple[Any, dict[str, BaseUnlearner[Any]]],
) -> None:
    workload, kept = survey_models
    dr = kept["decoremoval"]
    assert isinstance(dr, CertifiedHeadUnlearner)
    own, rows = dr.featurizer(workload.train.x), dr.retained_ids
    weighted = head_from_scratch(dr.head, own, rows)
    data = LocalHeadData(own[rows], workload.train.y[rows], workload.train.num_classes)
    uniform = objective_gradient(
        data.statistics(StatisticsRequest(weighted)), weighted, dr.head.b, lam=dr.head.config.lam
    )
    assert float(np.linalg.norm(uniform)) > 1e-4  # not the uniform-weight minimiser


# ------------------------------------------------------------------ end to end
def test_compare_audit_end_to_end(tmp_path: Path) -> None:
    scenario = quick_survey("head.accounting=anchored")
    seeds = [scenario.seed, scenario.seed + 1]
    comparison = run_comparison(
        lambda seed: build_workload(scenario, seed, checkpoints=[10, 30]),
        ["retrain", "cr", "sisa"],
        seeds=seeds,
        options={"sisa": {"slices": 2}},
        audit=AuditConfig(references=4),
    )
    assert comparison.audit_skipped == ("sisa",)
    files = write_comparison(comparison, tmp_path, command="unlearnsim compare run ...", plots=True)
    body = json.loads(files["audit"].read_text())
    (method,) = body["methods"]
    assert method["method"] == "cr" and method["seeds"] == seeds and method["removed"] == [30, 30]
    assert method["answer"] in ("neither", "head", "extractor", "head and extractor")
    for model in MODELS:
        for attack in ATTACKS:
            values = method["auc"][model][attack]["values"]
            assert len(values) == 2 and all(0 <= v <= 1 for v in values)
    assert len(body["scores"]) == 2 * len(MODELS)
    table = files["table"].read_text()
    assert "## Where does it leak?" in table and "(b) same extractor" in table
    assert "* **cr: membership leaks through" in table and "not audited" in table
    assert files["audit_plot"].stat().st_size > 1000
    retable(tmp_path)  # the section is rewritten from audit.json
    assert (tmp_path / "table.md").read_text() == table
    # a later comparison without the audit in the same folder leaves no stale audit behind
    plain = run_comparison(
        lambda seed: build_workload(scenario, seed, checkpoints=[10]), ["cr"], seeds=seeds[:1]
    )
    write_comparison(plain, tmp_path, command="unlearnsim compare run ...", plots=False)
    assert not (tmp_path / "audit.json").exists() and not (tmp_path / "audit.png").exists()
    assert "Where does it leak?" not in (tmp_path / "table.md").read_text()


def test_the_audit_is_refused_without_retrain_or_a_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["compare", "run", str(SURVEY), "--quick", "--audit", "--output", str(tmp_path / "x")]
    assert main([*base, "--methods", "cr", "--no-retrain"]) == 2
    assert "drop --no-retrain" in capsys.readouterr().err
    assert main([*base, "--methods", "retrain,sisa"]) == 2
    assert "needs a head-based method" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # refused before any fitting


def test_the_command_line_passes_the_audit_on(tmp_path: Path) -> None:
    from server.cli import build_parser
    from server.commands.compare import audit_config, command_line

    args = build_parser().parse_args(["compare", "run", str(SURVEY), "--methods", "cr", "--audit"])
    assert audit_config(args, ["retrain", "cr"], 6) == AuditConfig(references=6, max_samples=1000)
    again = build_parser().parse_args(shlex.split(command_line(args, tmp_path))[1:])
    assert again.audit  # the command written to command.txt reproduces the audit
    plain = build_parser().parse_args(["compare", "run", str(SURVEY), "--methods", "cr"])
    assert audit_config(plain, ["retrain", "cr"], 6) is None
    assert "--audit" not in command_line(plain, tmp_path)
