"""Bulk rows: large batches left out of the factor and solved by conjugate gradients.

Against the slow reference (the Hessians materialised and solved directly): the same matrices,
the same solutions, no factorisation until the bulk is folded; a restore is bit-exact.
"""

import pickle

import numpy as np
import pytest
import torch
from support.heads import planted_problem

from simulator.head import CertifiedHead, HeadConfig, HessianSolver, LocalHeadData

D, K = 24, 3


def spd(rng: np.random.Generator) -> np.ndarray:
    A = rng.normal(size=(K, D, D))
    return A @ A.transpose(0, 2, 1) + 40 * np.eye(D)


def batch(rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(size=(m, D)) * 0.4, rng.uniform(0.0, 0.25, size=(m, K))


def downdated(target: np.ndarray, rows: np.ndarray, coef: np.ndarray, mu: float) -> np.ndarray:
    return target - np.einsum("jk,ja,jb->kab", coef, rows, rows) - mu * np.eye(D)


def test_large_batches_stay_out_of_the_factor_and_solve_exactly() -> None:
    rng = np.random.default_rng(0)
    H = spd(rng)
    solver = HessianSolver(H, max_pending_rows=8)
    target = H.copy()
    for m in (3, 20, 1, 30):  # Woodbury rows, then a large batch takes them into the bulk
        rows, coef = batch(rng, m)
        solver.downdate_rows(rows, coef, diagonal=0.05)
        target = downdated(target, rows, coef, 0.05)
        g = rng.normal(size=(D, K))
        res = solver.solve(g, floor=1.0)
        for c in range(K):
            exact = np.linalg.solve(target[c], g[:, c])
            error = np.linalg.norm(res.step[:, c] - exact)  # <= ||H^-1|| residual
            assert error <= res.residual_norms[c] / np.linalg.eigvalsh(target[c])[0] * 1.01
        true = np.linalg.norm(g.T - np.einsum("kab,bk->ka", target, res.step), axis=1)
        np.testing.assert_allclose(res.residual_norms, true, rtol=1e-6, atol=1e-12)
        assert np.all(true <= solver.rtol * np.linalg.norm(g, axis=0) * (1 + 1e-9))
    assert solver.bulk_rows == 54  # 3 Woodbury rows + 20, then 1 + 30: all in the bulk
    assert solver.factorisations == 1  # never refactorised
    np.testing.assert_allclose(solver.hessians, target, atol=1e-10)


def test_a_solve_without_conjugate_gradients_is_the_factored_one_charged_truly() -> None:
    """``conjugate_gradients=False`` with bulk rows: the factored matrix alone (the bulk rows
    left out), whose true residual against the exact matrix is reported (the reference's, not
    the factored solve's zero); the full solve goes on to ``rtol``."""
    rng = np.random.default_rng(6)
    H = spd(rng)
    solver = HessianSolver(H, max_pending_rows=8)
    rows, coef = batch(rng, 30)
    solver.downdate_rows(rows, coef, diagonal=0.05)
    target = downdated(H, rows, coef, 0.05)
    g = rng.normal(size=(D, K))
    early = solver.solve(g, floor=1.0, conjugate_gradients=False)
    assert solver.bulk_rows == 30 and early.refinements == 0
    np.testing.assert_allclose(early.step, np.linalg.solve(H, g.T[:, :, None])[:, :, 0].T)
    true = np.linalg.norm(g.T - np.einsum("kab,bk->ka", target, early.step), axis=1)
    np.testing.assert_allclose(early.residual_norms, true, rtol=1e-9)
    assert np.all(true > solver.rtol * np.linalg.norm(g, axis=0))  # far from converged
    full = solver.solve(g, floor=1.0)
    assert full.refinements > 0 and np.all(full.residual_norms < true)


def test_bulk_past_its_limit_is_folded() -> None:
    rng = np.random.default_rng(1)
    H = spd(rng)
    solver = HessianSolver(H, max_pending_rows=8, max_bulk_rows=50)
    target = H.copy()
    for m in (30, 30):  # the second batch would make 60 > 50 bulk rows: everything folds
        rows, coef = batch(rng, m)
        solver.downdate_rows(rows, coef)
        target = downdated(target, rows, coef, 0.0)
        solver.solve(rng.normal(size=(D, K)))
    assert solver.bulk_rows == 0
    assert solver.factorisations == 2
    np.testing.assert_allclose(solver.hessians, target, atol=1e-10)


def test_slow_convergence_folds_the_bulk_at_the_next_batch() -> None:
    rng = np.random.default_rng(2)
    # a batch holding most of the curvature: the stale factor preconditions it poorly
    rows = rng.normal(size=(D, D))
    coef = np.full((D, K), 0.9)
    H = spd(rng) + np.einsum("jk,ja,jb->kab", coef, rows, rows)
    solver = HessianSolver(H, max_pending_rows=8, bulk_iterations=4)
    solver.downdate_rows(rows, coef)
    res = solver.solve(rng.normal(size=(D, K)))
    assert res.refinements > 2  # more than half of bulk_iterations
    assert solver.bulk_rows == D
    rows2, coef2 = batch(rng, 20)
    solver.downdate_rows(rows2, coef2)
    assert solver.bulk_rows == 0  # folded instead of joining the bulk
    expected = downdated(downdated(H, rows, coef, 0.0), rows2, coef2, 0.0)
    np.testing.assert_allclose(solver.hessians, expected, atol=1e-8)


def test_restore_with_bulk_rows_is_bit_exact() -> None:
    rng = np.random.default_rng(3)
    solver = HessianSolver(spd(rng), max_pending_rows=8)
    for m in (2, 25):
        solver.downdate_rows(*batch(rng, m), diagonal=0.1)
    g = rng.normal(size=(D, K))
    twin = HessianSolver(spd(np.random.default_rng(99)), max_pending_rows=8)
    twin.load_state_dict(solver.state_dict())
    copied = pickle.loads(pickle.dumps(solver))
    rows, coef = batch(rng, 15)
    expected = solver.solve(g).step
    for other in (twin, copied):
        assert other.bulk_rows == 27
        np.testing.assert_array_equal(other.solve(g).step, expected)
        other.downdate_rows(rows, coef)
    solver.downdate_rows(rows, coef)
    np.testing.assert_array_equal(twin.solve(g).step, solver.solve(g).step)


@pytest.mark.parametrize("accounting", ["anchored", "exact"])
def test_certified_batches_with_bulk_rows_match_the_folded_head(accounting: str) -> None:
    """The same removals with bulk rows and with every batch folded: same heads, same charges."""
    X, y = planted_problem(1200, 40, 3, seed=4)
    cfg = HeadConfig(lam=1e-3, sigma=1.0, epsilon=1.0, delta=1e-4, accounting=accounting)
    heads = []
    for bulk in (True, False):
        head = CertifiedHead(LocalHeadData(X, y, 3), cfg, rng=np.random.default_rng(4))
        head._solver.max_pending_rows = 8
        if not bulk:
            head._solver.max_bulk_rows = 0
        heads.append(head)
    order = np.random.default_rng(5).permutation(1200)
    for start in range(0, 200, 40):
        ids = [int(i) for i in order[start : start + 40]]
        a, b = (h.remove(ids) for h in heads)
        assert a.retrained == b.retrained
        assert a.cumulative == pytest.approx(b.cumulative, rel=1e-4, abs=1e-9)
    assert heads[0]._solver.bulk_rows > 0 and heads[1]._solver.bulk_rows == 0
    np.testing.assert_allclose(heads[0].W, heads[1].W, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
        ),
    ],
)
def test_bulk_rows_on_torch_match_numpy(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulk path (CG with the Woodbury preconditioner) on torch's kernels: the GPU's code."""
    from simulator.head import solver as solver_module
    from simulator.head.backend import NumpyBackend, TorchBackend

    monkeypatch.setattr(solver_module, "DEVICE_FOLD_FLOPS", 0.0)  # bulk on a GPU too

    rng = np.random.default_rng(6)
    H = spd(rng)
    batches = [batch(rng, m) for m in (3, 20, 30)]
    g = rng.normal(size=(D, K))
    steps = []
    for bk in (NumpyBackend(), TorchBackend(device)):
        solver = HessianSolver(bk.asarray(H), backend=bk, max_pending_rows=8)
        for rows, coef in batches:
            solver.downdate_rows(rows, coef, diagonal=0.05)
        assert solver.bulk_rows == 53 and solver.factorisations == 1
        steps.append(bk.to_numpy(solver.solve(g).step))
    np.testing.assert_allclose(steps[1], steps[0], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("above", [False, True])
def test_on_the_gpu_path_a_cheap_fold_is_preferred(
    above: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where inverses are applied by products (a GPU), a batch whose fold costs fewer than
    ``DEVICE_FOLD_FLOPS`` is folded (each CG step of bulk rows waits for a read-back)."""
    from simulator.head import solver as solver_module
    from simulator.head.backend import GPU_PATH_VARIABLE, TorchBackend

    monkeypatch.setenv(GPU_PATH_VARIABLE, "1")
    fold_flops = K * D * D * (3 + 20 + D / 3)  # 3 Woodbury rows, then a batch of 20
    threshold = fold_flops * (0.99 if above else 1.01)
    monkeypatch.setattr(solver_module, "DEVICE_FOLD_FLOPS", threshold)
    rng = np.random.default_rng(7)
    H = spd(rng)
    bk = TorchBackend("cpu")
    assert bk.prefers_products
    solver = HessianSolver(bk.asarray(H), backend=bk, max_pending_rows=8)
    target = H.copy()
    for m in (3, 20):
        rows, coef = batch(rng, m)
        solver.downdate_rows(bk.asarray(rows), bk.asarray(coef), diagonal=0.05)
        target = downdated(target, rows, coef, 0.05)
    g = rng.normal(size=(D, K))
    step = bk.to_numpy(solver.solve(bk.asarray(g)).step)
    exact = np.stack([np.linalg.solve(target[c], g[:, c]) for c in range(K)], axis=1)
    np.testing.assert_allclose(step, exact, rtol=1e-4, atol=1e-8)
    assert solver.bulk_rows == (23 if above else 0)
    assert solver.factorisations == (1 if above else 2)


def test_small_batches_fold_the_bulk_once_they_paid_for_it() -> None:
    """After a large batch, the conjugate-gradient steps of small batches' solves against the
    bulk add up; once they reach ``bulk_rent`` the next small batch folds the bulk (the
    matrices stay the exact ones), and later solves need no conjugate gradients. Steps of a
    large batch's solves are no rent."""
    rng = np.random.default_rng(7)
    H = spd(rng)
    solver = HessianSolver(H, max_pending_rows=8, bulk_rent=6)
    target = H.copy()
    rows, coef = batch(rng, 30)
    solver.downdate_rows(rows, coef, diagonal=0.05)
    target = downdated(target, rows, coef, 0.05)
    assert solver.solve(rng.normal(size=(D, K)), floor=1.0).refinements > 0
    assert solver._bulk_rent_paid == 0  # a large batch's own solve
    paid = []
    while solver.bulk_rows:
        rows, coef = batch(rng, 1)
        solver.downdate_rows(rows, coef, diagonal=0.01)
        target = downdated(target, rows, coef, 0.01)
        res = solver.solve(rng.normal(size=(D, K)), floor=1.0)
        paid.append(solver._bulk_rent_paid)
        assert len(paid) < 20
    assert paid[-2] >= 6 and all(p < 6 for p in paid[:-2])  # folded at the first batch after
    assert res.refinements <= 1 and solver.factorisations == 2
    np.testing.assert_allclose(solver.hessians, target, atol=1e-10)


def test_restore_keeps_the_bulk_rent() -> None:
    """A solver restored between two small batches folds at the same batch, bit for bit."""
    rng = np.random.default_rng(8)
    solver = HessianSolver(spd(rng), max_pending_rows=8, bulk_rent=6)
    solver.downdate_rows(*batch(rng, 30))
    solver.solve(rng.normal(size=(D, K)))
    while solver._bulk_rent_paid == 0:
        solver.downdate_rows(*batch(rng, 1))
        solver.solve(rng.normal(size=(D, K)))
    twin = HessianSolver(spd(np.random.default_rng(99)), max_pending_rows=8, bulk_rent=6)
    twin.load_state_dict(solver.state_dict())
    copied = pickle.loads(pickle.dumps(solver))
    for _ in range(12):
        rows, coef = batch(rng, 1)
        g = rng.normal(size=(D, K))
        for one in (solver, twin, copied):
            one.downdate_rows(rows, coef)
        expected = solver.solve(g).step
        for other in (twin, copied):
            np.testing.assert_array_equal(other.solve(g).step, expected)
            assert other.bulk_rows == solver.bulk_rows
    assert solver.bulk_rows == 0
