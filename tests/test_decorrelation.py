"""Tests for simulator.features.decorrelation (DecoRemoval section 3.2 sample weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import ConfigError, InputError
from simulator.features.decorrelation import (
    BlockDependence,
    DecorrelationConfig,
    class_mass,
    fit_weights,
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


def slow_paper_dependence(U: np.ndarray, w: np.ndarray, q: int) -> float:
    """sum_{a<b} ||Sigma_hat_{ab;w}||_F^2 with the paper's weighted partial cross-covariance
    (decoremoval.tex Sec. 3.2): 1/(n-1) sum_i (w_i u_i - mean_j w_j u_j)(w_i v_i - ...)^T."""
    n, P = U.shape
    total = 0.0
    for a in range(P // q):
        for b in range(a + 1, P // q):
            for i in range(a * q, (a + 1) * q):
                for j in range(b * q, (b + 1) * q):
                    ma = sum(w[s] * U[s, i] for s in range(n)) / n
                    mb = sum(w[s] * U[s, j] for s in range(n)) / n
                    cov = sum((w[s] * U[s, i] - ma) * (w[s] * U[s, j] - mb) for s in range(n))
                    total += (cov / (n - 1)) ** 2
    return total


def slow_dependence(U: np.ndarray, w: np.ndarray, q: int) -> float:
    """sum_{a<b} ||Cov_w(U_a, U_b)||_F^2 with StableNet's weighted covariance, entry by entry."""
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


def torch_dependence(U: torch.Tensor, w: torch.Tensor, q: int, objective: str) -> torch.Tensor:
    n, P = U.shape
    total = torch.zeros((), dtype=torch.float64)
    for a in range(P // q):
        A = U[:, a * q : (a + 1) * q]
        for b in range(a + 1, P // q):
            B = U[:, b * q : (b + 1) * q]
            if objective == "stablenet":
                cov = (A * w[:, None]).T @ B / n - torch.outer(A.T @ w / n, B.T @ w / n)
            else:
                Va, Vb = A * w[:, None], B * w[:, None]
                cov = (Va - Va.mean(0)).T @ (Vb - Vb.mean(0)) / (n - 1)
            total = total + (cov**2).sum()
    return total


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 7),
    k=st.integers(2, 4),
    q=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_objectives_equal_their_definitions(n: int, k: int, q: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n, k * q))
    w = rng.uniform(0.1, 2.0, size=n)
    w *= n / w.sum()
    ours = BlockDependence(U, w, block=q, objective="stablenet").value()
    assert ours == pytest.approx(slow_dependence(U, w, q), rel=1e-9, abs=1e-14)
    ours = BlockDependence(U, w, block=q, objective="paper").value()
    assert ours == pytest.approx(slow_paper_dependence(U, w, q), rel=1e-9, abs=1e-14)
    labels = np.arange(n) % 2
    per_class = sum(
        slow_paper_dependence(U[labels == c], w[labels == c], q) for c in (0, 1) if n > 3
    )
    if n > 3:  # every class has at least 2 rows
        ours = BlockDependence(U, w, block=q, objective="class_conditional", labels=labels).value()
        assert ours == pytest.approx(per_class, rel=1e-9, abs=1e-14)


@pytest.mark.parametrize("objective", ["stablenet", "paper"])
@pytest.mark.parametrize(
    ("n", "k", "q", "sum_to_n"), [(40, 5, 1, True), (30, 4, 3, True), (25, 3, 2, False)]
)
def test_gradient_matches_torch_autograd(
    n: int, k: int, q: int, sum_to_n: bool, objective: str
) -> None:
    rng = np.random.default_rng(n + k + q)
    U = np.sqrt(2) * np.cos(rng.normal(size=(n, k * q)) + rng.uniform(0, 6.3, size=k * q))
    w = rng.uniform(0.2, 3.0, size=n)
    if sum_to_n:
        w *= n / w.sum()
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    value = torch_dependence(torch.tensor(U, dtype=torch.float64), wt, q, objective)
    (grad,) = torch.autograd.grad(value, wt)
    ours = BlockDependence(U, w, block=q, objective=objective).value()  # type: ignore[arg-type]
    assert ours == pytest.approx(value.item(), rel=1e-12)
    np.testing.assert_allclose(
        BlockDependence(U, w, block=q, objective=objective).gradient(),  # type: ignore[arg-type]
        grad.numpy(),
        rtol=1e-9,
        atol=1e-14,
    )


def test_class_conditional_gradient_is_the_per_class_paper_gradient() -> None:
    rng = np.random.default_rng(3)
    U = rng.normal(size=(30, 4))
    w = rng.uniform(0.5, 1.5, size=30)
    labels = np.repeat([0, 1, 2], 10)
    grad = BlockDependence(U, w, block=1, objective="class_conditional", labels=labels).gradient()
    for c in range(3):
        rows = labels == c
        np.testing.assert_allclose(
            grad[rows], BlockDependence(U[rows], w[rows], block=1, objective="paper").gradient()
        )


@pytest.mark.parametrize("objective", ["stablenet", "paper"])
def test_fit_lowers_objective_on_planted_data(objective: str) -> None:
    Z, k = planted(1500, 6, 0.3, seed=0)
    cfg = DecorrelationConfig(objective=objective)  # type: ignore[arg-type]
    res = fit_weights(Z, config=cfg, rng=np.random.default_rng(1))
    w = res.weights
    assert res.objective_final < 0.2 * res.objective_initial and res.objective == objective
    assert np.all(w > 0) and w.sum() == pytest.approx(1500, rel=1e-10)
    assert w[:k].mean() < 0.97 < 1.0 < w[k:].mean()  # the planted rows are down-weighted
    assert res.spread.effective_sample_size_ratio < 0.99  # the weights really move
    assert res.steps == 100 and res.seconds >= 0
    lift = FourierLift.draw(6, features=64, functions=1, rng=np.random.default_rng(1))
    U = lift.apply(Z)
    assert res.objective_final == BlockDependence(U, w, block=1, objective=objective).value()  # type: ignore[arg-type]
    assert (
        res.objective_initial
        == BlockDependence(U, np.ones(1500), block=1, objective=objective).value()
    )  # type: ignore[arg-type]


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


def two_separated_classes(n: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Independent columns whose means all shift with the class: the dependence between
    columns is the between-class mean difference (as on MNIST 3 vs 8, issue 12)."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.5).astype(np.int64)
    return rng.normal(size=(n, 6)) + 2.5 * y[:, None], y


def test_stablenet_collapses_class_mass_where_the_paper_does_not() -> None:
    Z, y = two_separated_classes()
    share = float(np.mean(y == 1))
    masses = {}
    for objective in ("stablenet", "paper", "class_conditional"):
        cfg = DecorrelationConfig(objective=objective, features=None)  # type: ignore[arg-type]
        res = fit_weights(Z, config=cfg, rng=np.random.default_rng(1), labels=y)
        masses[objective] = res.spread.class_mass[1]
        assert res.objective_final < res.objective_initial
    assert masses["stablenet"] < 0.6 * share  # mass moved off class 1
    assert abs(masses["paper"] - share) < 0.1 * share
    assert masses["class_conditional"] == pytest.approx(share, abs=1e-12)  # fixed by design


def test_class_conditional_needs_labels_and_keeps_each_class_mass() -> None:
    Z, y = two_separated_classes(300, seed=2)
    cfg = DecorrelationConfig(objective="class_conditional", features=None)
    with pytest.raises(InputError, match="labels"):
        fit_weights(Z, config=cfg, rng=np.random.default_rng(0))
    res = fit_weights(Z, config=cfg, rng=np.random.default_rng(0), labels=y)
    for c in (0, 1):
        assert res.weights[y == c].sum() == pytest.approx(np.sum(y == c), rel=1e-10)
    assert class_mass(res.weights, y) == res.spread.class_mass


@pytest.mark.parametrize("objective", ["paper", "stablenet", "class_conditional"])
def test_a_fit_depends_on_the_rows_alone(objective: str) -> None:
    """Weights after deleting rows are a cold fit on what is left: fitting the full data first
    changes nothing (there is no warm start to carry information about deleted rows)."""
    Z, y = two_separated_classes(400, seed=4)
    cfg = DecorrelationConfig(objective=objective, steps=40, features=None)  # type: ignore[arg-type]
    keep = np.random.default_rng(0).random(400) > 0.2
    cold = fit_weights(Z[keep], config=cfg, rng=np.random.default_rng(11), labels=y[keep])
    fit_weights(Z, config=cfg, rng=np.random.default_rng(11), labels=y)  # history
    again = fit_weights(Z[keep], config=cfg, rng=np.random.default_rng(11), labels=y[keep])
    np.testing.assert_array_equal(cold.weights, again.weights)
    assert cold.steps == 40


def stablenet_reference(U: np.ndarray, block: int) -> np.ndarray:
    """StableNet-style settings: w = softmax(theta) sums to 1, 20 SGD steps (lr 1, momentum
    0.9) on lossb / 70 + sum w^2, lossb summing both orders of pairs (= 2 f(n w))."""
    n = U.shape[0]
    theta, buf = np.zeros(n), np.zeros(n)
    for t in range(20):
        w = np.exp(theta - theta.max())
        w /= w.sum()
        g = (
            (2.0 / 70.0)
            * n
            * BlockDependence(U, n * w, block=block, objective="stablenet").gradient()
        )
        g = g + 2.0 * w
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
    cfg = DecorrelationConfig(objective="stablenet")
    ours = fit_weights(Z, config=cfg, rng=np.random.default_rng(0)).spread
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
    for w in (np.ones(9), np.ones((10, 1)), np.r_[np.nan, np.ones(9)], -np.ones(10)):
        with pytest.raises(InputError):
            BlockDependence(Z, w, block=1, objective="paper").value()
    with pytest.raises(InputError):
        BlockDependence(
            Z, np.ones(10), block=3, objective="paper"
        ).value()  # 4 columns: not blocks of 3
    with pytest.raises(InputError):
        BlockDependence(
            Z, np.ones(10), block=4, objective="stablenet"
        ).value()  # one block has no pairs
    with pytest.raises(InputError):
        BlockDependence(Z, -np.ones(10), block=1, objective="stablenet").gradient()


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"features": 1}, "features"),
        ({"functions": 0}, "functions"),
        ({"functions": True}, "functions"),
        ({"steps": -1}, "steps"),
        ({"objective": "warm"}, "objective"),
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
