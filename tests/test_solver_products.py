"""The base solve by products with ``base^{-1}`` (small d) and by triangular solves (large d).

Both ways, on numpy and torch, against the slow reference (the downdated Hessians materialised
and solved directly): the same matrices, solutions within the solve's own true residual, and
that residual reported exactly. ``PRODUCT_SOLVE_MAX_DIM`` picks the way by d; here it is moved
so that the same small problem runs through each.
"""

from __future__ import annotations

import numpy as np
import pytest

import simulator.head.solver as solver_module
from simulator.head import HessianSolver
from simulator.head.backend import make_backend

D, K = 24, 3


def spd(rng: np.random.Generator) -> np.ndarray:
    A = rng.normal(size=(K, D, D))
    return A @ A.transpose(0, 2, 1) + 40 * np.eye(D)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("products", [True, False])
def test_both_base_solves_give_the_reference_solution(
    backend: str, products: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(solver_module, "PRODUCT_SOLVE_MAX_DIM", D if products else D - 1)
    rng = np.random.default_rng(0)
    H = spd(rng)
    bk = make_backend("cpu", backend)
    solver = HessianSolver(bk.asarray(H), max_pending_rows=8, backend=bk)
    target = H.copy()
    for m in (1, 2, 1, 5, 1):  # Woodbury rows, then past 8 pending rows: a fold
        rows, coef = rng.normal(size=(m, D)) * 0.4, rng.uniform(0.0, 0.25, size=(m, K))
        solver.downdate_rows(bk.asarray(rows), bk.asarray(coef), diagonal=0.05)
        target -= np.einsum("jk,ja,jb->kab", coef, rows, rows) + 0.05 * np.eye(D)
        g = rng.normal(size=(D, K))
        res = solver.solve(bk.asarray(g), floor=1.0)
        # the inverse is formed on the first application exactly when products are chosen
        assert (solver._inverse is not None) == products
        step = bk.to_numpy(res.step)
        true = np.linalg.norm(g.T - np.einsum("kab,bk->ka", target, step), axis=1)
        np.testing.assert_allclose(res.residual_norms, true, rtol=1e-6, atol=1e-12)
        assert np.all(true <= solver.rtol * np.linalg.norm(g, axis=0) * (1 + 1e-9))
        for c in range(K):
            exact = np.linalg.solve(target[c], g[:, c])
            bound = true[c] / np.linalg.eigvalsh(target[c])[0]  # ||H^-1|| ||residual||
            assert np.linalg.norm(step[:, c] - exact) <= bound * 1.01 + 1e-12
    assert solver.factorisations == 2  # the fold refactorised once
