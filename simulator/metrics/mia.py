"""Membership-inference attacks on a head: population threshold attacks and MIA efficacy.

* Threshold attacks (Yeom et al., CSF 2018; Song and Mittal, USENIX Sec. 2021): score the
  forget set (members once, deleted since) and a never-seen holdout with each score of
  :mod:`simulator.metrics.scores` and summarise the ROC (:mod:`simulator.metrics.roc`).
  A model that really forgot gives the same numbers as the head retrained without the forget
  set (``metrics.md``: "compare every attack number with the same attack on the retrained
  model").
* MIA efficacy (Foster et al., AAAI 2024 "SSD"; Fan et al., ICLR 2024 "SalUn"): a logistic
  regression on the prediction entropy, trained on retained samples (members, label 1) against
  the holdout (non-members, label 0) in equal numbers, is applied to the forget set. The
  efficacy is SalUn's ``TN / |forget|``, the share of the forget set the attack calls a
  non-member (SSD reports ``1 -`` this); the target is the retrained head's value.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError, NumericalError
from simulator.metrics.roc import DEFAULT_FPRS, AttackSummary, summarize_attack
from simulator.metrics.scores import THRESHOLD_ATTACKS, MembershipScores

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def threshold_attacks(
    forget: MembershipScores,
    holdout: MembershipScores,
    *,
    attacks: Sequence[str] = THRESHOLD_ATTACKS,
    fprs: Sequence[float] = DEFAULT_FPRS,
) -> dict[str, AttackSummary]:
    """ROC summaries of each threshold attack: forget set (positive) vs holdout (negative)."""
    return {a: summarize_attack(forget.by_attack(a), holdout.by_attack(a), fprs) for a in attacks}


@dataclass(frozen=True)
class LogisticFit:
    """A one-feature logistic regression ``P(member | x) = sigmoid(coef * x + intercept)``."""

    coef: float
    intercept: float
    iterations: int

    def predict(self, x: FloatArray) -> NDArray[np.bool_]:
        """True where the model says "member" (probability above one half)."""
        return np.asarray(self.coef * np.asarray(x, dtype=np.float64) + self.intercept > 0.0)


def fit_logistic_1d(
    x: FloatArray, t: NDArray[np.bool_], *, c: float = 1.0, tol: float = 1e-10
) -> LogisticFit:
    """Minimise ``coef^2 / 2 + c * sum_i log(1 + exp(-t_i (coef x_i + b)))`` (``t_i = +-1``).

    scikit-learn's ``LogisticRegression(C=c)`` (L2 penalty on the coefficient only, the
    intercept unpenalised), solved by its Newton solver (``newton-cholesky``) to ``tol``.

    Raises
    ------
    InputError
        ``x`` and ``t`` are not non-empty 1-D arrays of one length, or ``x`` is not finite.
    NumericalError
        The solver did not converge in 100 Newton steps.
    """
    x = np.asarray(x, dtype=np.float64)
    labels = np.asarray(t, dtype=bool)
    if x.ndim != 1 or labels.shape != x.shape or not x.size:
        raise InputError(f"x and t must be non-empty 1-D arrays of one length, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise InputError("features contain non-finite values")
    from sklearn.exceptions import ConvergenceWarning  # at first use: 0.3 s of every start
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=c, solver="newton-cholesky", tol=tol, max_iter=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        try:
            model.fit(x[:, None], labels)
        except ConvergenceWarning as exc:
            raise NumericalError(f"one-feature logistic regression: {exc}") from exc
    return LogisticFit(float(model.coef_[0, 0]), float(model.intercept_[0]), int(model.n_iter_[0]))


@dataclass(frozen=True)
class EfficacyResult:
    """MIA efficacy (module docstring) and what it was computed from."""

    efficacy: float
    fit: LogisticFit | None
    train_per_class: int
    forget: int


def mia_efficacy(
    retain_entropy: FloatArray,
    holdout_entropy: FloatArray,
    forget_entropy: FloatArray,
    *,
    rng: np.random.Generator,
) -> EfficacyResult:
    """Share of the forget set an entropy attack trained on retain vs holdout calls non-member.

    The larger of the two training sides is subsampled (by ``rng``) to the size of the
    smaller one. NaN when any set is empty.
    """
    r = np.asarray(retain_entropy, dtype=np.float64)
    h = np.asarray(holdout_entropy, dtype=np.float64)
    f = np.asarray(forget_entropy, dtype=np.float64)
    k = min(r.size, h.size)
    if k == 0 or f.size == 0:
        return EfficacyResult(float("nan"), None, k, int(f.size))
    if r.size > k:
        r = r[np.sort(rng.choice(r.size, size=k, replace=False))]
    if h.size > k:
        h = h[np.sort(rng.choice(h.size, size=k, replace=False))]
    labels = np.concatenate([np.ones(k, dtype=bool), np.zeros(k, dtype=bool)])
    fit = fit_logistic_1d(np.concatenate([r, h]), labels)
    efficacy = float(np.mean(~fit.predict(f)))
    return EfficacyResult(efficacy, fit, k, int(f.size))
