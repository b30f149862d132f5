"""``model.extractor_data: dp``: DP-FedAvg of the extractor and its accounted epsilon.

* one RDP accountant per client over *all* rounds: the epsilon grows with the rounds and is
  opacus' epsilon of every step the client took (a per-round accountant would not grow);
* every trained parameter is noised, the extractor's temporary classifier included: two runs
  that differ only in the noise differ in every parameter, and the DP optimiser covers the
  whole state;
* the scenario path: receipts carry scope ``whole_model`` and ``epsilon_head + k epsilon_x``
  for the ``k`` rows removed so far (and the group delta), scope ``head`` once that group's
  bound is vacuous, the end event the accountant's numbers;
* a Flower client (stateless between rounds) carries its accountant's history through the
  server and computes the in-process update and epsilon;
* what dp cannot cover is refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from support.scenarios import TEN_CLIENTS, scenario
from torch import nn

from simulator.errors import ConfigError
from simulator.head.scope import ExtractorGuarantee, compose
from simulator.models import BackboneConfig, LocalEpochs, build_network, state_to_arrays
from simulator.models.dp_fedavg import (
    ClientAccountants,
    DpSgdSettings,
    check_dp_trainable,
    dp_local_train,
    history_from_json,
    history_to_json,
)
from simulator.runner import ReportingConfig, run_scenario
from simulator.runner.featurize import build_extractor, in_process_round
from simulator.runner.federation import build_federation, load_dataset, split_clients
from simulator.scenario import Scenario

pytest.importorskip("opacus")

#: Ten clients of 80 rows, one FedAvg round, DP-SGD (the quickstart shrunk).
DP = [*TEN_CLIENTS, "model.extractor_data=dp", "evaluation.checkpoints=[]"]
CPU = torch.device("cpu")


def tiny_network(seed: int = 0) -> tuple[nn.Module, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    net = build_network(
        BackboneConfig(kind="mlp", feature_dim=4, hidden=[8]),
        x,
        tokens=False,
        vocab_size=None,
        num_classes=2,
        generator=torch.Generator().manual_seed(seed),
    )
    return net, x, y


def train_once(noise_seed: int, **settings: float) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    net, x, y = tiny_network()
    run = dp_local_train(
        net,
        x,
        y,
        schedule=LocalEpochs(epochs=1, batch_size=30, lr=1e-2),
        settings=DpSgdSettings(**settings),
        accountant=ClientAccountants().accountant(0),
        generator=torch.Generator().manual_seed(1),
        noise_generator=torch.Generator().manual_seed(noise_seed),
        device=CPU,
    )
    return run.update.state, run.noised


def test_every_trained_parameter_is_noised() -> None:
    """Same data, same Poisson batches, same clipping: only the noise differs between a and b,
    and every state entry (the classifier layer used in training included) differs; with the
    same noise they are identical, so nothing else moved them apart."""
    a, noised = train_once(noise_seed=10)
    b, _ = train_once(noise_seed=11)
    again, _ = train_once(noise_seed=10)
    assert set(noised) == set(a)  # the DP optimiser holds the whole trained state
    assert any(k.startswith("head.") for k in noised)  # the auxiliary classifier too
    for name in a:
        assert not np.array_equal(a[name], b[name]), f"{name} got no noise"
        np.testing.assert_array_equal(a[name], again[name])


def test_state_opacus_would_not_noise_is_refused() -> None:
    with pytest.raises(ConfigError, match="opacus cannot train"):
        check_dp_trainable(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    frozen = nn.Linear(3, 2)
    frozen.bias.requires_grad_(False)  # fitted elsewhere, never noised
    with pytest.raises(ConfigError, match="not a noised parameter"):
        check_dp_trainable(frozen)


def test_one_accountant_per_client_spans_every_round() -> None:
    """Round 2 adds its steps to the accountant of round 1: epsilon grows, and equals opacus'
    epsilon of all the client's steps composed (a per-round accountant gives round 1's)."""
    sc = scenario(DP, "model.rounds=2")
    ds = load_dataset(sc)
    shards, _ = split_clients(sc, ds)
    accountants = ClientAccountants()
    pools = [(ds.x_train[s], ds.y_train[s]) for s in shards]
    local_round = in_process_round(sc, ds, pools, device=CPU, accountants=accountants)
    weights = state_to_arrays(build_extractor(sc, ds))
    delta = sc.model.dp.delta
    local_round(0, weights)
    after_one = accountants.epsilons(delta)
    steps_one = {c: accountants.history(c)[0][2] for c in after_one}
    local_round(1, weights)
    after_two = accountants.epsilons(delta)
    assert set(after_two) == set(range(len(shards)))
    for c in after_two:
        assert after_two[c] > after_one[c] > 0
        (z, q, steps), *more = accountants.history(c)
        assert not more and steps == 2 * steps_one[c]  # one history: both rounds' steps
        fresh = ClientAccountants({0: [(z, q, steps)]})
        assert after_two[c] == pytest.approx(fresh.epsilon(0, delta))
    # and the federation's guarantee is the max over clients, grown with the rounds
    one = build_federation(scenario(DP, "model.rounds=1")).extractor_guarantee
    two = build_federation(scenario(DP, "model.rounds=2")).extractor_guarantee
    assert one is not None and two is not None
    assert two.epsilon == pytest.approx(max(after_two.values()))
    assert two.epsilon > one.epsilon > 0 and two.delta == delta


def test_receipts_compose_the_heads_epsilon_with_k_times_the_extractors(tmp_path: Path) -> None:
    """``k``: every row removed since the extractor was trained (the released model is
    compared with one trained from scratch without all of them), so the extractor's part
    grows from receipt to receipt until its group delta is vacuous (scope ``head``)."""
    sc = scenario(DP, "stream.phases.0.samples_per_request=1", "stream.max_batch_requests=1")
    run_scenario(sc, ReportingConfig(progress=False, plots=False), output_dir=tmp_path)
    end = json.loads((tmp_path / "metrics.json").read_text())
    assert end["extractor_data"] == "dp"
    eps_x, delta_x = end["extractor_epsilon"], end["extractor_delta"]
    assert eps_x == pytest.approx(max(end["extractor_client_epsilons"].values())) and eps_x > 0
    assert delta_x == sc.model.dp.delta
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    removing = [e for e in events if e["event"] == "deletion_batch" and e["samples"]]
    receipts = [json.loads(x) for x in (tmp_path / "receipts.jsonl").read_text().splitlines()]
    applied = [r for r in receipts if r["status"] == "applied"]
    assert len(applied) == len(removing)  # one request per batch
    k = 0
    for event, r in zip(removing, applied, strict=True):
        k += event["samples"]
        group = k * math.exp(min((k - 1) * eps_x, 700.0)) * delta_x
        if r["delta"] + group >= 1:  # the group bound is vacuous: only the head is certified
            assert r["scope"] == "head" and r["total_epsilon_spent"] is None
            continue
        assert r["scope"] == "whole_model"
        assert r["total_epsilon_spent"] == pytest.approx(r["epsilon_spent"] + k * eps_x)
        assert r["total_delta"] == pytest.approx(r["delta"] + group)
    assert applied[0]["scope"] == "whole_model" and applied[-1]["scope"] == "head"
    assert end["extractor_rows"] == k and end["scope"] == "head"
    summary = (tmp_path / "summary.md").read_text()
    assert "scope: head (extractor_data dp)" in summary
    assert "DP-SGD" in summary


def test_a_vacuous_group_bound_certifies_the_head_only() -> None:
    part = ExtractorGuarantee(2.0, 1e-5)
    assert compose(0.5, 1e-4, part, rows=3) == pytest.approx((6.5, 1e-4 + 3 * math.e**4 * 1e-5))
    assert compose(0.5, 1e-4, part, rows=10) is None  # 10 e^18 1e-5 >= 1
    assert compose(0.5, 1e-4, part, rows=10**6) is None  # no overflow


def test_a_flower_client_carries_its_accountant_through_the_server() -> None:
    """The ClientApp is rebuilt every round: the history the server sends back and forth
    gives the same update and epsilon as the in-process client's live accountant."""
    from clients.build import local_update
    from simulator.scenario import scenario_to_yaml

    sc = scenario(DP, "model.rounds=2", "partition.num_clients=3", "stream.withdrawals=[]")
    ds = load_dataset(sc)
    shards, _ = split_clients(sc, ds)
    live = ClientAccountants()
    pools = [(ds.x_train[s], ds.y_train[s]) for s in shards]
    local_round = in_process_round(sc, ds, pools, device=CPU, accountants=live)
    weights = state_to_arrays(build_extractor(sc, ds))
    text, carried = scenario_to_yaml(sc), "[]"
    for r in range(2):
        ours = local_round(r, weights)[1]
        remote = ClientAccountants({1: history_from_json(carried)})
        theirs = local_update(text, 1, r, weights, remote)
        assert theirs is not None
        for k in ours.state:
            np.testing.assert_array_equal(ours.state[k], theirs.state[k])
        carried = history_to_json(remote.history(1))
    restored = ClientAccountants({1: history_from_json(carried)})
    assert restored.epsilon(1, 1e-5) == pytest.approx(live.epsilon(1, 1e-5))
    assert restored.epsilon(1, 1e-5) > 0


def test_what_dp_cannot_cover_is_refused() -> None:
    sc = scenario(DP)
    table = sc.model_copy(update={"data": sc.data.model_copy(update={"source": "csv"})})
    with pytest.raises(ConfigError, match="encoder fits its statistics"):
        build_federation(table)
    from simulator.compare import build_workload

    # compare refuses the same sources with run's error
    with pytest.raises(ConfigError, match="encoder fits its statistics"):
        build_workload(table, 0)


def test_dp_settings_are_validated() -> None:
    with pytest.raises(ConfigError):
        scenario(DP, "model.dp.noise_multiplier=0")
    with pytest.raises(ConfigError):
        scenario(DP, "model.dp.delta=1")
    sc: Scenario = scenario(DP, "model.dp.noise_multiplier=2.5")
    assert sc.model.dp.noise_multiplier == 2.5
