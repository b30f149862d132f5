"""Client partitions: disjoint, covering, deterministic, and skewed as advertised."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simulator.data import partition
from simulator.data.partition import first_principal_scores
from simulator.errors import ConfigError
from simulator.scenario import PartitionSpec


def spec(kind: str, num_clients: int, alpha: float = 0.5) -> PartitionSpec:
    return PartitionSpec.model_validate({"kind": kind, "num_clients": num_clients, "alpha": alpha})


def label_tv(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean total-variation distance between each client's label mix and the global one."""
    k = int(labels.max()) + 1
    glob = np.bincount(labels, minlength=k) / len(labels)
    tvs = [0.5 * np.abs(np.bincount(labels[p], minlength=k) / len(p) - glob).sum() for p in parts]
    return float(np.mean(tvs))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(8, 300),
    n_classes=st.integers(1, 6),
    num_clients=st.integers(1, 8),
    kind=st.sampled_from(["iid", "dirichlet", "covariate", "quantity"]),
    alpha=st.floats(0.05, 10.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_disjoint_cover_sorted_deterministic(
    n: int, n_classes: int, num_clients: int, kind: str, alpha: float, seed: int
) -> None:
    data_rng = np.random.default_rng(seed)
    labels = data_rng.integers(0, n_classes, size=n).astype(np.int64)
    features = data_rng.normal(size=(n, 3))
    minimum = 0 if kind == "dirichlet" else 1

    def run() -> list[np.ndarray]:
        return partition(
            labels, spec(kind, num_clients, alpha), rng=np.random.default_rng(seed),
            features=features, min_per_client=minimum,
        )  # fmt: skip

    parts = run()
    assert len(parts) == num_clients
    joined = np.concatenate(parts)
    assert np.array_equal(np.sort(joined), np.arange(n))  # disjoint and covering
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    assert all(len(p) >= minimum for p in parts)
    for a, b in zip(parts, run(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_dirichlet_small_alpha_is_more_skewed_than_iid() -> None:
    labels = np.repeat(np.arange(10), 200).astype(np.int64)
    iid = partition(labels, spec("iid", 10), rng=np.random.default_rng(0))
    skew = partition(labels, spec("dirichlet", 10, 0.1), rng=np.random.default_rng(0))
    mild = partition(labels, spec("dirichlet", 10, 1.0), rng=np.random.default_rng(0))
    assert label_tv(labels, iid) < 0.1
    assert label_tv(labels, skew) > 0.5
    assert label_tv(labels, iid) < label_tv(labels, mild) < label_tv(labels, skew)


def test_covariate_groups_follow_the_first_principal_component() -> None:
    rng = np.random.default_rng(1)
    features = rng.normal(size=(600, 4)) * np.array([5.0, 1.0, 1.0, 1.0])
    labels = np.zeros(600, dtype=np.int64)
    parts = partition(labels, spec("covariate", 4), features=features, rng=rng)
    score = first_principal_scores(features)
    means = [score[p].mean() for p in parts]
    assert means == sorted(means) and means[-1] - means[0] > 5.0
    assert [len(p) for p in parts] == [150] * 4
    with pytest.raises(ConfigError, match="needs the training features"):
        partition(labels, spec("covariate", 4), rng=rng)


def test_quantity_skew_sizes_vary_and_respect_minimum() -> None:
    labels = np.zeros(1000, dtype=np.int64)
    parts = partition(
        labels, spec("quantity", 10, 0.3), min_per_client=20, rng=np.random.default_rng(2)
    )
    sizes = np.array([len(p) for p in parts])
    assert sizes.sum() == 1000 and sizes.min() >= 20
    assert sizes.max() > 3 * sizes.min()


def test_impossible_minimums_are_config_errors() -> None:
    labels = np.arange(10, dtype=np.int64) % 2
    with pytest.raises(ConfigError, match="needs 12 rows but there are only 10"):
        partition(labels, spec("iid", 4), min_per_client=3, rng=np.random.default_rng(0))
    many = np.repeat(np.arange(2), 20).astype(np.int64)
    with pytest.raises(ConfigError, match="raise alpha, lower min_per_client"):
        partition(many, spec("dirichlet", 8, 0.01), min_per_client=5, rng=np.random.default_rng(0))
    with pytest.raises(ValidationError, match="kind"):
        spec("random", 2)
