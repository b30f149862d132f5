"""Gradient and Hessian of the perturbed one-vs-rest objective against torch autograd."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.heads import planted_problem

from simulator.errors import InputError
from simulator.head.logistic import (
    ROW_BLOCK,
    ShardStatistics,
    StatisticsRequest,
    head_columns,
    objective_gradient,
    objective_hessian,
    objective_value,
    predict_classes,
    shard_statistics,
    signed_labels,
)


def torch_objective(X, Y, a, W, b, lam):
    s = Y * (X @ W)
    loss = (a[:, None] * torch.nn.functional.softplus(-s)).sum(0)
    return loss + 0.5 * lam * X.shape[0] * (W * W).sum(0) + (b * W).sum(0)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 40),
    d=st.integers(1, 8),
    k=st.integers(2, 4),
    seed=st.integers(0, 10_000),
)
def test_gradient_and_hessian_match_autograd(n: int, d: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    X, y = planted_problem(n, d, k, seed=seed)
    Y = signed_labels(y, k)
    cols = head_columns(k)
    a = rng.uniform(0.2, 3.0, size=n)
    W = rng.normal(size=(d, cols)) * 2
    b = rng.normal(size=(d, cols))
    lam = 0.01
    stats = shard_statistics(X, Y, a, StatisticsRequest(W, hessian=True))

    tX, tY, ta, tb = (torch.tensor(v) for v in (X, Y, a, b))
    tW = torch.tensor(W, requires_grad=True)
    f = torch_objective(tX, tY, ta, tW, tb, lam)
    (grad,) = torch.autograd.grad(f.sum(), tW)
    np.testing.assert_allclose(
        objective_value(stats, W, b, lam=lam), f.detach().numpy(), rtol=1e-10
    )
    np.testing.assert_allclose(objective_gradient(stats, W, b, lam=lam), grad.numpy(), atol=1e-10)
    H = objective_hessian(stats, lam=lam)
    for c in range(cols):

        def fc(w, c=c):
            Wc = tW.detach().clone()
            Wc[:, c] = w
            return torch_objective(tX, tY, ta, Wc, tb, lam)[c]

        Hc = torch.autograd.functional.hessian(fc, torch.tensor(W[:, c]))
        np.testing.assert_allclose(H[c], Hc.numpy(), atol=1e-9)


def test_shard_sums_equal_full_data() -> None:
    X, y = planted_problem(120, 6, 3, seed=3)
    Y = signed_labels(y, 3)
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, size=120)
    W = rng.normal(size=(6, 3))
    full = shard_statistics(X, Y, a, StatisticsRequest(W, hessian=True, gram=True))
    parts = np.array_split(rng.permutation(120), 4)
    total = ShardStatistics.zeros(6, 3, hessian=True, gram=True)
    for p in parts:
        total = total + shard_statistics(
            X[p], Y[p], a[p], StatisticsRequest(W, hessian=True, gram=True)
        )
    assert total.count == full.count
    for name in ("loss", "gradient", "hessian", "gram"):
        np.testing.assert_allclose(
            getattr(total, name), getattr(full, name), rtol=1e-12, atol=1e-12
        )


def test_negative_weight_changes_give_signed_hessians() -> None:
    X, y = planted_problem(30, 4, 2, seed=1)
    Y = signed_labels(y, 2)
    W = np.ones((4, 1))
    a = np.linspace(-1.0, 1.0, 30)
    H = shard_statistics(X, Y, a, StatisticsRequest(W, hessian=True)).hessian
    p = 1 / (1 + np.exp(-Y[:, 0] * (X @ W[:, 0])))
    ref = (X * (a * p * (1 - p))[:, None]).T @ X
    np.testing.assert_allclose(H[0], ref, atol=1e-12)


def test_bad_shapes_and_labels() -> None:
    with pytest.raises(InputError):
        signed_labels(np.array([0, 3]), 3)
    X, y = planted_problem(10, 3, 2, seed=0)
    with pytest.raises(InputError):
        shard_statistics(X, signed_labels(y, 2), np.ones(9), StatisticsRequest(np.zeros((3, 1))))


def test_binary_labels_are_one_column() -> None:
    y = np.array([0, 1, 1, 0])
    np.testing.assert_array_equal(signed_labels(y, 2), [[-1.0], [1.0], [1.0], [-1.0]])
    assert head_columns(2) == 1 and head_columns(3) == 3
    np.testing.assert_array_equal(predict_classes(np.array([[-0.5], [2.0]])), [0, 1])
    np.testing.assert_array_equal(predict_classes(np.array([[0.1, 0.3, -1.0]])), [1])
    with pytest.raises(InputError):
        head_columns(1)


def test_gram_matrix_with_pending_rows_equals_the_downdated_matrix() -> None:
    """The lazy Gram matrix's quadratic form and matrix equal the explicit downdates."""
    from simulator.head.gram import GramMatrix

    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 6))
    gram = GramMatrix(X.T @ X, max_pending=5)
    keep = np.ones(40, dtype=bool)
    for chunk in ([0], [1, 2], [3], [4, 5, 6], [7]):  # folds once past 5 pending rows
        gram.downdate(X[chunk])
        keep[chunk] = False
        exact = X[keep].T @ X[keep]
        U = rng.normal(size=(6, 3))
        np.testing.assert_allclose(gram.quadratic(U), np.einsum("ik,ik->k", U, exact @ U))
    np.testing.assert_allclose(gram.matrix(), exact)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 60),
    d=st.integers(1, 9),
    k=st.integers(1, 4),
    block=st.integers(1, 25),
    seed=st.integers(0, 10_000),
)
def test_blocked_syrk_build_equals_the_per_class_products(
    n: int, d: int, k: int, block: int, seed: int
) -> None:
    """The Hessian build (one pass, blocks of rows, rank-k updates, dead rows skipped) equals
    the old per-class ``X^T diag(c_k) X`` on numpy and on torch (CPU)."""
    from simulator.head.backend import TorchBackend, weighted_grams_numpy

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    C = rng.uniform(0.0, 0.25, size=(n, k))
    C[rng.random(n) < 0.3] = 0.0  # deleted rows: zero curvature in every class
    old = np.stack([X.T @ (X * C[:, c, None]) for c in range(k)])
    scale = max(1.0, float(np.abs(old).max()))
    for H in (
        weighted_grams_numpy(X, C, block=block),
        weighted_grams_numpy(X, C),
        TorchBackend("cpu").weighted_grams(torch.tensor(X), torch.tensor(C)).numpy(),
    ):
        assert H.shape == (k, d, d)
        np.testing.assert_allclose(H, old, rtol=0, atol=1e-13 * scale)
        np.testing.assert_array_equal(H, np.transpose(H, (0, 2, 1)))  # exactly symmetric


def test_hessian_of_shard_statistics_is_the_blocked_build() -> None:
    """``shard_statistics`` builds the Hessians with the blocked syrk for weights >= 0 (with
    zeros: deleted rows) and the general product for weight changes of either sign."""
    X, y = planted_problem(50, 5, 3, seed=1)
    Y = signed_labels(y, 3)
    rng = np.random.default_rng(1)
    W = rng.normal(size=(5, 3))
    for a in (rng.uniform(0.0, 2.0, size=50) * (rng.random(50) < 0.7), rng.normal(size=50)):
        p = 1.0 / (1.0 + np.exp(-(Y * (X @ W))))
        curv = a[:, None] * p * (1.0 - p)
        expected = np.stack([X.T @ (X * curv[:, c, None]) for c in range(3)])
        H = shard_statistics(X, Y, a, StatisticsRequest(W, hessian=True)).hessian
        np.testing.assert_allclose(H, expected, rtol=1e-12, atol=1e-14)


def test_fused_loss_gradient_pass_equals_the_two_products() -> None:
    """The exact pass block by block (``logistic._loss_gradient_by_blocks``) against the
    plain two products over all rows, at margins of both signs and weights of every size."""
    rng = np.random.default_rng(7)
    n, d, k = 3 * ROW_BLOCK + 17, 30, 4
    X = rng.normal(size=(n, d))
    Y = np.where(rng.random((n, k)) < 0.3, 1.0, -1.0)
    a = rng.uniform(0.0, 30.0, size=n)
    W = rng.normal(size=(d, k)) * 2.0
    fused = shard_statistics(X, Y, a, StatisticsRequest(W))
    margins = Y * (X @ W)
    loss = a @ np.logaddexp(0.0, -margins)
    grad = X.T @ (-(Y / (1.0 + np.exp(margins))) * a[:, None])
    np.testing.assert_allclose(fused.loss, loss, rtol=1e-12)
    np.testing.assert_allclose(fused.gradient, grad, rtol=1e-10, atol=1e-10)
    assert fused.count == n
