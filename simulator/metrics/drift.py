"""Distribution-shift statistics: kernel two-sample test on features, label-shift distances.

Feature shift (Gretton et al., JMLR 2012, "A kernel two-sample test", eq. 3): the unbiased
estimate of the squared maximum mean discrepancy between samples ``X`` (m rows) and ``Y``
(n rows) under the RBF kernel ``k(a, b) = exp(-||a - b||^2 / (2 h^2))``::

    MMD^2_u = sum_{i != j} k(x_i, x_j) / (m (m - 1)) + sum_{i != j} k(y_i, y_j) / (n (n - 1))
              - 2 sum_{i, j} k(x_i, y_j) / (m n)

The bandwidth ``h`` is the median heuristic computed once at the start of a run and then frozen
(so values over time are comparable). Its permutation p-value is
``(1 + #{b : MMD^2_b >= MMD^2_obs}) / (1 + B)`` over ``B`` random relabellings of the pooled
sample, all computed from one kernel matrix with a (B, m + n) membership matrix.

Label shift between two label samples with class distributions ``p`` and ``q``: total
variation ``(1/2) sum |p - q|``, Jensen-Shannon divergence in bits (the square of scipy's
``jensenshannon``, a distance) and Pearson's chi-square test of homogeneity on the 2 x K counts
(scipy's ``chi2_contingency``, no continuity correction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def rbf_kernel(A: FloatArray, B: FloatArray, bandwidth: float) -> FloatArray:
    """``exp(-||a - b||^2 / (2 h^2))`` for every row pair (m, n)."""
    if not bandwidth > 0:
        raise InputError(f"bandwidth must be positive, got {bandwidth}")
    sq = np.sum(A * A, axis=1)[:, None] + np.sum(B * B, axis=1)[None, :] - 2.0 * (A @ B.T)
    out: FloatArray = np.exp(-np.maximum(sq, 0.0) / (2.0 * bandwidth**2))
    return out


def _pair_check(X: FloatArray, Y: FloatArray) -> None:
    if X.ndim != 2 or Y.ndim != 2 or X.shape[1] != Y.shape[1]:
        raise InputError(f"samples must be (m, d) and (n, d), got {X.shape} and {Y.shape}")
    if X.shape[0] < 2 or Y.shape[0] < 2:
        raise InputError(f"MMD^2_u needs >= 2 rows per sample, got {X.shape[0]}, {Y.shape[0]}")


def mmd2_unbiased(X: FloatArray, Y: FloatArray, bandwidth: float) -> float:
    """The unbiased ``MMD^2_u`` (module docstring); may be slightly negative."""
    _pair_check(X, Y)
    m, n = X.shape[0], Y.shape[0]
    kxx, kyy, kxy = (
        rbf_kernel(X, X, bandwidth),
        rbf_kernel(Y, Y, bandwidth),
        rbf_kernel(X, Y, bandwidth),
    )
    sxx = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    syy = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(sxx + syy - 2.0 * kxy.mean())


@dataclass(frozen=True)
class MMDTest:
    """Observed ``MMD^2_u`` and its permutation p-value (module docstring).

    Attributes
    ----------
    mmd2 : float
        The unbiased estimate ``MMD^2_u`` of the observed split (Gretton et al. 2012, eq. 3);
        it can be slightly negative.
    p_value : float
        ``(1 + #{b : MMD^2_b >= MMD^2_obs}) / (1 + permutations)``, never below
        ``1 / (1 + permutations)``.
    permutations : int
        Number ``B`` of random relabellings.
    sizes : tuple of int
        ``(m, n)``: rows of ``X`` and of ``Y``.
    """

    mmd2: float
    p_value: float
    permutations: int
    sizes: tuple[int, int]


def mmd_permutation_test(
    X: FloatArray,
    Y: FloatArray,
    bandwidth: float,
    *,
    permutations: int,
    rng: np.random.Generator,
) -> MMDTest:
    """``MMD^2_u`` and its permutation p-value, every permutation from one kernel matrix."""
    _pair_check(X, Y)
    if permutations < 1:
        raise InputError(f"permutations must be >= 1, got {permutations}")
    m, n = X.shape[0], Y.shape[0]
    N = m + n
    K = rbf_kernel(np.vstack([X, Y]), np.vstack([X, Y]), bandwidth)
    np.fill_diagonal(K, 0.0)
    total = float(K.sum())
    # row 0 is the observed split, rows 1.. random relabellings with m rows on the X side
    A = np.zeros((permutations + 1, N))
    A[0, :m] = 1.0
    chosen = np.argsort(rng.random((permutations, N)), axis=1)[:, :m]
    np.put_along_axis(A[1:], chosen, 1.0, axis=1)
    AK = A @ K
    sxx = np.sum(AK * A, axis=1)
    sxy = AK.sum(axis=1) - sxx
    syy = total - 2.0 * sxy - sxx
    stats = sxx / (m * (m - 1)) + syy / (n * (n - 1)) - 2.0 * sxy / (m * n)
    observed = float(stats[0])
    exceed = int(np.sum(stats[1:] >= observed - 1e-12 * max(1.0, abs(observed))))
    return MMDTest(observed, (1 + exceed) / (1 + permutations), permutations, (m, n))


def label_distribution(y: IntArray, num_classes: int) -> FloatArray:
    """Class frequencies (K,) of a label sample; NaN everywhere when it is empty."""
    counts = np.bincount(np.asarray(y, dtype=np.int64), minlength=num_classes).astype(float)
    if counts.size != num_classes:
        raise InputError(f"labels exceed {num_classes} classes")
    total = counts.sum()
    out: FloatArray = counts / total if total else np.full(num_classes, np.nan)
    return out


def total_variation(p: FloatArray, q: FloatArray) -> float:
    """``(1/2) sum_k |p_k - q_k|`` in [0, 1]."""
    return float(0.5 * np.sum(np.abs(np.asarray(p) - np.asarray(q))))


def js_divergence(p: FloatArray, q: FloatArray) -> float:
    """Jensen-Shannon divergence in bits, in [0, 1] (0 log 0 = 0); NaN for a NaN distribution.

    The square of scipy's ``jensenshannon(p, q, base=2)`` (a distance, the divergence's square
    root). Rounding can leave the divergence of two nearly equal distributions a hair below
    zero, whose square root is NaN: that is 0.
    """
    from scipy.spatial.distance import jensenshannon  # at first use, not at every start

    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if np.any(np.isnan(p)) or np.any(np.isnan(q)):
        return float("nan")
    with np.errstate(invalid="ignore"):
        distance = float(jensenshannon(p, q, base=2.0))
    return 0.0 if np.isnan(distance) else min(1.0, distance**2)


def chi2_homogeneity_p_value(counts_a: FloatArray, counts_b: FloatArray) -> float:
    """Pearson chi-square p-value of ``H0: same class distribution`` for two count vectors.

    scipy's ``chi2_contingency`` on the 2 x K table, without Yates' continuity correction (which
    it would apply to a 2 x 2 table). Classes absent from both samples are dropped; fewer than
    two remaining classes gives 1.0 (nothing to distinguish), an empty sample NaN.
    """
    table = np.stack([np.asarray(counts_a, float), np.asarray(counts_b, float)])
    table = table[:, table.sum(axis=0) > 0]
    if np.any(table.sum(axis=1) == 0):
        return float("nan")
    if table.shape[1] < 2:
        return 1.0
    from scipy.stats import chi2_contingency

    return float(chi2_contingency(table, correction=False).pvalue)


@dataclass(frozen=True)
class LabelShift:
    """Label-shift statistics between two label samples with class distributions ``p``, ``q``.

    Attributes
    ----------
    tv : float
        Total variation ``(1/2) sum |p - q|``, in [0, 1].
    js : float
        Jensen-Shannon divergence in bits, in [0, 1].
    chi2_p_value : float
        Pearson's chi-square test of homogeneity on the 2 x K counts (NaN for an empty sample).
    sizes : tuple of int
        Number of labels in each sample.
    """

    tv: float
    js: float
    chi2_p_value: float
    sizes: tuple[int, int]


def label_shift(a: IntArray, b: IntArray, num_classes: int) -> LabelShift:
    """TV, JS (bits) and chi-square p-value between the labels ``a`` and ``b``."""
    ca = np.bincount(np.asarray(a, np.int64), minlength=num_classes).astype(float)
    cb = np.bincount(np.asarray(b, np.int64), minlength=num_classes).astype(float)
    p, q = label_distribution(a, num_classes), label_distribution(b, num_classes)
    return LabelShift(
        total_variation(p, q),
        js_divergence(p, q),
        chi2_homogeneity_p_value(ca, cb),
        (int(np.size(a)), int(np.size(b))),
    )
