"""``model.public_source``: where the public pool of ``extractor_data: public`` comes from.

* ``test_share``: a seeded share of the test split is the pool; no row is both pool and
  evaluated, the clients hold every training row, and nothing fitted before the head (the
  table encoder's statistics, the extractor, the RFF map) moves when every client row changes;
* ``digits``: scikit-learn's digits as MNIST images; the same featurizer whatever the clients
  hold;
* ``train_share`` (the default) is today's pool; ``compare`` takes every source;
* the settings where a source does not apply are refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.provenance import fitted_before_the_head, write_table
from support.scenarios import tiny_compare

from simulator.compare import build_workload
from simulator.data.natural import digits_as_mnist
from simulator.data.selection import stratified_split
from simulator.errors import ConfigError
from simulator.runner.federation import build_federation, load_dataset
from simulator.scenario import Scenario, parse_scenario
from simulator.seeds import child_rng

TABLE = """
name: table_public_source
description: a CSV table whose public pool is a share of its test split
seed: 3
device: cpu
data: {{source: csv, path: {path}, label_column: label}}
partition: {{kind: iid, num_clients: 3}}
model: {{backbone: mlp, feature_dim: 6, hidden: [12], rounds: 2, batch_size: 8,
         extractor_data: public{source}}}
rff: {{dim: 16}}
decorrelation: {{features: 6, steps: 5}}
stream:
  phases:
    - {{name: a, ticks: 2, rate: 2, samples_per_request: 2}}
evaluation: {{checkpoints: []}}
"""


def table_scenario(path: Path, source: str | None) -> Scenario:
    key = "" if source is None else f", public_source: {source}"
    return parse_scenario(TABLE.format(path=path, source=key))


def raw_split(scenario: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """Raw file rows of the source's training and test splits (``raw.assemble``'s split)."""
    import pandas as pd

    labels = pd.read_csv(scenario.data.path)["label"].to_numpy(dtype=np.int64)
    split = stratified_split(labels, scenario.data.test_fraction, child_rng(scenario.seed, "data"))
    return split.train, split.test


def shared_rows(a: np.ndarray, b: np.ndarray) -> int:
    """Rows of ``a`` that are also rows of ``b`` (exact equality)."""
    seen = {row.tobytes() for row in np.ascontiguousarray(b)}
    return sum(row.tobytes() in seen for row in np.ascontiguousarray(a))


def test_a_test_share_pool_is_never_a_client_row_nor_evaluated(tmp_path: Path) -> None:
    """Every client row's features replaced: the pool's encoded rows, the test rows, the
    extractor and the RFF map are bit-identical; the clients hold every training row; the pool's
    rows left the test split and every evaluation set."""
    clean, dirty = tmp_path / "clean.csv", tmp_path / "dirty.csv"
    write_table(clean)
    train_raw, test_raw = raw_split(table_scenario(clean, "test_share"))
    write_table(dirty, perturb=train_raw)
    a = build_federation(table_scenario(clean, "test_share"))
    b = build_federation(table_scenario(dirty, "test_share"))
    shards = [s.tolist() for s in a.client_indices]
    assert shards == [s.tolist() for s in b.client_indices]
    held = np.sort(np.concatenate(a.client_indices))
    n = train_raw.size
    np.testing.assert_array_equal(held, np.arange(n))  # nothing held out of the federation
    k = round(0.2 * test_raw.size)
    pool = a.public_indices
    np.testing.assert_array_equal(pool, np.arange(n, n + k))  # after the clients' rows
    assert a.dataset.n_train == n + k and a.dataset.y_test.size == test_raw.size - k
    # the perturbation reached every client row's encoded features ...
    assert not np.any(np.all(a.dataset.x_train[held] == b.dataset.x_train[held], axis=1))
    # ... and nothing fitted before the head: the pool's and the test rows' encoding (the
    # encoder's statistics), the extractor and the RFF map
    np.testing.assert_array_equal(a.dataset.x_train[pool], b.dataset.x_train[pool])
    np.testing.assert_array_equal(a.dataset.x_test, b.dataset.x_test)
    fa, fb = fitted_before_the_head(a), fitted_before_the_head(b)
    assert fa.keys() == fb.keys()
    for key in fa:
        np.testing.assert_array_equal(fa[key], fb[key], err_msg=key)
    # no pool row is evaluated: not in the test split, nor in any evaluation set
    assert shared_rows(a.dataset.x_train[pool], a.dataset.x_test) == 0
    assert shared_rows(a.dataset.x_train[pool], a.dataset.x_train[held]) == 0
    for name, split in a.eval_sets.base.items():
        assert split.y.size == a.dataset.y_test.size, name
    tested = a.eval_sets.features("test", 0)[0]
    assert shared_rows(a.featurizer(a.dataset.x_train[pool]), tested) == 0
    assert not np.isin(pool, a.retain_probe).any()


def test_train_share_is_the_default_pool(tmp_path: Path) -> None:
    """``public_source: train_share`` given or left out: the same pool, rows and featurizer."""
    path = tmp_path / "table.csv"
    write_table(path)
    given, default = (build_federation(table_scenario(path, s)) for s in ("train_share", None))
    assert default.dataset.public_rows is None
    np.testing.assert_array_equal(given.public_indices, default.public_indices)
    assert given.public_indices.size == round(0.2 * given.dataset.n_train)
    np.testing.assert_array_equal(given.dataset.x_train, default.dataset.x_train)
    np.testing.assert_array_equal(given.dataset.x_test, default.dataset.x_test)
    fg, fd = fitted_before_the_head(given), fitted_before_the_head(default)
    for key in fd:
        np.testing.assert_array_equal(fg[key], fd[key], err_msg=key)


MNIST = """
name: mnist_digits_pool
description: MNIST 3 vs 8 with scikit-learn's digits as the public pool
seed: 5
device: cpu
data: {{source: mnist, classes: [3, 8], max_train: {max_train}, max_test: 100}}
partition: {{kind: iid, num_clients: 2}}
model: {{backbone: mlp, feature_dim: 6, hidden: [12], rounds: 1, batch_size: 64,
         extractor_data: public, public_source: digits}}
rff: {{dim: 16}}
decorrelation: {{features: 6, steps: 5}}
stream:
  phases:
    - {{name: a, ticks: 2, rate: 2, samples_per_request: 2}}
evaluation: {{checkpoints: []}}
"""


def test_a_digits_pool_fits_the_same_featurizer_whatever_the_clients_hold() -> None:
    """Two MNIST runs whose clients hold different rows (other subsamples) share the digits
    pool, and so the extractor and RFF map; the pool is every digit 3 and 8, as MNIST bytes."""
    a, b = (build_federation(parse_scenario(MNIST.format(max_train=m))) for m in (120, 160))
    digits, label = digits_as_mnist([3, 8])
    for fed, n in ((a, 120), (b, 160)):
        np.testing.assert_array_equal(fed.public_indices, np.arange(n, n + label.size))
        np.testing.assert_array_equal(np.sort(np.concatenate(fed.client_indices)), np.arange(n))
        pool = fed.dataset.x_train[fed.public_indices]
        np.testing.assert_allclose(pool, digits, atol=0.5 / 255 + 1e-7)
        pool_labels = fed.dataset.y_train[fed.public_indices]
        np.testing.assert_array_equal(pool_labels, (label == 8).astype(np.int64))
    assert shared_rows(a.dataset.x_train[:120], b.dataset.x_train[:160]) < 120  # other clients
    fa, fb = fitted_before_the_head(a), fitted_before_the_head(b)
    for key in fa:
        np.testing.assert_array_equal(fa[key], fb[key], err_msg=key)


TINY = tiny_compare(
    "tiny_public_source",
    model="rounds: 1, local_epochs: 2, extractor_data: public, public_source: test_share",
    evaluation="""
  checkpoints: [5, 12]
  shift_splits: [{name: noisy, kind: gaussian_noise, severity: 0.5}]""",
)


def test_compare_takes_the_test_share_pool() -> None:
    """Every training row is a sample id; the pool (24 of the 120 test rows) is the extractor's
    and no evaluation split holds one of its rows."""
    w = build_workload(parse_scenario(TINY), 4)
    pool = w.train.extractor_pool
    assert pool is not None and pool.n == 24 and w.train.n == 240
    assert w.splits["test"].y.size == 96 and w.splits["noisy"].y.size == 96
    assert shared_rows(pool.x, w.splits["test"].x) == 0
    assert shared_rows(pool.x, w.train.x) == 0
    assert any("of the test split" in note for note in w.notes)


def with_model(text: str, model: str) -> str:
    return text.replace("extractor_data: public, public_source: test_share", model)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("extractor_data: private, public_source: test_share", "applies to extractor_data"),
        ("extractor_data: dp, public_source: digits", "applies to extractor_data"),
        ("extractor_data: public, public_source: digits", "public pool for a digit source"),
        ("extractor_data: public, public_source: elsewhere", "train_share.*test_share.*digits"),
    ],
)
def test_a_public_source_that_does_not_apply_is_refused(model: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_scenario(with_model(TINY, model))
    assert "model.public_source" in str(caught.value)


def test_a_digits_pool_with_a_digits_shift_split_is_refused() -> None:
    text = MNIST.format(max_train=120).replace(
        "evaluation: {checkpoints: []}",
        "evaluation: {checkpoints: [], shift_splits: [{name: d, kind: digits}]}",
    )
    with pytest.raises(ConfigError, match="would evaluate its own pool"):
        parse_scenario(text)


def test_a_test_share_leaving_no_pool_is_refused() -> None:
    sc = parse_scenario(with_model(TINY, "extractor_data: public, public_source: test_share, "
                                   "public_fraction: 0.001"))  # fmt: skip
    with pytest.raises(ConfigError, match="leaves no pool"):
        load_dataset(sc)
