"""Decorrelation sample weights (DecoRemoval section 3.2; StableNet, Zhang et al. CVPR 2021).

The weights solve the paper's problem over ``Delta_n = {w_i > 0, sum_i w_i = n}``:

    w* = argmin_w  sum_{a < b} || Cov_w(u(Z_a), u(Z_b)) ||_F^2,

with ``u(t) = sqrt(2) cos(omega t + phi)`` (``q`` random Fourier functions per column,
``omega ~ N(0, 1)``, ``phi ~ U(0, 2 pi)``) and, for weights summing to ``n``,

    Cov_w(A, B) = (1/n) sum_i w_i a_i b_i^T - (sum_i w_i a_i / n)(sum_i w_i b_i / n)^T.

Stacking ``U = [u(Z_1) ... u(Z_p)]`` (n x pq), ``C(w)`` is the weighted covariance of ``U``
and the objective is ``f(w) = 1/2 ||M o C||_F^2`` where ``M`` masks out the q x q diagonal
blocks (``1/2`` because ``C`` is symmetric). With ``G = M o C`` and ``m = U^T w / n``,

    df/dw_i = (1/n) u_i^T G u_i - (2/n) u_i^T G m = (1/n) [(u_i - m)^T G (u_i - m) - m^T G m],

which costs ``O(n (pq)^2)`` like ``f`` itself. The learner minimises
``f(w) / f(1) + penalty * mean((w - 1)^2)`` over ``w = n softmax(theta)`` with Adam on
``theta``: Adam's steps do not depend on the gradient's scale, which here is ``O(1/n)``
(plain SGD on this parameterisation hardly moves; see ``docs/decorrelation.md``).

Deviation from the paper (documented there): each selected column of ``Z`` is standardised
(mean 0, variance 1 over the rows being fitted) before ``u`` unless ``standardize=False``,
so that ``omega ~ N(0, 1)`` acts on the data's scale rather than on RFF outputs of size
``sqrt(2/m)``, where ``u`` would be almost linear.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError, InputError
from simulator.features.rff import FourierLift

__all__ = [
    "DecorrelationConfig",
    "DecorrelationWeights",
    "FourierLift",
    "WeightResult",
    "WeightSpread",
    "dependence",
    "dependence_gradient",
    "fit_weights",
    "refit_weights",
    "weight_spread",
]

_ADAM_BETA1, _ADAM_BETA2, _ADAM_EPS = 0.9, 0.999, 1e-12


@dataclass(frozen=True)
class DecorrelationConfig:
    """Settings of the weight learner.

    Attributes
    ----------
    features : int or None
        Decorrelate a seeded random subset of this many columns of ``Z`` (None: all).
    functions : int
        ``q``, random Fourier functions per column.
    steps, warm_steps : int
        Adam steps of :func:`fit_weights` and of the warm-started :func:`refit_weights`.
    lr : float
        Adam step size on ``theta`` (``w = n softmax(theta)``).
    penalty : float
        Weight of ``mean((w - 1)^2)`` next to the normalised dependence ``f(w) / f(1)``.
    max_weight : float or None
        Cap on every weight (>= 1); enforced by projection after each step.
    standardize : bool
        Standardise each selected column before ``u`` (see the module docstring).
    """

    features: int | None = 64
    functions: int = 1
    steps: int = 100
    warm_steps: int = 20
    lr: float = 0.05
    penalty: float = 0.1
    max_weight: float | None = None
    standardize: bool = True

    def __post_init__(self) -> None:
        def need_int(name: str, value: object, low: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"must be an integer >= {low}, got {value!r}", name)

        if self.features is not None:
            need_int("decorrelation.features", self.features, 2)
        need_int("decorrelation.functions", self.functions, 1)
        need_int("decorrelation.steps", self.steps, 0)
        need_int("decorrelation.warm_steps", self.warm_steps, 0)
        if not (np.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"must be a finite number > 0, got {self.lr!r}", "decorrelation.lr")
        if not (np.isfinite(self.penalty) and self.penalty >= 0):
            raise ConfigError(
                f"must be finite and >= 0, got {self.penalty!r}", "decorrelation.penalty"
            )
        if self.max_weight is not None and not (
            np.isfinite(self.max_weight) and self.max_weight >= 1.0
        ):
            raise ConfigError(
                f"must be None or a finite number >= 1 (the mean weight), got {self.max_weight!r}",
                "decorrelation.max_weight",
            )


@dataclass(frozen=True)
class WeightSpread:
    """How far weights are from uniform (deviations are from the mean weight, 1 on ``Delta_n``)."""

    std: float
    min: float
    max: float
    effective_sample_size_ratio: float  # (sum w)^2 / (n sum w^2), 1 for uniform weights
    max_abs_deviation: float


@dataclass(frozen=True, eq=False)
class WeightResult:
    """Weights from :func:`fit_weights` / :func:`refit_weights` and what they achieved.

    ``objective_initial`` and ``objective_final`` are the raw dependence ``f`` at uniform
    weights and at ``weights`` (same data, same lift); ``steps`` is the number of Adam steps
    run (0 when the data are already decorrelated, ``f(1) = 0`` up to rounding).
    """

    weights: NDArray[np.float64]
    objective_initial: float
    objective_final: float
    spread: WeightSpread
    steps: int
    seconds: float


def weight_spread(weights: NDArray[np.floating]) -> WeightSpread:
    """Summarise a weight vector (any positive scale; ESS ratio is scale-free)."""
    w = _check_weights(weights, None)
    return WeightSpread(
        std=float(w.std()),
        min=float(w.min()),
        max=float(w.max()),
        effective_sample_size_ratio=float(w.sum() ** 2 / (w.size * np.dot(w, w))),
        max_abs_deviation=float(np.max(np.abs(w - w.mean()))),
    )


def _check_features(Z: NDArray[np.floating]) -> NDArray[np.float64]:
    arr = np.asarray(Z, dtype=np.float64)
    if arr.ndim != 2:
        raise InputError(f"features must be a 2-D array (samples x columns), got shape {arr.shape}")
    if arr.shape[0] < 2:
        raise InputError(f"decorrelation needs at least 2 samples, got {arr.shape[0]}")
    if not np.all(np.isfinite(arr)):
        raise InputError(
            f"features have {int(np.count_nonzero(~np.isfinite(arr)))} non-finite value(s)"
        )
    return arr


def _check_weights(weights: NDArray[np.floating], n: int | None) -> NDArray[np.float64]:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or (n is not None and w.shape[0] != n):
        want = f"({n},)" if n is not None else "1-D"
        raise InputError(f"weights must have shape {want}, got {w.shape}")
    if w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0.0) or not np.any(w > 0.0):
        raise InputError("weights must be finite, non-negative and not all zero")
    return w


def _off_block_cov(
    U: NDArray[np.float64], w: NDArray[np.float64], block: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Return ``(G, m)``: ``G = M o C(w)`` and ``m = U^T w / n``."""
    n, P = U.shape
    if block < 1 or P % block or P // block < 2:
        raise InputError(f"U has {P} columns, not at least 2 blocks of {block}")
    m = U.T @ w / n
    Uc = U - m
    # C = (1/n) sum w_i u_i u_i^T - m m^T, written in centred form for accuracy.
    C = (Uc * w[:, None]).T @ Uc / n + (1.0 - w.sum() / n) * np.outer(m, m)
    k = P // block
    C.reshape(k, block, k, block)[np.arange(k), :, np.arange(k), :] = 0.0
    return C, m


def dependence(U: NDArray[np.floating], weights: NDArray[np.floating], *, block: int) -> float:
    """The objective ``f(w) = sum_{a<b} ||Cov_w(U_a, U_b)||_F^2`` over blocks of ``block`` columns.

    ``U`` is a lifted matrix (:meth:`FourierLift.apply`); ``weights`` are taken as given
    (the covariance definition assumes they sum to ``n``).
    """
    arr = _check_features(U)
    G, _ = _off_block_cov(arr, _check_weights(weights, arr.shape[0]), block)
    return 0.5 * float(np.sum(G * G))


def dependence_gradient(
    U: NDArray[np.floating], weights: NDArray[np.floating], *, block: int
) -> NDArray[np.float64]:
    """Analytic ``df/dw`` (module docstring): ``(1/n)[(u_i-m)^T G (u_i-m) - m^T G m]``."""
    arr = _check_features(U)
    w = _check_weights(weights, arr.shape[0])
    G, m = _off_block_cov(arr, w, block)
    Uc = arr - m
    grad: NDArray[np.float64] = (np.einsum("ij,ij->i", Uc @ G, Uc) - m @ G @ m) / arr.shape[0]
    return grad


def _cap(w: NDArray[np.float64], cap: float | None) -> NDArray[np.float64]:
    """Project onto ``{0 < w <= cap, sum w = n}``: cap the largest, rescale the rest."""
    if cap is None or w.max() <= cap:
        return w
    w = w.copy()
    for _ in range(w.size):  # the capped set grows every pass
        fixed = w >= cap
        w[fixed] = cap
        free = ~fixed
        if not np.any(free):
            break
        w[free] *= (w.size - cap * np.count_nonzero(fixed)) / w[free].sum()
        if not np.any(w[free] > cap):
            break
    return w


def _adam(
    U: NDArray[np.float64],
    theta: NDArray[np.float64],
    steps: int,
    config: DecorrelationConfig,
    block: int,
) -> tuple[NDArray[np.float64], int]:
    """Adam on ``theta`` for ``f(w)/f(1) + penalty mean((w-1)^2)``, ``w = n softmax(theta)``.

    Returns the weights and the number of steps taken (0 when ``f(1)`` is 0 up to rounding).
    """
    n = U.shape[0]
    f0 = dependence(U, np.ones(n), block=block)
    w = _softmax_n(theta, config.max_weight)
    # Off-block covariances at rounding level of the variances: nothing to decorrelate.
    if not f0 > (1e-12 * float(U.var(axis=0).sum())) ** 2:
        return w, 0
    m1, m2 = np.zeros(n), np.zeros(n)
    for t in range(1, steps + 1):
        g = dependence_gradient(U, w, block=block) / f0 + config.penalty * 2.0 * (w - 1.0) / n
        g_theta = w * (g - np.dot(w, g) / n)  # chain rule through n softmax(theta)
        m1 = _ADAM_BETA1 * m1 + (1.0 - _ADAM_BETA1) * g_theta
        m2 = _ADAM_BETA2 * m2 + (1.0 - _ADAM_BETA2) * g_theta * g_theta
        step = (m1 / (1.0 - _ADAM_BETA1**t)) / (np.sqrt(m2 / (1.0 - _ADAM_BETA2**t)) + _ADAM_EPS)
        theta = theta - config.lr * step
        w = _softmax_n(theta, config.max_weight)
        if config.max_weight is not None:
            theta = np.log(np.maximum(w, np.finfo(np.float64).tiny))  # match projected w
    return w, steps


def _softmax_n(theta: NDArray[np.float64], cap: float | None) -> NDArray[np.float64]:
    e = np.exp(theta - theta.max())
    return _cap(theta.size * e / e.sum(), cap)


def _run(
    U: NDArray[np.float64],
    theta0: NDArray[np.float64],
    steps: int,
    config: DecorrelationConfig,
    block: int,
    start: float,
) -> WeightResult:
    w, taken = _adam(U, theta0, steps, config, block)
    w.setflags(write=False)
    return WeightResult(
        weights=w,
        objective_initial=dependence(U, np.ones(U.shape[0]), block=block),
        objective_final=dependence(U, w, block=block),
        spread=weight_spread(w),
        steps=taken,
        seconds=time.perf_counter() - start,
    )


def _draw_lift(
    n_columns: int, config: DecorrelationConfig, rng: np.random.Generator
) -> FourierLift:
    return FourierLift.draw(
        n_columns,
        features=config.features,
        functions=config.functions,
        standardize=config.standardize,
        rng=rng,
    )


def fit_weights(
    Z: NDArray[np.floating], *, config: DecorrelationConfig, rng: np.random.Generator
) -> WeightResult:
    """Learn decorrelation weights for the rows of ``Z`` from uniform (``config.steps`` steps).

    ``rng`` draws the :class:`FourierLift` (column subset, frequencies, phases); the rest
    is deterministic, so the same seed gives bit-identical weights.
    """
    start = time.perf_counter()
    arr = _check_features(Z)
    lift = _draw_lift(arr.shape[1], config, rng)
    return _run(lift.apply(arr), np.zeros(arr.shape[0]), config.steps, config, lift.block, start)


def refit_weights(
    Z_retained: NDArray[np.floating],
    previous_weights: NDArray[np.floating],
    *,
    config: DecorrelationConfig,
    rng: np.random.Generator,
) -> WeightResult:
    """Warm start after deletions: ``config.warm_steps`` steps from the retained rows' weights.

    ``previous_weights`` (one per retained row, positive) are renormalised to sum to
    ``n'``; pass an ``rng`` seeded as for :func:`fit_weights` to reuse the same lift.
    """
    start = time.perf_counter()
    arr = _check_features(Z_retained)
    prev = _check_weights(previous_weights, arr.shape[0])
    if np.any(prev <= 0.0):
        raise InputError("previous_weights must be strictly positive to warm-start from log(w)")
    lift = _draw_lift(arr.shape[1], config, rng)
    theta0 = np.log(prev * (arr.shape[0] / prev.sum()))
    return _run(lift.apply(arr), theta0, config.warm_steps, config, lift.block, start)


class DecorrelationWeights:
    """Small stateful wrapper: remembers the latest result; the maths is in the functions above."""

    def __init__(self) -> None:
        self._latest: WeightResult | None = None

    @property
    def latest(self) -> WeightResult | None:
        """The result of the last :meth:`fit` or :meth:`refit` (None before the first)."""
        return self._latest

    def fit(
        self, Z: NDArray[np.floating], *, config: DecorrelationConfig, rng: np.random.Generator
    ) -> WeightResult:
        """See :func:`fit_weights`."""
        self._latest = fit_weights(Z, config=config, rng=rng)
        return self._latest

    def refit(
        self,
        Z_retained: NDArray[np.floating],
        previous_weights: NDArray[np.floating],
        *,
        config: DecorrelationConfig,
        rng: np.random.Generator,
    ) -> WeightResult:
        """See :func:`refit_weights`."""
        self._latest = refit_weights(Z_retained, previous_weights, config=config, rng=rng)
        return self._latest
