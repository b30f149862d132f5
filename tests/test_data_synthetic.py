"""The synthetic generator's planted structure is really there."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from sklearn.linear_model import LogisticRegression

from simulator.data import make_synthetic, synthetic_truth
from simulator.errors import ConfigError
from simulator.scenario import SyntheticSpec


def corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1])


@pytest.mark.parametrize("n_classes", [2, 3])
def test_causal_model_generalises_spurious_model_does_not(n_classes: int) -> None:
    spec = SyntheticSpec(n_classes=n_classes, n_train=3000, n_test=2000)
    ds = make_synthetic(spec, np.random.default_rng(11))
    truth = synthetic_truth(spec)
    assert ds.ood_x is not None and ds.ood_y is not None
    causal = list(truth.causal_columns)
    on_causal = LogisticRegression(max_iter=2000).fit(ds.x_train[:, causal], ds.y_train)
    iid = on_causal.score(ds.x_test[:, causal], ds.y_test)
    shifted = on_causal.score(ds.ood_x[:, causal], ds.ood_y)
    assert iid > 1.5 / n_classes  # the causal columns carry the label
    assert abs(iid - shifted) < 0.04  # ... and keep working under the shift
    on_all = LogisticRegression(max_iter=2000).fit(ds.x_train, ds.y_train)
    assert on_all.score(ds.x_test, ds.y_test) > iid  # the shortcut helps in distribution
    assert on_all.score(ds.ood_x, ds.ood_y) < shifted - 0.15  # ... and hurts under the shift


def test_spurious_correlation_flips_in_the_shifted_set() -> None:
    spec = SyntheticSpec(spurious_strength=0.9)
    ds = make_synthetic(spec, np.random.default_rng(2))
    s = synthetic_truth(spec).spurious_column
    assert ds.ood_x is not None and ds.ood_y is not None
    assert corr(ds.x_train[:, s], ds.y_train) > 0.6
    assert corr(ds.x_test[:, s], ds.y_test) > 0.6
    assert corr(ds.ood_x[:, s], ds.ood_y) < -0.6
    # explicit shifted strength 0.5 removes the correlation instead of flipping it
    half = SyntheticSpec(spurious_strength=0.9, shifted_strength=0.5, n_test=4000)
    ds2 = make_synthetic(half, np.random.default_rng(2))
    assert ds2.ood_x is not None and ds2.ood_y is not None
    assert abs(corr(ds2.ood_x[:, s], ds2.ood_y)) < 0.06


def test_nuisance_block_has_the_planted_correlation() -> None:
    spec = SyntheticSpec(n_train=20000, correlation=0.5)
    ds = make_synthetic(spec, np.random.default_rng(4))
    truth = synthetic_truth(spec)
    cols = list(truth.causal_columns) + list(truth.nuisance_columns)
    empirical = np.corrcoef(ds.x_train[:, cols], rowvar=False)
    np.testing.assert_allclose(empirical, truth.covariance, atol=0.03)
    # nuisance columns are not in the label mechanism: given the causal ones they add nothing
    causal = list(truth.causal_columns)
    with_nuisance = causal + list(truth.nuisance_columns)
    a = LogisticRegression(max_iter=2000).fit(ds.x_train[:, causal], ds.y_train)
    b = LogisticRegression(max_iter=2000).fit(ds.x_train[:, with_nuisance], ds.y_train)
    assert (
        abs(
            a.score(ds.x_test[:, causal], ds.y_test)
            - b.score(ds.x_test[:, with_nuisance], ds.y_test)
        )
        < 0.02
    )


def test_deterministic_and_seed_dependent() -> None:
    spec = SyntheticSpec(n_train=100, n_test=50)
    a = make_synthetic(spec, np.random.default_rng(9))
    b = make_synthetic(spec, np.random.default_rng(9))
    c = make_synthetic(spec, np.random.default_rng(10))
    for field in ("x_train", "y_train", "x_test", "y_test", "ood_x", "ood_y"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.x_train, c.x_train)


@pytest.mark.parametrize(
    ("kwargs", "location"),
    [
        ({"n_features": 5, "n_causal": 5}, "n_causal"),
        ({"n_classes": 1}, "n_classes"),
        ({"spurious_strength": 1.5}, "spurious_strength"),
        ({"correlation": 1.0}, "correlation"),
        ({"correlation": -0.5, "n_features": 20}, "correlation"),
        ({"noise": -1.0}, "noise"),
        ({"noise": float("nan")}, "noise"),
        ({"n_shifted": 0}, "n_shifted"),
    ],
)
def test_invalid_specs(kwargs: dict[str, float], location: str) -> None:
    with pytest.raises(ValidationError, match=location):
        SyntheticSpec.model_validate(kwargs)


def test_fewer_rows_than_classes_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match="n_train >= n_classes"):
        make_synthetic(SyntheticSpec(n_train=3, n_classes=4), np.random.default_rng(0))
