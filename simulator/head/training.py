"""Exact training of the perturbed one-vs-rest head by Newton's method with Cholesky solves.

Minimises ``L_b(w_k; D)`` (``logistic.py``, Guo et al. 2020 eq. 1) for every class k from
aggregated sufficient statistics, so the same loop trains from local rows or from a federation
of clients (one statistics round per iteration). Damped Newton with a backtracking line search
on the objective converges globally for this strongly convex objective and quadratically near
the optimum; it stops when every class satisfies

    ||grad L_b(w_k)|| <= tol * scale,   scale = n (the number of retained rows),

i.e. the gradient of the *mean* objective is below ``tol``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
from numpy.typing import NDArray

from simulator.errors import NumericalError
from simulator.head.data import HeadData
from simulator.head.logistic import (
    ShardStatistics,
    objective_gradient,
    objective_hessian,
    objective_value,
)

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class TrainResult:
    """Outcome of :func:`train_head`.

    ``hessian`` is the objective Hessian (K, d, d) at the returned head and ``gram`` the
    retained rows' ``X^T X``; both seed the removal machinery.
    """

    W: FloatArray
    gradient_norms: FloatArray
    iterations: int
    hessian: FloatArray
    gram: FloatArray
    seconds: float


def train_head(
    data: HeadData,
    b: FloatArray,
    *,
    lam: float,
    tol: float = 1e-8,
    max_iter: int = 50,
    W0: FloatArray | None = None,
) -> TrainResult:
    """Newton iterations to the minimiser of ``L_b`` on the retained rows of ``data``."""
    start = time.perf_counter()
    d, k = data.dim, data.columns
    W = np.zeros((d, k)) if W0 is None else np.array(W0, dtype=np.float64)
    scale = max(1, data.retained_count)
    stats = data.statistics(W, hessian=True, gram=True)
    gram = stats.gram
    assert gram is not None
    for it in range(max_iter + 1):
        grad = objective_gradient(stats, W, b, lam=lam)
        norms = np.linalg.norm(grad, axis=0)
        H = objective_hessian(stats, lam=lam)
        if np.all(norms <= tol * scale):
            return TrainResult(W, norms, it, H, gram, time.perf_counter() - start)
        step = np.empty_like(W)
        for c in range(k):
            try:
                step[:, c] = sla.cho_solve(
                    (sla.cholesky(H[c], lower=True, check_finite=False), True), grad[:, c]
                )
            except np.linalg.LinAlgError as exc:
                raise NumericalError(f"Hessian of class {c} is not positive definite") from exc
        W, stats = _line_search(data, W, step, stats, b, lam=lam)
    raise NumericalError(
        f"Newton did not reach ||grad|| <= {tol} * {scale} in {max_iter} iterations "
        f"(max gradient norm {float(norms.max()):.3e})"
    )


def _line_search(
    data: HeadData,
    W: FloatArray,
    step: FloatArray,
    stats: ShardStatistics,
    b: FloatArray,
    *,
    lam: float,
) -> tuple[FloatArray, ShardStatistics]:
    """Backtracking (Armijo) per class; the full step is accepted near the optimum."""
    f0 = objective_value(stats, W, b, lam=lam)
    slope = -np.sum(objective_gradient(stats, W, b, lam=lam) * step, axis=0)
    t = np.ones(W.shape[1])
    for _ in range(30):
        cand = W - step * t
        trial = data.statistics(cand, hessian=False)
        f1 = objective_value(trial, cand, b, lam=lam)
        bad = f1 > f0 + 1e-4 * t * slope + 1e-12 * np.abs(f0)
        if not np.any(bad):
            break
        t = np.where(bad, t * 0.5, t)
    W_new = W - step * t
    return W_new, data.statistics(W_new, hessian=True)
