"""``unlearnsim compare`` under ``model.extractor_data: dp``.

* every head-based method's extractor, the retrain baseline's included, is trained by the
  streaming path's DP-FedAvg over the clients: the epsilon the outputs report is opacus'
  epsilon of the history those clients' DP-SGD steps make (computed here from the shard sizes
  alone, not read back from the code under test), the max over clients;
* the noise is really applied: the extractor differs from the private one and from one with
  another noise multiplier, and two runs of the same scenario and seed agree exactly;
* a retrain from scratch trains with fresh accountants (its epsilon is that of the retained
  rows' history, not the fit's plus the retrain's);
* the outputs (``fits.json``, ``audit.json``, ``table.md``) state the provenance, the scope and
  the accounted epsilon.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from support.scenarios import tiny_compare

from simulator.compare import build_workload, run_comparison, run_method, write_comparison
from simulator.compare.audit import AuditConfig
from simulator.compare.report import retable
from simulator.compare.workload import Workload
from simulator.models.featurizer import Featurizer
from simulator.scenario import Scenario, parse_scenario
from simulator.unlearners import BaseUnlearner

opacus = pytest.importorskip("opacus")

TINY_DP = tiny_compare(
    "tiny_dp",
    model="rounds: 2, local_epochs: 1, extractor_data: dp, "
    "dp: {noise_multiplier: 1.5, delta: 1.0e-5}",
)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def tiny(**dp: float) -> Scenario:
    sc = parse_scenario(TINY_DP)
    if dp:
        m = sc.model
        return sc.model_copy(
            update={"model": m.model_copy(update={"dp": m.dp.model_copy(update=dp)})}
        )
    return sc


def expected_epsilon(workload: Workload, rows: np.ndarray) -> float:
    """Opacus' epsilon of the DP-FedAvg history of ``rows`` split by client, max over clients.

    Each client with ``n`` rows takes ``ceil(n / B)`` Poisson-sampled steps per local epoch at
    rate ``q = 1 / ceil(n / B)``, every round, all recorded in one accountant.
    """
    sc = workload.scenario
    m = sc.model
    groups = workload.train.groups
    assert groups is not None
    worst = 0.0
    for c in np.unique(groups[rows]):
        n = int(np.sum(groups[rows] == c))
        batches = math.ceil(n / min(m.batch_size, n))
        accountant = opacus.accountants.RDPAccountant()
        accountant.history = [
            (m.dp.noise_multiplier, 1.0 / batches, batches * m.local_epochs)
        ] * m.rounds
        worst = max(worst, float(accountant.get_epsilon(m.dp.delta)))
    return worst


def kept(name: str, workload: Workload) -> BaseUnlearner:  # type: ignore[type-arg]
    box: list[BaseUnlearner] = []  # type: ignore[type-arg]
    run_method(name, workload, keep=box.append)
    return box[0]


def weights(featurizer: Featurizer) -> list[torch.Tensor]:
    return [t.detach().clone() for t in featurizer.model.state_dict().values()]


def test_compare_runs_under_dp_and_reports_the_accountants_epsilon(tmp_path: Path) -> None:
    """Fails on the code before: build_workload refused extractor_data dp."""
    workload = build_workload(tiny(), 4)
    comparison = run_comparison(
        [workload], ["retrain", "cr", "decoremoval"], audit=AuditConfig(references=2)
    )
    everything = np.arange(workload.train.n)
    want = expected_epsilon(workload, everything)
    assert 0 < want < 100
    for fit in comparison.fits:
        assert fit.info["extractor_epsilon"] == pytest.approx(want, rel=1e-9), fit.method
        assert fit.info["extractor_delta"] == 1e-5
    write_comparison(comparison, tmp_path, command="test", plots=False)
    meta = json.loads((tmp_path / "fits.json").read_text())
    extractor = meta["extractor"]
    assert extractor["scope"] == "whole_model"
    assert extractor["provenance"]["extractor_data"] == "dp"
    assert extractor["provenance"]["mechanism"]["noise_multiplier"] == 1.5
    assert extractor["extractor_epsilon"] == pytest.approx(want)
    assert extractor["extractor_delta"] == 1e-5
    head = workload.settings.head
    assert extractor["total_epsilon_one_row"] == pytest.approx(head.epsilon + want)
    assert extractor["total_delta_one_row"] == pytest.approx(head.delta + 1e-5)
    audit = json.loads((tmp_path / "audit.json").read_text())
    assert audit["extractor"] == extractor
    table = (tmp_path / "table.md").read_text()
    assert "scope `whole_model`" in table and f"{want:.3f} at delta 1e-05" in table
    retable(tmp_path)  # the tables rewritten from the files say the same
    assert (tmp_path / "table.md").read_text() == table


def test_the_dp_extractor_is_noised_and_reproducible() -> None:
    workload = build_workload(tiny(), 4)
    dp = kept("cr", workload).featurizer  # type: ignore[attr-defined]
    private_sc = tiny().model_copy(
        update={"model": tiny().model.model_copy(update={"extractor_data": "private"})}
    )
    private = kept("cr", build_workload(private_sc, 4)).featurizer  # type: ignore[attr-defined]
    louder = kept("cr", build_workload(tiny(noise_multiplier=3.0), 4)).featurizer  # type: ignore[attr-defined]
    again = kept("cr", build_workload(tiny(), 4)).featurizer  # type: ignore[attr-defined]
    assert private.privacy is None and dp.privacy is not None
    for other in (private, louder):
        assert all(not torch.equal(a, b) for a, b in zip(weights(dp), weights(other), strict=True))
    assert louder.privacy.epsilon < dp.privacy.epsilon
    for a, b in zip(weights(dp), weights(again), strict=True):
        assert torch.equal(a, b)
    assert again.privacy.epsilon == dp.privacy.epsilon
    np.testing.assert_array_equal(again.rff.omega, dp.rff.omega)


def test_a_retrain_from_scratch_trains_with_fresh_accountants() -> None:
    workload = build_workload(tiny(), 4)
    retrain = kept("retrain", workload)
    rows = retrain.retained_ids
    assert rows.size < workload.train.n
    privacy = retrain.featurizer.privacy  # type: ignore[attr-defined]
    assert privacy is not None
    # the accountants hold the last retrain's steps only: rounds x local epochs x batches
    m = workload.scenario.model
    groups = workload.train.groups
    assert groups is not None
    for c in privacy.accountants.clients():
        n = int(np.sum(groups[rows] == c))
        steps = sum(k for _, _, k in privacy.accountants.history(c))
        assert steps == m.rounds * m.local_epochs * math.ceil(n / m.batch_size)
    assert privacy.epsilon == pytest.approx(expected_epsilon(workload, rows), rel=1e-9)
