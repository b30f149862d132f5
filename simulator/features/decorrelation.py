"""Decorrelation sample weights (DecoRemoval section 3.2; StableNet, Zhang et al. CVPR 2021).

The weights solve, over ``Delta_n = {w_i > 0, sum_i w_i = n}``, the paper's problem

    w* = argmin_w  sum_{a < b} || Sigma_hat_{ab; w} ||_F^2

(``decoremoval.tex``, the optimisation problem of Sec. 3.2), where ``Sigma_hat_{ab; w}`` is a
weighted cross-covariance of ``u(Z_a)`` and ``u(Z_b)``, ``u(t) = sqrt(2) cos(omega t + phi)``
with ``q`` random Fourier functions per column (paper eq. 3; :class:`FourierLift`). Which
covariance is ``config.objective`` (:mod:`simulator.features.dependence` has the formulas):

* ``paper``: the paper's estimator literally, the covariance of the re-weighted features
  ``w_i u(Z_i)`` (quartic in ``w``);
* ``stablenet``: the weighted covariance of StableNet's reference code; it can move almost all
  of the mass off one class (``docs/decorrelation.md``);
* ``class_conditional``: the paper's estimator within each class, the class masses fixed at the
  class sizes (``w_c`` sums to ``n_c``): decorrelation that cannot trade one class against
  another (the paper calls its module "discriminative-preserving" without a formula).

The learner minimises ``f(w) / f(1) + penalty * mean((w - 1)^2)`` over ``w = n softmax(theta)``
(per class for ``class_conditional``) with ``config.steps`` Adam steps on ``theta``, **always
from uniform weights**: the result is a function of the rows and the seed alone. This is what
the certificate needs after a deletion (``method.md`` section 2): a retrain from scratch on
``D'`` fits the weights cold, so the weights the head uses after a deletion must be that same
cold fit, never a warm start from weights fitted while the deleted rows were present.

Deviation from the paper (documented there): each selected column of ``Z`` is standardised
(mean 0, variance 1 over the rows being fitted) before ``u`` unless ``standardize=False``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError, InputError
from simulator.features.dependence import (
    Estimator,
    group_rows,
    grouped_dependence,
    grouped_gradient,
)
from simulator.features.rff import FourierLift

__all__ = [
    "OBJECTIVES",
    "BlockDependence",
    "DecorrelationConfig",
    "FourierLift",
    "Objective",
    "WeightResult",
    "WeightSpread",
    "class_mass",
    "fit_weights",
    "weight_spread",
]

Objective = Literal["paper", "stablenet", "class_conditional"]
OBJECTIVES: tuple[Objective, ...] = ("paper", "stablenet", "class_conditional")
_ADAM_BETA1, _ADAM_BETA2, _ADAM_EPS = 0.9, 0.999, 1e-12


@dataclass(frozen=True)
class DecorrelationConfig:
    """Settings of the weight learner.

    Attributes
    ----------
    objective : {"paper", "stablenet", "class_conditional"}
        Which dependence is minimised (module docstring).
    features : int or None
        Decorrelate a seeded random subset of this many columns of ``Z`` (None: all).
    functions : int
        ``q``, random Fourier functions per column.
    steps : int
        Adam steps of every fit (the schedule is fixed: every fit starts from uniform).
    lr : float
        Adam step size on ``theta`` (``w = n softmax(theta)``).
    penalty : float
        Weight of ``mean((w - 1)^2)`` next to the normalised dependence ``f(w) / f(1)``.
    max_weight : float or None
        Cap on every weight (>= 1); enforced by projection after each step.
    standardize : bool
        Standardise each selected column before ``u`` (see the module docstring).
    """

    objective: Objective = "paper"
    features: int | None = 64
    functions: int = 1
    steps: int = 100
    lr: float = 0.05
    penalty: float = 0.1
    max_weight: float | None = None
    standardize: bool = True

    def __post_init__(self) -> None:
        def need_int(name: str, value: object, low: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"must be an integer >= {low}, got {value!r}", name)

        if self.objective not in OBJECTIVES:
            raise ConfigError(
                f"must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}",
                "decorrelation.objective",
            )
        if self.features is not None:
            need_int("decorrelation.features", self.features, 2)
        need_int("decorrelation.functions", self.functions, 1)
        need_int("decorrelation.steps", self.steps, 0)
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

    @property
    def estimator(self) -> Estimator:
        """The covariance estimator the objective uses."""
        return _estimator(self.objective)


def _estimator(objective: Objective) -> Estimator:
    """``class_conditional`` is the paper's estimator within each class."""
    return "stablenet" if objective == "stablenet" else "paper"


@dataclass(frozen=True)
class WeightSpread:
    """How far weights are from uniform (deviations are from the mean weight, 1 on ``Delta_n``).

    ``class_mass`` maps each class to its share of the total weight mass (uniform weights give
    the class's share of the rows); empty when no labels were given.
    """

    std: float
    min: float
    max: float
    effective_sample_size_ratio: float  # n_eff / n = (sum w)^2 / (n sum w^2), 1 when uniform
    max_abs_deviation: float
    class_mass: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class WeightResult:
    """Weights from :func:`fit_weights` and what they achieved.

    ``objective_initial`` and ``objective_final`` are the raw dependence ``f`` at uniform
    weights and at ``weights`` (same data, same lift); ``steps`` is the number of Adam steps
    run (0 when the data are already decorrelated, ``f(1) = 0`` up to rounding).
    """

    weights: NDArray[np.float64]
    objective: Objective
    objective_initial: float
    objective_final: float
    spread: WeightSpread
    steps: int
    seconds: float


def class_mass(weights: NDArray[np.floating], labels: NDArray[np.integer]) -> dict[int, float]:
    """Share of the total weight mass held by each class present in ``labels``."""
    w = np.asarray(weights, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if y.shape != w.shape:
        raise InputError(f"one label per weight is required, got {y.shape} and {w.shape}")
    total = float(w.sum())
    return {int(c): float(w[y == c].sum() / total) for c in np.unique(y)}


def weight_spread(
    weights: NDArray[np.floating], labels: NDArray[np.integer] | None = None
) -> WeightSpread:
    """Summarise a weight vector (any positive scale; the ESS ratio is scale-free)."""
    w = _check_weights(weights, None)
    return WeightSpread(
        std=float(w.std()),
        min=float(w.min()),
        max=float(w.max()),
        effective_sample_size_ratio=float(w.sum() ** 2 / (w.size * np.dot(w, w))),
        max_abs_deviation=float(np.max(np.abs(w - w.mean()))),
        class_mass={} if labels is None else class_mass(w, labels),
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


def _groups(objective: Objective, n: int, labels: NDArray[np.integer] | None) -> NDArray[np.int64]:
    """Rows that share a simplex: all rows, or each class for ``class_conditional``."""
    if objective != "class_conditional":
        return np.zeros(n, dtype=np.int64)
    if labels is None:
        raise InputError("the class_conditional objective needs the rows' labels")
    y = np.asarray(labels, dtype=np.int64)
    if y.shape != (n,):
        raise InputError(f"one label per row is required, got shape {y.shape} for {n} rows")
    return y


@dataclass(frozen=True, eq=False)
class BlockDependence:
    """The objective's raw dependence ``f(w)`` over blocks of ``block`` columns of ``U``.

    ``U`` is a lifted matrix (:meth:`FourierLift.apply`); ``weights`` are taken as given
    (the estimators assume they sum to ``n``, or to ``n_c`` per class); ``labels`` are needed
    by the ``class_conditional`` objective only. The inputs are checked when it is built.
    """

    U: NDArray[np.floating]
    weights: NDArray[np.floating]
    block: int
    objective: Objective
    labels: NDArray[np.integer] | None = None
    # the checked inputs: float64 rows and weights, and the simplex of every row
    _lifted: NDArray[np.float64] = field(init=False, repr=False)
    _weights: NDArray[np.float64] = field(init=False, repr=False)
    _rows: NDArray[np.int64] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        lifted = _check_features(self.U)
        n = lifted.shape[0]
        object.__setattr__(self, "_lifted", lifted)
        object.__setattr__(self, "_weights", _check_weights(self.weights, n))
        object.__setattr__(self, "_rows", _groups(self.objective, n, self.labels))

    def value(self) -> float:
        """``f(w)`` (formulas: :mod:`simulator.features.dependence`)."""
        return grouped_dependence(
            self._lifted, self._weights, self._rows, block=self.block, estimator=self._estimator
        )

    def gradient(self) -> NDArray[np.float64]:
        """Analytic ``df/dw`` (formulas: :mod:`simulator.features.dependence`)."""
        return grouped_gradient(
            self._lifted, self._weights, self._rows, block=self.block, estimator=self._estimator
        )

    @property
    def _estimator(self) -> Estimator:
        return _estimator(self.objective)


def _cap(w: NDArray[np.float64], cap: float | None) -> NDArray[np.float64]:
    """Project onto ``{0 < w <= cap, sum w = w.size}``: cap the largest, rescale the rest."""
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


@dataclass(frozen=True, eq=False)
class _Simplices:
    """The groups of rows whose weights share one ``n_g softmax`` (all rows, or each class)."""

    rows: list[NDArray[np.int64]]
    cap: float | None

    def weights(self, theta: NDArray[np.float64]) -> NDArray[np.float64]:
        w = np.ones_like(theta)
        for rows in self.rows:
            t = theta[rows]
            e = np.exp(t - t.max())
            w[rows] = _cap(rows.size * e / e.sum(), self.cap)
        return w

    def chain(self, w: NDArray[np.float64], g: NDArray[np.float64]) -> NDArray[np.float64]:
        """``d/dtheta`` from ``d/dw`` through every group's ``n_g softmax``."""
        out = np.zeros_like(g)
        for rows in self.rows:
            wr, gr = w[rows], g[rows]
            out[rows] = wr * (gr - np.dot(wr, gr) / rows.size)
        return out


def _adam(
    U: NDArray[np.float64], groups: NDArray[np.int64], config: DecorrelationConfig, block: int
) -> tuple[NDArray[np.float64], int]:
    """``config.steps`` Adam steps on ``theta`` from 0 (uniform weights).

    Minimises ``f(w)/f(1) + penalty mean((w-1)^2)``; returns the weights and the number of
    steps taken (0 when ``f(1)`` is 0 up to rounding).
    """
    n = U.shape[0]
    est = config.estimator
    simplices = _Simplices(group_rows(groups), config.max_weight)
    f0 = grouped_dependence(U, np.ones(n), groups, block=block, estimator=est)
    theta = np.zeros(n)
    w = simplices.weights(theta)
    # Off-block covariances at rounding level of the variances: nothing to decorrelate.
    if not f0 > (1e-12 * float(U.var(axis=0).sum())) ** 2:
        return w, 0
    m1, m2 = np.zeros(n), np.zeros(n)
    for t in range(1, config.steps + 1):
        g = grouped_gradient(U, w, groups, block=block, estimator=est) / f0
        g = g + config.penalty * 2.0 * (w - 1.0) / n
        g_theta = simplices.chain(w, g)
        m1 = _ADAM_BETA1 * m1 + (1.0 - _ADAM_BETA1) * g_theta
        m2 = _ADAM_BETA2 * m2 + (1.0 - _ADAM_BETA2) * g_theta * g_theta
        step = (m1 / (1.0 - _ADAM_BETA1**t)) / (np.sqrt(m2 / (1.0 - _ADAM_BETA2**t)) + _ADAM_EPS)
        theta = theta - config.lr * step
        w = simplices.weights(theta)
        if config.max_weight is not None:
            theta = np.log(np.maximum(w, np.finfo(np.float64).tiny))  # match projected w
    return w, config.steps


def fit_weights(
    Z: NDArray[np.floating],
    *,
    config: DecorrelationConfig,
    rng: np.random.Generator,
    labels: NDArray[np.integer] | None = None,
) -> WeightResult:
    """Learn decorrelation weights for the rows of ``Z``, cold, from uniform weights.

    ``rng`` draws the :class:`FourierLift` (column subset, frequencies, phases); everything
    else is deterministic, so the same rows and seed give the same weights, whatever was
    fitted before. ``labels`` (one per row) are needed by ``class_conditional`` and fill
    :attr:`WeightSpread.class_mass`.
    """
    start = time.perf_counter()
    arr = _check_features(Z)
    groups = _groups(config.objective, arr.shape[0], labels)
    lift = FourierLift.draw(
        arr.shape[1],
        features=config.features,
        functions=config.functions,
        standardize=config.standardize,
        rng=rng,
    )
    U = lift.apply(arr)
    w, taken = _adam(U, groups, config, lift.block)
    w.setflags(write=False)
    est = config.estimator
    return WeightResult(
        weights=w,
        objective=config.objective,
        objective_initial=grouped_dependence(
            U, np.ones(U.shape[0]), groups, block=lift.block, estimator=est
        ),
        objective_final=grouped_dependence(U, w, groups, block=lift.block, estimator=est),
        spread=weight_spread(w, labels),
        steps=taken,
        seconds=time.perf_counter() - start,
    )
