"""Per-example audit of a certified removal: a lower bound on each removed row's epsilon.

A removal is (epsilon, delta)-certified when, for every set T of heads, the unlearned head
``U`` (trained on ``D``, the rows ``R`` then removed) and a head ``A(D')`` trained from scratch
on the retained rows satisfy ``P(U in T) <= e^eps P(A(D') in T) + delta`` and the same with the
two swapped (Guo et al., ICML 2020, Definition 1; the randomness is the loss perturbation
``b``). For one removed row and any test "score >= t", with ``alpha`` the rate at which
``A(D')`` passes it and ``beta`` the rate at which ``U`` fails it, this gives::

    eps >= log((1 - delta - beta) / alpha)        and        eps >= log((1 - delta - alpha) / beta)

(Kairouz et al., ICML 2015; the auditing form of Jagielski et al., NeurIPS 2020). The audit
draws ``S`` independent perturbations for each side (:func:`head_removal_audit`), scores each
removed row in each head by LiRA's logit-scaled confidence ``phi`` (Carlini et al., S&P 2022;
per example across retrained and unlearned models, as U-LiRA does: Hayes et al., 2024, and the
NeurIPS 2023 unlearning challenge), and bounds ``alpha`` and ``beta`` from above by
Clopper-Pearson intervals. Every candidate threshold (each observed score) is one test, so the
intervals are Bonferroni-corrected over all of them and both directions: with probability at
least ``confidence`` every bound of a row holds at once, and the row's bound
(:func:`epsilon_lower_bounds`) is then below its true epsilon. A bound above the certified
epsilon refutes the certificate; a bound below it is what a sound removal gives (it does not
prove the certificate: ``S`` draws resolve epsilon only up to about
``log(S / log(2 T / (1 - confidence)))``, 1.3 at ``S = 32``, 2.0 at 64).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.stats import beta as beta_distribution

from simulator.errors import InputError
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData
from simulator.metrics.scores import class_probabilities, lira_phi

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def clopper_pearson_upper(successes: NDArray[np.int64], trials: int, level: float) -> FloatArray:
    """One-sided upper confidence bounds, at ``1 - level``, on binomial rates.

    ``successes`` out of ``trials`` (array); the exact Clopper-Pearson bound, 1 when every
    trial succeeded.
    """
    k = np.asarray(successes, dtype=np.float64)
    upper = beta_distribution.ppf(1.0 - level, k + 1.0, np.maximum(trials - k, 1e-300))
    out: FloatArray = np.where(k >= trials, 1.0, upper)
    return out


def epsilon_lower_bounds(
    unlearned: FloatArray,
    retrained: FloatArray,
    *,
    delta: float,
    confidence: float = 0.95,
) -> FloatArray:
    """Per removed row, a lower confidence bound on its epsilon (module docstring).

    Parameters
    ----------
    unlearned, retrained : (S_u, m) and (S_r, m) scores of the m removed rows in independently
        drawn unlearned heads and heads retrained from scratch.
    delta : the certificate's delta.
    confidence : probability that every bound of a row holds (Bonferroni over the thresholds).

    Returns
    -------
    (m,) bounds, 0 where no test separates the two sides.
    """
    u, r = np.asarray(unlearned, dtype=np.float64), np.asarray(retrained, dtype=np.float64)
    if u.ndim != 2 or r.ndim != 2 or u.shape[1] != r.shape[1] or min(u.shape[0], r.shape[0]) < 1:
        raise InputError(f"scores must be (draws, rows) alike, got {u.shape} and {r.shape}")
    if not 0.0 < confidence < 1.0 or not 0.0 <= delta < 1.0:
        raise InputError(f"need 0 < confidence < 1 and 0 <= delta < 1, got {confidence}, {delta}")
    s_u, s_r, m = u.shape[0], r.shape[0], u.shape[1]
    thresholds = np.concatenate([u, r])  # (S_u + S_r, m): each observed score is one test
    tests = 2 * thresholds.shape[0]  # two directions (``>= t`` and ``< t``) per threshold
    level = (1.0 - confidence) / (2 * tests)  # two rates per test
    out = np.zeros(m)
    for j in range(m):
        t = thresholds[:, j][:, None]
        # "score >= t" says unlearned: alpha = P(retrained >= t), beta = P(unlearned < t)
        alpha = clopper_pearson_upper((r[:, j][None, :] >= t).sum(1), s_r, level)
        beta = clopper_pearson_upper((u[:, j][None, :] < t).sum(1), s_u, level)
        # the mirrored test "score < t" swaps what each side gets wrong
        alpha_m = clopper_pearson_upper((r[:, j][None, :] < t).sum(1), s_r, level)
        beta_m = clopper_pearson_upper((u[:, j][None, :] >= t).sum(1), s_u, level)
        candidates = [
            _log_ratio(1.0 - delta - beta, alpha),
            _log_ratio(1.0 - delta - alpha, beta),
            _log_ratio(1.0 - delta - beta_m, alpha_m),
            _log_ratio(1.0 - delta - alpha_m, beta_m),
        ]
        out[j] = max(0.0, float(np.max(np.concatenate(candidates))))
    return out


def _log_ratio(numerator: FloatArray, denominator: FloatArray) -> FloatArray:
    """``log(numerator / denominator)``, -inf where the numerator is not positive."""
    num = np.asarray(numerator, dtype=np.float64)
    safe = np.where(num > 0.0, num, 1.0)
    out: FloatArray = np.where(num > 0.0, np.log(safe) - np.log(denominator), -np.inf)
    return out


@dataclass(frozen=True)
class PerExampleAudit:
    """What :func:`head_removal_audit` measured.

    Attributes
    ----------
    removed : the removed rows (m,).
    epsilon_lower : (m,) lower confidence bounds on each row's epsilon.
    unlearned, retrained : (S, m) scores ``phi`` of the rows in each drawn head.
    retrains : how many of the unlearned heads' removals fell back to a retrain.
    certified_epsilon : the epsilon the certificate states for each unlearned head.
    """

    removed: IntArray
    epsilon_lower: FloatArray
    unlearned: FloatArray
    retrained: FloatArray
    retrains: int
    certified_epsilon: float


def head_removal_audit(  # noqa: PLR0913 (the audited mechanism's inputs, keyword-only)
    features: FloatArray,
    labels: IntArray,
    removed: IntArray,
    *,
    config: HeadConfig,
    num_classes: int,
    draws: int,
    seed: int,
    confidence: float = 0.95,
    remove: bool = True,
) -> PerExampleAudit:
    """Audit one removal of ``removed`` from the certified head on fixed ``features``.

    ``draws`` unlearned heads (each trained on every row with its own perturbation, then the
    rows removed in one batch) against ``draws`` heads trained on the retained rows, every
    head from its own child of ``seed``. ``remove=False`` audits a mechanism that forgets
    nothing (the heads trained on every row are released as they are): a sanity check that
    the audit sees a leak where there is one.
    """
    X = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    rows = np.unique(np.asarray(removed, dtype=np.int64))
    if rows.size == 0 or rows[0] < 0 or rows[-1] >= X.shape[0]:
        raise InputError("removed rows must be a non-empty set of row indices")
    keep = np.setdiff1d(np.arange(X.shape[0]), rows)
    rngs = np.random.default_rng(seed).spawn(2 * draws)
    unlearned, retrained, retrains, certified = [], [], 0, 0.0
    for s in range(draws):
        head = CertifiedHead(LocalHeadData(X, y, num_classes), config, rng=rngs[2 * s])
        if remove:
            report = head.remove([int(i) for i in rows])
            retrains += int(report.retrained)
        certified = max(certified, head.epsilon_spent)
        unlearned.append(_phi(head, X[rows], y[rows]))
        fresh = CertifiedHead(
            LocalHeadData(X[keep], y[keep], num_classes), config, rng=rngs[2 * s + 1]
        )
        retrained.append(_phi(fresh, X[rows], y[rows]))
    U, R = np.stack(unlearned), np.stack(retrained)
    bounds = epsilon_lower_bounds(U, R, delta=config.delta, confidence=confidence)
    return PerExampleAudit(rows, bounds, U, R, retrains, certified)


def _phi(head: CertifiedHead, X: FloatArray, y: IntArray) -> FloatArray:
    """LiRA's ``phi`` of the rows ``(X, y)`` in ``head`` (:mod:`simulator.metrics.scores`)."""
    return lira_phi(class_probabilities(X @ head.W), y)
