"""The warm retrain against the cold one: same unique minimiser, same tolerance, same ``b``."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.heads import planted_problem

from simulator.head import (
    CertifiedHead,
    HeadConfig,
    LocalHeadData,
    train_head,
    train_head_from_zero,
)
from simulator.head.logistic import StatisticsRequest, objective_hessian


def heads(n, d, k, seed, **cfg):
    """A warm-retraining head and a cold one whose trainings from zero are damped Newton (the
    reference: no preconditioned iteration anywhere in it)."""
    X, y = planted_problem(n, d, k, seed=seed)
    out = []
    for mode, solver in (("warm", "lbfgs"), ("cold", "newton")):
        config = HeadConfig(retrain=mode, cold_solver=solver, **cfg)
        out.append(CertifiedHead(LocalHeadData(X, y, k), config, rng=np.random.default_rng(seed)))
    return X, y, out


#: small problems: rows, features, classes, seed and regularisation
PROBLEMS = {
    "n": st.integers(60, 250),
    "d": st.integers(2, 12),
    "k": st.integers(2, 4),
    "seed": st.integers(0, 1000),
    "lam": st.sampled_from([1e-3, 1e-2, 0.1]),
}


@settings(max_examples=15, deadline=None)
@given(**PROBLEMS)
def test_warm_retrain_reaches_the_cold_minimiser(n, d, k, seed, lam) -> None:
    tol = 1e-8
    X, y, (warm, cold) = heads(
        n, d, k, seed, lam=lam, tol=tol, sigma=1.0, epsilon=1e-6, accounting="guo"
    )
    ids = np.random.default_rng(seed).choice(n, size=12, replace=False).tolist()
    reports_w = [warm.remove([i]) for i in ids]
    reports_c = [cold.remove([i]) for i in ids]
    # the same b stream and the same decisions (a budget below the training residual: every
    # removal retrains; at 1e-3, seed 108 charged 0.000227 of 0.000228 warm and retrained cold)
    assert [r.retrained for r in reports_w] == [r.retrained for r in reports_c]
    assert any(r.retrained for r in reports_w)
    warm.retrain()  # end on a retrain whatever the last removal did
    cold.retrain()
    np.testing.assert_array_equal(warm.b, cold.b)
    m = warm.data.retained_count
    assert np.all(warm.gradient_norms() <= tol * m)
    assert np.all(cold.gradient_norms() <= tol * m)
    # strong convexity (modulus lam m): each is within tol / lam of the minimiser per class
    gap = np.linalg.norm(warm.W - cold.W, axis=0)
    assert np.all(gap <= 2 * tol / lam + 1e-12)
    # the exact Hessian at the reference point seeds the removal machinery
    # the reference point is the converged iterate before the final Newton polish
    assert np.all(np.linalg.norm(warm._W_ref - warm.W, axis=0) <= 2 * tol / lam + 1e-12)
    stats = warm.data.statistics(StatisticsRequest(warm._W_ref, hessian=True))
    np.testing.assert_allclose(
        warm._solver.hessians, objective_hessian(stats, lam=lam), rtol=1e-10, atol=1e-10
    )
    # the solver reuses the polish's factors: they are the Cholesky factors of its matrices
    H = warm._solver.hessians
    for c, L in enumerate(warm._solver._factors):
        np.testing.assert_allclose(L @ L.T, H[c], rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(L, np.linalg.cholesky(H[c]), rtol=1e-10, atol=1e-12)
    keep = warm.data.retained_ids
    np.testing.assert_allclose(warm._gram.matrix(), X[keep].T @ X[keep], atol=1e-10)


def test_retrain_report_counts_iterations() -> None:
    # no correction steps: the budget must force the retrain this test counts
    X, y, (warm, cold) = heads(400, 10, 3, 7, lam=1e-2, sigma=1.0, epsilon=1e-3, correction_steps=0)
    rw, rc = warm.remove([3]), cold.remove([3])
    assert rw.retrained and rc.retrained and rw.retrain_reason == "budget"
    # warm: a few preconditioned gradient iterations, no Newton fallback on this problem
    assert 1 <= rw.retrain_iterations <= 10
    assert rw.retrain_newton_iterations == 1  # the final build's polishing step only
    assert rw.cumulative < 1e-9  # the polish: as exact as the cold Newton run
    assert rc.retrain_newton_iterations == rc.retrain_iterations >= 2  # damped Newton
    # and against a cold train_head on the retained rows with the same b
    keep = warm.data.retained_ids
    ref = train_head(LocalHeadData(X[keep], y[keep], 3), warm.b, lam=1e-2, tol=1e-8)
    assert np.linalg.norm(warm.W - ref.W) <= 2 * 1e-8 / 1e-2 * np.sqrt(3)


def test_warm_retrain_falls_back_to_newton_with_a_poor_preconditioner() -> None:
    from simulator.head.training import WarmStart, retrain_head

    X, y = planted_problem(300, 8, 3, seed=2)
    data = LocalHeadData(X, y, 3)
    b = np.random.default_rng(0).normal(size=(8, 3))
    # the identity scaled far off the Hessian: the preconditioned step barely helps
    res = retrain_head(
        data, b, lam=1e-3, start=WarmStart(np.zeros((8, 3)), lambda g: g / (1e4 * 300))
    )
    ref = train_head(data, b, lam=1e-3)
    assert res.newton_iterations >= 2  # a fallback besides the final polish
    assert res.hessian_builds == res.newton_iterations
    assert np.all(res.gradient_norms <= 1e-8 * 300)
    assert np.all(np.linalg.norm(res.W - ref.W, axis=0) <= 2 * 1e-8 / 1e-3)


def test_explicit_retrain_method_and_retrain_after_delete() -> None:
    X, y, (warm, cold) = heads(200, 6, 3, 4, lam=1e-2, sigma=1.0)
    rw = warm.remove([1, 2, 3], retrain=True)
    rc = cold.remove([1, 2, 3], retrain=True)
    assert rw.retrained and rc.retrained
    assert np.all(np.linalg.norm(warm.W - cold.W, axis=0) <= 2e-6)
    warm.retrain()
    cold.retrain()
    assert np.all(np.linalg.norm(warm.W - cold.W, axis=0) <= 2e-6)


def test_retrain_setting_is_validated() -> None:
    with pytest.raises(Exception, match="warm or cold"):
        dataclasses.replace(HeadConfig(), retrain="hot")  # type: ignore[arg-type]


@settings(max_examples=15, deadline=None)
@given(**PROBLEMS, weighted=st.booleans())
def test_training_from_zero_reaches_newtons_minimiser(n, d, k, seed, lam, weighted) -> None:
    """L-BFGS from zero preconditioned by the Hessian at zero against damped Newton: the same
    minimiser to the same tolerance, and what it hands the removal machinery is exact."""
    tol = 1e-8
    X, y = planted_problem(n, d, k, seed=seed)
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.2, 3.0, size=n) if weighted else None
    data = LocalHeadData(X, y, k, weights=weights)
    b = rng.normal(size=(d, data.columns))
    fast = train_head_from_zero(data, b, lam=lam, tol=tol)
    ref = train_head(data, b, lam=lam, tol=tol)
    assert np.all(fast.gradient_norms <= tol * n)
    assert np.all(np.linalg.norm(fast.W - ref.W, axis=0) <= 2 * tol / lam + 1e-12)
    assert fast.hessian_builds == fast.newton_iterations == 1  # the polish only
    assert fast.reference is not None and fast.factors is not None and fast.gram is not None
    stats = data.statistics(StatisticsRequest(fast.reference, hessian=True))
    np.testing.assert_allclose(
        fast.hessian, objective_hessian(stats, lam=lam), rtol=1e-10, atol=1e-10
    )
    for c, L in enumerate(fast.factors):
        np.testing.assert_allclose(L @ L.T, fast.hessian[c], rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(fast.gram, X.T @ X, atol=1e-10)


def test_the_hessian_at_zero_is_every_classs() -> None:
    """The preconditioner's premise: at W = 0 every class has the Hessian of column 0."""
    X, y = planted_problem(200, 6, 4, seed=3)
    a = np.random.default_rng(3).uniform(0.5, 2.0, size=200)
    data = LocalHeadData(X, y, 4, weights=a)
    zeros = np.zeros((6, 4))
    every = data.statistics(StatisticsRequest(zeros, hessian=True)).hessian
    first = data.statistics(StatisticsRequest(zeros, hessian=True, columns=(0,))).hessian
    assert every is not None and first is not None and first.shape == (1, 6, 6)
    for c in range(4):
        np.testing.assert_allclose(every[c], first[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(first[0], X.T @ (X * a[:, None]) / 4, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
def test_initial_training_by_either_solver_gives_the_same_decisions(solver) -> None:
    X, y = planted_problem(300, 8, 3, seed=11)
    config = HeadConfig(cold_solver=solver, lam=1e-2, sigma=1.0, epsilon=0.5)
    head = CertifiedHead(LocalHeadData(X, y, 3), config, rng=np.random.default_rng(11))
    ref = train_head(LocalHeadData(X, y, 3), head.b, lam=1e-2, tol=config.tol)
    assert np.all(np.linalg.norm(head.W - ref.W, axis=0) <= 2 * config.tol / 1e-2)
    expected = 1 if solver == "lbfgs" else head.last_fit_iterations
    assert head.last_fit_newton_iterations == expected
    reports = [head.remove([i]) for i in range(10)]
    assert not any(r.retrained for r in reports)  # the budget holds the single removals
    keep = head.data.retained_ids
    exact = train_head(LocalHeadData(X[keep], y[keep], 3), head.b, lam=1e-2, tol=1e-10)
    # the certified head stays where the residual budget says: within eps' / (lam m)
    m = keep.size
    assert np.linalg.norm(head.W - exact.W) <= head.budget / (1e-2 * m) + 1e-8


def test_cold_solver_setting_is_validated() -> None:
    with pytest.raises(Exception, match="lbfgs or newton"):
        dataclasses.replace(HeadConfig(), cold_solver="sgd")  # type: ignore[arg-type]
