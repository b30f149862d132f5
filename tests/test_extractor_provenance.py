"""``model.extractor_data``: under ``public`` nothing fitted before the head reads a client's row.

* the run path (the one build every transport shares): the table encoder's statistics, the
  extractor and the RFF map are bit-identical when every client row's features change;
* ``compare``: the public pool is no sample id, and every head-based method's featurizer, the
  retrain baseline's included, is bit-identical when the client rows change;
* a public pool that shares a row with a client is refused;
* what the certificate covers and its total (epsilon, delta) (``simulator.head.scope``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from support.provenance import fitted_before_the_head, write_table
from support.scenarios import tiny_compare

from simulator.compare import build_workload
from simulator.data.selection import stratified_split
from simulator.errors import ConfigError, InputError
from simulator.head.scope import ExtractorGuarantee, certificate_scope, compose
from simulator.runner.federation import build_federation, check_public_pool, public_pool
from simulator.scenario import Scenario, parse_scenario
from simulator.seeds import child_rng
from simulator.unlearners import TrainingSet, create_unlearner
from simulator.unlearners.base import ModelConfig
from simulator.unlearners.features import train_featurizer

TABLE = """
name: table_public
description: a CSV table; the encoder, extractor and RFF map must come from the public pool
seed: 3
device: cpu
data: {{source: csv, path: {path}, label_column: label}}
partition: {{kind: iid, num_clients: 3}}
model: {{backbone: mlp, feature_dim: 6, hidden: [12], rounds: 2, batch_size: 32,
         extractor_data: {provenance}}}
rff: {{dim: 16}}
decorrelation: {{features: 6, steps: 5}}
stream:
  phases:
    - {{name: a, ticks: 2, rate: 2, samples_per_request: 2}}
evaluation: {{checkpoints: []}}
"""


def table_scenario(path: Path, provenance: str) -> Scenario:
    return parse_scenario(TABLE.format(path=path, provenance=provenance))


def client_raw_rows(scenario: Scenario) -> np.ndarray:
    """Raw file rows the clients hold: the source's split (``raw.assemble``), minus the pool."""
    import pandas as pd

    labels = pd.read_csv(scenario.data.path)["label"].to_numpy(dtype=np.int64)
    split = stratified_split(labels, scenario.data.test_fraction, child_rng(scenario.seed, "data"))
    pool = public_pool(scenario, split.train.size)
    return split.train[np.setdiff1d(np.arange(split.train.size), pool)]


@pytest.mark.parametrize("provenance", ["public", "private"])
def test_nothing_before_the_head_reads_a_client_row(tmp_path: Path, provenance: str) -> None:
    """Perturb every client row's features: under public the encoder's statistics (the pool's
    encoded rows), the extractor and the RFF map do not move; under private they do (so the
    comparison can fail)."""
    clean, dirty = tmp_path / "clean.csv", tmp_path / "dirty.csv"
    write_table(clean)
    clients = client_raw_rows(table_scenario(clean, "public"))
    write_table(dirty, perturb=clients)
    a = build_federation(table_scenario(clean, provenance))
    b = build_federation(table_scenario(dirty, provenance))
    shards = [s.tolist() for s in a.client_indices]
    assert shards == [s.tolist() for s in b.client_indices]  # same rows, same clients
    fa, fb = fitted_before_the_head(a), fitted_before_the_head(b)
    if provenance == "private":  # fitted on the client rows: the perturbation moves it
        assert a.public_indices.size == 0
        assert any(not np.array_equal(fa[k], fb[k]) for k in fa)
        return
    held = np.sort(np.concatenate(a.client_indices))
    # the perturbation reached every client row's encoded features
    assert not np.any(np.all(a.dataset.x_train[held] == b.dataset.x_train[held], axis=1))
    pool = a.public_indices
    assert pool.size == round(0.2 * a.dataset.n_train)
    assert np.intersect1d(pool, held).size == 0
    np.testing.assert_array_equal(a.dataset.x_train[pool], b.dataset.x_train[pool])
    np.testing.assert_array_equal(a.dataset.x_test, b.dataset.x_test)  # test rows too
    assert fa.keys() == fb.keys()
    for key in fa:
        np.testing.assert_array_equal(fa[key], fb[key], err_msg=key)


def test_a_public_pool_sharing_a_clients_row_is_refused() -> None:
    shards = [np.array([0, 1, 2]), np.array([3, 4, 5])]
    check_public_pool(np.array([6, 7]), shards)  # disjoint: fine
    check_public_pool(np.zeros(0, dtype=np.int64), shards)  # private: no pool
    with pytest.raises(ConfigError, match=r"shares 2 row\(s\) with client 1 \(e.g. row 4\)"):
        check_public_pool(np.array([4, 5, 9]), shards)


TINY = tiny_compare("tiny_public", model="rounds: 1, local_epochs: 2, extractor_data: public")


def test_compare_holds_the_public_pool_out_of_the_sample_ids() -> None:
    scenario = parse_scenario(TINY)
    w = build_workload(scenario, 4)
    pool = w.train.extractor_pool
    assert pool is not None and pool.n == 48 and w.train.n == 192  # 20% of 240 held out
    assert w.train.groups is not None and set(np.unique(w.train.groups)) == {0, 1, 2}
    removed = np.concatenate(w.steps)
    assert removed.max() < w.train.n and np.unique(removed).size == removed.size
    assert not any("not reproduced" in n for n in w.notes)
    assert any("public pool" in n for n in w.notes)


@pytest.mark.parametrize("method", ["retrain", "retrain_head", "cr", "decoremoval"])
def test_compare_featurizer_never_reads_a_client_row(method: str) -> None:
    """Two training sets with the same pool and different client rows: the same featurizer
    (fitted, and for retrain again after a removal)."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(1)
    pool = TrainingSet(rng.normal(size=(40, 5)), rng.integers(0, 2, 40), 2)
    settings = ModelConfig(epochs=2, rff_dim=16)
    featurizers = []
    for shift in (0.0, 5.0):
        x = rng.normal(size=(60, 5)) + shift
        train = TrainingSet(x, np.arange(60) % 2, 2, extractor_pool=pool)
        unlearner = create_unlearner(method, settings)
        report = unlearner.fit(train, seed=7)
        assert any("public pool" in n for n in report.notes)
        unlearner.remove([0, 1])
        featurizers.append(unlearner._state.featurizer)
    a, b = featurizers
    assert a.rff.to_arrays().keys() == b.rff.to_arrays().keys()
    for key, value in a.rff.to_arrays().items():
        np.testing.assert_array_equal(value, b.rff.to_arrays()[key])
    for (name, wa), wb in zip(
        a.model.state_dict().items(), b.model.state_dict().values(), strict=True
    ):
        assert torch.equal(wa, wb), name
    # the pool-trained featurizer is the one train_featurizer gives for the pool itself
    direct = train_featurizer(pool, np.arange(pool.n), settings, 7)
    np.testing.assert_array_equal(direct.rff.omega, a.rff.omega)


def test_a_method_without_an_extractor_says_it_leaves_the_pool_unused() -> None:
    rng = np.random.default_rng(2)
    pool = TrainingSet(rng.normal(size=(20, 4)), np.arange(20) % 2, 2)
    train = TrainingSet(rng.normal(size=(30, 4)), np.arange(30) % 2, 2, extractor_pool=pool)
    report = create_unlearner("ssd", ModelConfig(epochs=1)).fit(train, seed=0)
    assert any("leaves the public pool unused" in n for n in report.notes)
    with pytest.raises(InputError, match="extractor pool"):
        TrainingSet(rng.normal(size=(30, 3)), np.arange(30) % 2, 2, extractor_pool=pool)


# ------------------------------------------------------------------------ scope
def test_public_certifies_the_whole_model_with_the_heads_epsilon() -> None:
    s = certificate_scope("public", 0.4, 1e-4, rows=25)
    assert (s.scope, s.total_epsilon, s.total_delta) == ("whole_model", 0.4, 1e-4)


def test_private_certifies_the_head_only_and_has_no_total() -> None:
    s = certificate_scope("private", 0.4, 1e-4)
    assert (s.scope, s.total_epsilon, s.total_delta) == ("head", None, None)


def test_a_dp_extractor_adds_its_group_epsilon() -> None:
    """The hook a DP extractor will use: k rows cost k epsilon_x, delta by group privacy."""
    dp = ExtractorGuarantee(0.1, 1e-5)
    eps, delta = compose(0.5, 1e-4, dp, rows=3) or (math.nan, math.nan)
    assert eps == pytest.approx(0.5 + 3 * 0.1)
    assert delta == pytest.approx(1e-4 + 3 * math.exp(2 * 0.1) * 1e-5)
    s = certificate_scope("dp", 0.5, 1e-4, rows=3, extractor=dp)
    assert s.scope == "whole_model" and s.total_epsilon == pytest.approx(0.8)
    with pytest.raises(InputError, match="accountant"):
        certificate_scope("dp", 0.5, 1e-4)
    with pytest.raises(InputError, match="at least zero rows"):
        compose(0.5, 1e-4, dp, rows=-1)
    # no removed row was read by the extractor (retrained since): the head's own guarantee
    assert compose(0.5, 1e-4, dp, rows=0) == (0.5, 1e-4)
