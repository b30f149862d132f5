"""Exact training of the perturbed one-vs-rest head by Newton's method with Cholesky solves.

Minimises ``L_b(w_k; D)`` (``logistic.py``, Guo et al. 2020 eq. 1) for every class k from
aggregated sufficient statistics, so the same loop trains from local rows or from a federation
of clients (one statistics round per iteration). Damped Newton with a backtracking line search
on the objective converges globally for this strongly convex objective and quadratically near
the optimum; it stops when every class satisfies

    ||grad L_b(w_k)|| <= tol * scale,   scale = n (the number of retained rows),

i.e. the gradient of the *mean* objective is below ``tol``.

A *retrain* (fresh ``b`` after the budget is spent) reaches the same minimiser faster from the
current head (:func:`retrain_head`): the objective is strongly convex, so its minimiser does not
depend on the starting point, and the preconditioned iteration

    W <- W - t M^{-1} grad L_b'(W),      M = H(W_ref; D')  (the removal solver's Hessian)

converges linearly with rate ``||I - M^{-1} H(W)||``, small when the curvatures
``a p (1 - p)`` change little between ``W_ref`` and ``W``; L-BFGS pairs (with ``M^{-1}`` as
the initial inverse Hessian) absorb the change the new ``b`` causes. Each iteration is one
gradient pass (``2 n d K`` multiply-adds twice) and K pairs of triangular solves, against
``K n d^2`` for a Newton iteration's Hessians; when the gradient norms stall, a true Newton
iteration (one Hessian build) replaces the preconditioner. The stopping rule is the same as
training's; one Hessian build at the converged head seeds the removal machinery (its reference
point) and serves one final Newton step.

Training from zero takes the same iteration (:func:`train_head_from_zero`): at ``W = 0`` every
row's probability is 1/2 in every class, so all K Hessians equal

    H_0 = X^T diag(a) X / 4 + lam n I,

which one class's build gives (in the pass that sums the Gram matrix). With ``M = H_0`` as
the preconditioner, the cost from zero is one Hessian build (the polish) and a few dozen
gradient passes, where damped Newton (:func:`train_head`, the reference) builds the K
Hessians at every one of its 6-7 iterations.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError, NumericalError
from simulator.head.backend import NUMPY, Array, Backend, NotPositiveDefinite
from simulator.head.data import HeadData
from simulator.head.logistic import (
    ShardStatistics,
    StatisticsRequest,
    objective_gradient,
    objective_hessian,
    objective_value,
)

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class TrainResult:
    """Outcome of :func:`train_head`.

    ``hessian`` is the objective Hessian (K, d, d) at ``reference`` (the returned head ``W``
    when None) and ``gram`` the retained rows' ``X^T X`` (None from :func:`retrain_head`);
    they seed the removal machinery, whose bounds charge the gap ``||W_ref - W||``. Arrays are
    the backend's (numpy by default), ``gradient_norms`` numpy. ``factors``, when given, are
    the lower Cholesky factors (K, d, d) of ``hessian`` (the warm retrain's polish computed
    them; the removal solver takes them instead of factorising again).
    """

    W: Array
    gradient_norms: FloatArray
    iterations: int
    hessian: Array
    gram: Array | None
    seconds: float
    newton_iterations: int = -1
    hessian_builds: int = -1
    reference: Array | None = None
    factors: Array | None = None

    def __post_init__(self) -> None:
        # the cold path builds the Hessians once per Newton iteration (and at the last point)
        if self.newton_iterations < 0:
            object.__setattr__(self, "newton_iterations", self.iterations)
        if self.hessian_builds < 0:
            object.__setattr__(self, "hessian_builds", self.iterations + 1)


def statistics_in(data: HeadData, request: StatisticsRequest, bk: Backend) -> ShardStatistics:
    """The data's answer to ``request``, moved to ``bk`` (a no-op where it was computed)."""
    return data.statistics(request).moved_to(bk)


def train_head(
    data: HeadData,
    b: Array,
    *,
    lam: float,
    tol: float = 1e-8,
    max_iter: int = 50,
    backend: Backend = NUMPY,
) -> TrainResult:
    """Newton iterations to the minimiser of ``L_b`` on the retained rows of ``data``.

    ``backend`` (:mod:`simulator.head.backend`) holds the head, the Hessians and the solves;
    statistics are moved to it from wherever ``data`` computes them.
    """
    start = time.perf_counter()
    bk = backend
    d, k = data.dim, data.columns
    W = bk.zeros((d, k))
    b = bk.asarray(b)
    if tuple(b.shape) != (d, k):
        raise InputError(f"b must be (d, columns) = {(d, k)}, got {tuple(b.shape)}")
    scale = max(1, data.retained_count)
    stats = statistics_in(data, StatisticsRequest(W, hessian=True, gram=True), bk)
    gram = stats.gram
    assert gram is not None
    for it in range(max_iter + 1):
        grad = objective_gradient(stats, W, b, lam=lam)
        norms = bk.to_numpy(bk.norms(grad))
        H = objective_hessian(stats, lam=lam)
        if np.all(norms <= tol * scale):
            return TrainResult(W, norms, it, H, gram, time.perf_counter() - start)
        step = _cholesky_preconditioner(H, bk)(grad)
        W, stats = _line_search(_Objective(data, b, lam, bk), W, step, stats)
    raise NumericalError(
        f"Newton did not reach ||grad|| <= {tol} * {scale} in {max_iter} iterations "
        f"(max gradient norm {float(norms.max()):.3e})"
    )


@dataclass(frozen=True)
class _Objective:
    """``L_b`` on the retained rows of ``data`` (``logistic.py``), its arrays in ``bk``."""

    data: HeadData
    b: Array
    lam: float
    bk: Backend


def _line_search(
    objective: _Objective, W: Array, step: Array, stats: ShardStatistics
) -> tuple[Array, ShardStatistics]:
    """Backtracking (Armijo) per class; the full step is accepted near the optimum."""
    grad = objective_gradient(stats, W, objective.b, lam=objective.lam)
    W_new, _ = _armijo(objective, W, step, stats, grad)
    return W_new, statistics_in(
        objective.data, StatisticsRequest(W_new, hessian=True), objective.bk
    )


#: ``(d, K) gradient -> (d, K) step`` solving with a fixed SPD matrix per class.
Preconditioner = Callable[[Array], Array]


def _cholesky_factors(hessian: Array, bk: Backend) -> Array:
    """Lower Cholesky factors of ``hessian`` (K, d, d), all classes in one batched call."""
    try:
        return bk.cholesky(hessian)
    except NotPositiveDefinite as exc:
        raise NumericalError(f"Hessian of class {exc.index} is not positive definite") from exc


def _cholesky_preconditioner(
    hessian: Array, bk: Backend, factors: Array | None = None
) -> Preconditioner:
    """``g -> H_k^{-1} g_k`` per class from Cholesky factors of ``hessian`` (K, d, d)."""
    factors = _cholesky_factors(hessian, bk) if factors is None else factors

    def solve(g: Array) -> Array:
        return bk.cho_solve(factors, g.T[:, :, None])[:, :, 0].T

    return solve


@dataclass(frozen=True)
class WarmRetrainConfig:
    """Stopping rule and tuning of :func:`retrain_head`.

    Attributes
    ----------
    tol : as :func:`train_head`; the stopping rule is the same, ``||grad L_b(w_k)|| <= tol * n``
        for every class k.
    max_iter : iterations before giving up.
    contraction, patience : after ``patience`` consecutive iterations that do not reduce some
        unconverged class's gradient norm by the factor ``contraction``, the next iteration is a
        true Newton iteration (a Hessian build at the current head, which then becomes the
        preconditioner). A Hessian build costs ``K n d^2`` against ``~4 n d K`` for a gradient
        pass, i.e. about ``d / 4`` iterations, so only stalls pay for a build.
    memory : L-BFGS pairs kept. The directions are L-BFGS's with ``M^{-1}`` as the initial
        inverse Hessian: the new ``b`` moves the head and the curvatures with it, and the pairs
        learn that change (on the benchmark workload the plain preconditioned iteration
        contracted by only 0.5-0.9 per step, L-BFGS by 0.2-0.4).
    """

    tol: float = 1e-8
    max_iter: int = 100
    contraction: float = 0.9
    patience: int = 3
    memory: int = 10


#: The settings a retrain uses unless told otherwise.
DEFAULT_RETRAIN = WarmRetrainConfig()


@dataclass(frozen=True)
class WarmStart:
    """Where a retrain starts (module docstring).

    ``W0`` is the starting head (the current head: its optimum differs only by the removed rows
    and the new ``b``); ``precondition`` applies ``M_k^{-1}`` per class for SPD ``M_k`` close to
    the Hessian (the removal solver's downdated Hessian at its reference point).
    """

    W0: Array
    precondition: Preconditioner


def retrain_head(
    data: HeadData,
    b: Array,
    *,
    lam: float,
    start: WarmStart,
    settings: WarmRetrainConfig = DEFAULT_RETRAIN,
    backend: Backend = NUMPY,
) -> TrainResult:
    """The minimiser of ``L_b`` on the retained rows, warm-started (module docstring).

    Parameters
    ----------
    data, b, lam : as :func:`train_head`.
    start : the starting head and the preconditioner.
    settings : stopping rule and tuning.
    backend : as :func:`train_head`.

    Returns
    -------
    TrainResult with ``gram=None`` (the caller keeps the Gram matrix current by downdates).
    Once the tolerance is met, the Hessians are built once at that head (``reference``) and
    one Newton step with them is taken (kept when it lowers every class's gradient norm; it
    brings the residual from ~``tol * n`` to the cold path's ~quadratic accuracy).
    ``iterations`` counts all iterations, ``newton_iterations`` those with a Hessian build
    (the last, the polish, included), ``hessian_builds`` the builds.
    """
    t0 = time.perf_counter()
    bk = backend
    W = bk.copy(start.W0)
    precondition = start.precondition
    tol, max_iter, contraction = settings.tol, settings.max_iter, settings.contraction
    patience, memory = settings.patience, settings.memory
    b = bk.asarray(b)
    scale = max(1, data.retained_count)
    stats = statistics_in(data, StatisticsRequest(W), bk)
    grad = objective_gradient(stats, W, b, lam=lam)
    norms = bk.to_numpy(bk.norms(grad))
    newton = builds = slow = 0
    use_newton = False
    history: list[tuple[Array, Array]] = []
    for it in range(max_iter + 1):
        if np.all(norms <= tol * scale):
            polish = _polish(_Objective(data, b, lam, bk), W, norms)
            return TrainResult(
                polish.W,
                polish.norms,
                it + 1,
                polish.hessian,
                None,
                time.perf_counter() - t0,
                newton_iterations=newton + 1,
                hessian_builds=builds + 1,
                reference=W,
                factors=polish.factors,
            )
        if it == max_iter:
            break
        if use_newton:
            hstats = statistics_in(data, StatisticsRequest(W, hessian=True), bk)
            builds += 1
            newton += 1
            precondition = _cholesky_preconditioner(objective_hessian(hstats, lam=lam), bk)
            history.clear()  # the new preconditioner already holds the curvature
            step = precondition(grad)
        else:
            step = _lbfgs_direction(grad, history, precondition, bk)
        W_new, stats_new = _armijo(_Objective(data, b, lam, bk), W, step, stats, grad)
        grad_new = objective_gradient(stats_new, W_new, b, lam=lam)
        norms_new = bk.to_numpy(bk.norms(grad_new))
        history.append((W_new - W, grad_new - grad))
        if len(history) > memory:
            history.pop(0)
        active = norms > tol * scale
        slow = slow + 1 if np.any(active & (norms_new > contraction * norms)) else 0
        use_newton = slow >= patience
        if use_newton:
            slow = 0
        W, stats, grad, norms = W_new, stats_new, grad_new, norms_new
    raise NumericalError(
        f"warm retrain did not reach ||grad|| <= {tol} * {scale} in {max_iter} iterations "
        f"(max gradient norm {float(norms.max()):.3e})"
    )


def train_head_from_zero(
    data: HeadData,
    b: Array,
    *,
    lam: float,
    tol: float = 1e-8,
    backend: Backend = NUMPY,
) -> TrainResult:
    """The minimiser of ``L_b`` on the retained rows of ``data``, from ``W = 0``.

    The warm iteration (:func:`retrain_head`) preconditioned by the Hessian at zero (module
    docstring), with the same stopping rule as :func:`train_head`, so the same minimiser to
    the same tolerance. The result also carries the retained rows' Gram matrix (summed in the
    first pass), the reference point (where the Hessians were built) and their factors.
    """
    start = time.perf_counter()
    bk = backend
    d, k = data.dim, data.columns
    b = bk.asarray(b)
    if tuple(b.shape) != (d, k):
        raise InputError(f"b must be (d, columns) = {(d, k)}, got {tuple(b.shape)}")
    W0 = bk.zeros((d, k))
    first = statistics_in(data, StatisticsRequest(W0, hessian=True, gram=True, columns=(0,)), bk)
    assert first.gram is not None
    factor = _cholesky_factors(objective_hessian(first, lam=lam), bk)  # (1, d, d): every class

    def precondition(g: Array) -> Array:
        return bk.cho_solve(factor, g[None, :, :])[0]

    res = retrain_head(
        data,
        b,
        lam=lam,
        start=WarmStart(W0, precondition),
        settings=WarmRetrainConfig(tol=tol),
        backend=bk,
    )
    return replace(res, gram=first.gram, seconds=time.perf_counter() - start)


@dataclass(frozen=True)
class _Polished:
    """A converged warm retrain's last step (:func:`_polish`).

    The head, its gradient norms, the Hessians at the converged head (the reference) and their
    factors.
    """

    W: Array
    norms: FloatArray
    hessian: Array
    factors: Array


def _polish(objective: _Objective, W: Array, norms: FloatArray) -> _Polished:
    """One Hessian build at the converged head ``W``, then one Newton step with it.

    A polish that costs K factorisations and a gradient pass: the head lands where a cold
    Newton run lands, well inside the tolerance. The step is kept when it lowers the stacked
    gradient norm; the build's point is the reference either way.
    """
    data, b, lam, bk = objective.data, objective.b, objective.lam, objective.bk
    final = statistics_in(data, StatisticsRequest(W, hessian=True), bk)
    H = objective_hessian(final, lam=lam)
    factors = _cholesky_factors(H, bk)  # handed on to the removal solver
    step = _cholesky_preconditioner(H, bk, factors)(objective_gradient(final, W, b, lam=lam))
    polished = W - step
    pstats = statistics_in(data, StatisticsRequest(polished), bk)
    pnorms = bk.to_numpy(bk.norms(objective_gradient(pstats, polished, b, lam=lam)))
    if np.linalg.norm(pnorms) <= np.linalg.norm(norms):
        return _Polished(polished, pnorms, H, factors)
    return _Polished(W, norms, H, factors)


def _lbfgs_direction(
    grad: Array,
    history: list[tuple[Array, Array]],
    precondition: Preconditioner,
    bk: Backend,
) -> Array:
    """L-BFGS two-loop recursion per class (Nocedal & Wright 2006, Alg. 7.4).

    The initial inverse Hessian is ``M^{-1}`` (the preconditioner); ``history`` holds
    ``(s, y)`` pairs (d, K). Strong convexity keeps every ``s_k . y_k >= lam n ||s_k||^2 > 0``.
    """
    q = bk.copy(grad)
    coefs = []
    for s, y in reversed(history):
        # a pair is used where s . y is safely positive: a converged class takes steps of ~0,
        # whose pair would be noise (strong convexity keeps the others positive)
        sy = (s * y).sum(0)
        ok = sy > 1e-12 * bk.norms(s) * bk.norms(y)
        rho = bk.where(ok, 1.0 / bk.where(ok, sy, 1.0), 0.0)
        alpha = rho * (s * q).sum(0)
        q = q - alpha * y
        coefs.append((rho, alpha))
    r = precondition(q)
    for (s, y), (rho, alpha) in zip(history, reversed(coefs), strict=True):
        beta = rho * (y * r).sum(0)
        r = r + s * (alpha - beta)
    return r


def _armijo(
    objective: _Objective, W: Array, step: Array, stats: ShardStatistics, grad: Array
) -> tuple[Array, ShardStatistics]:
    """Backtracking (Armijo) per class from gradient passes only.

    Returns the accepted head and its statistics (no Hessian), so the next iteration needs no
    further pass.
    """
    data, b, lam, bk = objective.data, objective.b, objective.lam, objective.bk
    f0 = bk.to_numpy(objective_value(stats, W, b, lam=lam))
    slope = -bk.to_numpy((grad * step).sum(0))
    t = np.ones(W.shape[1])
    cand, trial = W - step, stats
    for _ in range(30):
        cand = W - step * bk.asarray(t)
        trial = statistics_in(data, StatisticsRequest(cand), bk)
        f1 = bk.to_numpy(objective_value(trial, cand, b, lam=lam))
        bad = ~(f1 <= f0 + 1e-4 * t * slope + 1e-12 * np.abs(f0))  # NaN is bad
        if not np.any(bad):
            break
        t = np.where(bad, t * 0.5, t)
    return cand, trial
