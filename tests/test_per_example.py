"""Per-example epsilon lower bounds (``simulator/metrics/per_example.py``).

Against mechanisms whose epsilon is known: the Laplace mechanism (exactly epsilon-DP) must
never be bounded above its epsilon and should come close with many draws; a mechanism that
forgets nothing must be caught, and a certified removal must stay below its certificate.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import InputError
from simulator.head import HeadConfig
from simulator.metrics.per_example import (
    clopper_pearson_upper,
    epsilon_lower_bounds,
    head_removal_audit,
)


def test_the_laplace_mechanism_is_bounded_below_its_epsilon_and_close_to_it() -> None:
    eps = 1.0  # Laplace(mu, 1/eps) at mu = 0 and 1: exactly eps-DP, delta 0
    rng = np.random.default_rng(0)
    unlearned = rng.laplace(1.0, 1.0 / eps, size=(3000, 20))
    retrained = rng.laplace(0.0, 1.0 / eps, size=(3000, 20))
    bounds = epsilon_lower_bounds(unlearned, retrained, delta=0.0)
    assert np.all(bounds <= eps)  # sound: empirical rates in place of the intervals are not
    assert np.all(bounds >= 0.6 * eps)  # and informative at 3,000 draws


def test_identical_sides_give_nothing_and_perfect_separation_the_intervals_limit() -> None:
    rng = np.random.default_rng(1)
    same = epsilon_lower_bounds(rng.normal(size=(32, 8)), rng.normal(size=(32, 8)), delta=1e-5)
    assert np.all(same == 0.0)
    apart = epsilon_lower_bounds(
        rng.normal(size=(32, 3)) + 100.0, rng.normal(size=(32, 3)), delta=1e-5
    )
    level = 0.05 / (2 * 2 * 64)  # Bonferroni: 64 thresholds, two directions, two rates
    upper = 1.0 - level ** (1.0 / 32)  # Clopper-Pearson for 0 of 32
    np.testing.assert_allclose(apart, np.log((1.0 - 1e-5 - upper) / upper), rtol=1e-9)


def test_clopper_pearson_bounds_the_rate_from_above() -> None:
    bounds = clopper_pearson_upper(np.array([0, 5, 20]), 20, 0.025)
    assert bounds[2] == 1.0 and bounds[0] > 0.0
    assert 5 / 20 < bounds[1] < 0.6


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(InputError):
        epsilon_lower_bounds(np.zeros((4, 3)), np.zeros((4, 2)), delta=0.0)
    with pytest.raises(InputError):
        epsilon_lower_bounds(np.zeros((4, 3)), np.zeros((4, 3)), delta=0.0, confidence=1.0)


def test_a_head_that_forgets_nothing_is_caught_and_a_certified_removal_is_not() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = (X[:, 0] + 0.3 * rng.normal(size=200) > 0).astype(np.int64)
    cfg = HeadConfig(lam=1e-2, sigma=0.1, epsilon=1.0, delta=1e-4)
    common = {"config": cfg, "num_classes": 2, "draws": 64, "seed": 1}
    leaky = head_removal_audit(X, y, np.arange(5), remove=False, **common)
    certified = head_removal_audit(X, y, np.arange(5), **common)
    assert leaky.epsilon_lower.max() > 1.0  # a member keeps its trace: seen at 64 draws
    assert certified.retrains == 0  # the Newton step was released, not a retrain
    assert np.all(certified.epsilon_lower <= certified.certified_epsilon)
    assert certified.unlearned.shape == certified.retrained.shape == (64, 5)
