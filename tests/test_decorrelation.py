"""Tests for simulator.features.decorrelation (DecoRemoval section 3.2 sample weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import ConfigError, InputError
from simulator.features.decorrelation import (
    DecorrelationConfig,
    DecorrelationWeights,
    dependence,
    dependence_gradient,
    fit_weights,
    refit_weights,
    weight_spread,
)
from simulator.features.rff import FourierLift


def planted(n: int, p: int, frac: float, seed: int) -> tuple[np.ndarray, int]:
    """Independent N(0,1) columns, except that for the first ``frac * n`` rows columns 0 and 1
    are the same latent plus 10% noise (a correlation that reweighting can remove)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, p))
    k = int(frac * n)
    latent = rng.normal(size=k)
    Z[:k, 0] = latent + 0.1 * rng.normal(size=k)
    Z[:k, 1] = latent + 0.1 * rng.normal(size=k)
    return Z, k


def slow_dependence(U: np.ndarray, w: np.ndarray, q: int) -> float:
    """sum_{a<b} ||Cov_w(U_a, U_b)||_F^2 by the paper's definition, one entry at a time."""
    n, P = U.shape
    total = 0.0
    for a in range(P // q):
        for b in range(a + 1, P // q):
            for i in range(a * q, (a + 1) * q):
                for j in range(b * q, (b + 1) * q):
                    e_ab = sum(w[s] * U[s, i] * U[s, j] for s in range(n)) / n
                    e_a = sum(w[s] * U[s, i] for s in range(n)) / n
                    e_b = sum(w[s] * U[s, j] for s in range(n)) / n
                    total += (e_ab - e_a * e_b) ** 2
    return total


def torch_dependence(U: torch.Tensor, w: torch.Tensor, q: int) -> torch.Tensor:
    n, P = U.shape
    total = torch.zeros((), dtype=torch.float64)
    for a in range(P // q):
        A = U[:, a * q : (a + 1) * q]
        for b in range(a + 1, P // q):
            B = U[:, b * q : (b + 1) * q]
            cov = (A * w[:, None]).T @ B / n - torch.outer(A.T @ w / n, B.T @ w / n)
            total = total + (cov**2).sum()
    return total


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 7),
    k=st.integers(2, 4),
    q=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_objective_equals_double_loop(n: int, k: int, q: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n, k * q))
    w = rng.uniform(0.1, 2.0, size=n)
    w *= n / w.sum()
    assert dependence(U, w, block=q) == pytest.approx(slow_dependence(U, w, q), rel=1e-9, abs=1e-14)


@pytest.mark.parametrize(
    ("n", "k", "q", "sum_to_n"), [(40, 5, 1, True), (30, 4, 3, True), (25, 3, 2, False)]
)
def test_gradient_matches_torch_autograd(n: int, k: int, q: int, sum_to_n: bool) -> None:
    rng = np.random.default_rng(n + k + q)
    U = np.sqrt(2) * np.cos(rng.normal(size=(n, k * q)) + rng.uniform(0, 6.3, size=k * q))
    w = rng.uniform(0.2, 3.0, size=n)
    if sum_to_n:
        w *= n / w.sum()
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    value = torch_dependence(torch.tensor(U, dtype=torch.float64), wt, q)
    (grad,) = torch.autograd.grad(value, wt)
    assert dependence(U, w, block=q) == pytest.approx(value.item(), rel=1e-12)
    np.testing.assert_allclose(
        dependence_gradient(U, w, block=q), grad.numpy(), rtol=1e-9, atol=1e-14
    )


def test_fit_lowers_objective_on_planted_data() -> None:
    Z, k = planted(1500, 6, 0.3, seed=0)
    res = fit_weights(Z, config=DecorrelationConfig(), rng=np.random.default_rng(1))
    w = res.weights
    assert res.objective_final < 0.05 * res.objective_initial
    assert np.all(w > 0) and w.sum() == pytest.approx(1500, rel=1e-10)
    assert w[:k].mean() < 0.95 < 1.0 < w[k:].mean()  # the planted rows are down-weighted
    assert res.spread.effective_sample_size_ratio < 0.98  # the weights really move
    assert res.steps == 100 and res.seconds >= 0
    lift = FourierLift.draw(6, features=64, functions=1, rng=np.random.default_rng(1))
    U = lift.apply(Z)
    assert res.objective_final == dependence(U, w, block=1)
    assert res.objective_initial == dependence(U, np.ones(1500), block=1)


def test_fit_is_deterministic_given_the_seed() -> None:
    Z, _ = planted(400, 12, 0.3, seed=2)
    cfg = DecorrelationConfig(features=5, functions=2, steps=30)
    a = fit_weights(Z, config=cfg, rng=np.random.default_rng(7))
    b = fit_weights(Z, config=cfg, rng=np.random.default_rng(7))
    c = fit_weights(Z, config=cfg, rng=np.random.default_rng(8))
    np.testing.assert_array_equal(a.weights, b.weights)
    assert (a.objective_initial, a.objective_final, a.spread) == (
        b.objective_initial,
        b.objective_final,
        b.spread,
    )
    assert not np.array_equal(a.weights, c.weights)  # another seed: another column subset/lift


def test_max_weight_and_zero_steps() -> None:
    Z, _ = planted(500, 6, 0.3, seed=3)
    capped = fit_weights(
        Z, config=DecorrelationConfig(max_weight=1.5), rng=np.random.default_rng(0)
    )
    assert capped.weights.max() <= 1.5 + 1e-12 and capped.weights.min() > 0
    assert capped.weights.sum() == pytest.approx(500, rel=1e-10)
    assert capped.objective_final < capped.objective_initial
    none = fit_weights(Z, config=DecorrelationConfig(steps=0), rng=np.random.default_rng(0))
    np.testing.assert_allclose(none.weights, 1.0, rtol=1e-14)
    assert none.objective_final == pytest.approx(none.objective_initial, rel=1e-12)


def test_warm_start_after_deleting_rows() -> None:
    Z, _ = planted(800, 6, 0.3, seed=4)
    cfg = DecorrelationConfig(steps=60, warm_steps=15)
    learner = DecorrelationWeights()
    assert learner.latest is None
    first = learner.fit(Z, config=cfg, rng=np.random.default_rng(11))
    keep = np.ones(800, dtype=bool)
    keep[np.random.default_rng(0).choice(800, size=120, replace=False)] = False
    prev = first.weights[keep]
    expected_start = prev * (keep.sum() / prev.sum())
    zero = refit_weights(
        Z[keep], prev, config=DecorrelationConfig(warm_steps=0), rng=np.random.default_rng(11)
    )
    np.testing.assert_allclose(zero.weights, expected_start, rtol=1e-12)  # starts from prev.
    again = learner.refit(Z[keep], prev, config=cfg, rng=np.random.default_rng(11))
    assert learner.latest is again and again.steps == 15
    assert again.weights.shape == (680,) and np.all(again.weights > 0)
    assert again.weights.sum() == pytest.approx(680, rel=1e-10)
    assert again.objective_final < 0.2 * again.objective_initial  # vs uniform on retained data
    assert again.objective_final <= zero.objective_final  # the warm steps improve the start
    assert np.abs(again.weights - expected_start).max() > 1e-3  # and did move


def stablenet_reference(U: np.ndarray, block: int) -> np.ndarray:
    """StableNet-style settings: w = softmax(theta) sums to 1, 20 SGD steps (lr 1, momentum
    0.9) on lossb / 70 + sum w^2, lossb summing both orders of pairs (= 2 f(n w))."""
    n = U.shape[0]
    theta, buf = np.zeros(n), np.zeros(n)
    for t in range(20):
        w = np.exp(theta - theta.max())
        w /= w.sum()
        g = (2.0 / 70.0) * n * dependence_gradient(U, n * w, block=block) + 2.0 * w
        g_theta = w * (g - np.dot(w, g))
        buf = 0.9 * buf + g_theta if t else g_theta
        theta = theta - buf
    w = np.exp(theta - theta.max())
    out: np.ndarray = n * w / w.sum()
    return out


def test_stablenet_style_settings_hardly_move_but_ours_do() -> None:
    """The documented finding (docs/decorrelation.md): dL/dtheta is O(1/n), so plain SGD on the
    sum-to-1 softmax barely moves the weights; Adam's scale-free steps do."""
    Z, _ = planted(2000, 6, 0.3, seed=5)
    lift = FourierLift.draw(6, features=None, functions=1, rng=np.random.default_rng(0))
    U = lift.apply(Z)
    ref = weight_spread(stablenet_reference(U, 1))
    ours = fit_weights(Z, config=DecorrelationConfig(), rng=np.random.default_rng(0)).spread
    assert ref.max_abs_deviation < 0.01
    assert ours.max_abs_deviation > 0.5


def test_weight_spread_known_values() -> None:
    s = weight_spread(np.array([0.5, 1.5]))
    assert (s.std, s.min, s.max, s.max_abs_deviation) == (0.5, 0.5, 1.5, 0.5)
    assert s.effective_sample_size_ratio == pytest.approx(4.0 / (2 * 2.5))
    assert weight_spread(np.ones(5)).effective_sample_size_ratio == pytest.approx(1.0)


@pytest.mark.parametrize(
    "Z",
    [
        np.zeros(10),
        np.zeros((3, 4, 2)),
        np.zeros((1, 4)),
        np.zeros((10, 1)),
        np.full((5, 3), np.nan),
    ],
    ids=["1-D", "3-D", "one-row", "one-column", "nan"],
)
def test_fit_rejects_bad_features(Z: np.ndarray) -> None:
    with pytest.raises(InputError):
        fit_weights(Z, config=DecorrelationConfig(), rng=np.random.default_rng(0))


def test_bad_weights_and_blocks() -> None:
    Z = np.random.default_rng(0).normal(size=(10, 4))
    cfg = DecorrelationConfig()
    for prev in (np.ones(9), np.ones((10, 1)), np.r_[0.0, np.ones(9)], np.r_[np.nan, np.ones(9)]):
        with pytest.raises(InputError):
            refit_weights(Z, prev, config=cfg, rng=np.random.default_rng(0))
    with pytest.raises(InputError):
        dependence(Z, np.ones(10), block=3)  # 4 columns are not blocks of 3
    with pytest.raises(InputError):
        dependence(Z, np.ones(10), block=4)  # a single block has no pairs
    with pytest.raises(InputError):
        dependence_gradient(Z, -np.ones(10), block=1)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"features": 1}, "features"),
        ({"functions": 0}, "functions"),
        ({"functions": True}, "functions"),
        ({"steps": -1}, "steps"),
        ({"warm_steps": 2.5}, "warm_steps"),
        ({"lr": 0.0}, "lr"),
        ({"penalty": -0.1}, "penalty"),
        ({"max_weight": 0.5}, "max_weight"),
        ({"max_weight": float("inf")}, "max_weight"),
    ],
)
def test_config_validation(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        DecorrelationConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.location == f"decorrelation.{key}"


def test_already_independent_columns_need_no_steps() -> None:
    Z = np.column_stack([np.r_[0.0, 1.0, 0.0, 1.0], np.full(4, 0.3)])  # column 1 is constant
    res = fit_weights(Z, config=DecorrelationConfig(), rng=np.random.default_rng(0))
    assert res.objective_initial < 1e-30 and res.steps == 0
    np.testing.assert_array_equal(res.weights, np.ones(4))
