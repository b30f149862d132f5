"""Drift statistics against slow references (loop MMD^2, loop permutations) and, for the label
shift statistics from scipy, hand-computed cases, closed forms and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import InputError
from simulator.metrics import (
    chi2_homogeneity_p_value,
    js_divergence,
    label_distribution,
    label_shift,
    mmd2_unbiased,
    mmd_permutation_test,
    total_variation,
)


def mmd2_loop(X: np.ndarray, Y: np.ndarray, h: float) -> float:
    """Gretton et al. (2012) eq. 3 written as plain loops."""

    def k(a: np.ndarray, b: np.ndarray) -> float:
        return math.exp(-float(np.sum((a - b) ** 2)) / (2 * h * h))

    m, n = len(X), len(Y)
    xx = sum(k(X[i], X[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    yy = sum(k(Y[i], Y[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    xy = sum(k(X[i], Y[j]) for i in range(m) for j in range(n)) / (m * n)
    return xx + yy - 2 * xy


def test_mmd2_matches_the_loop_reference() -> None:
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(12, 3)), rng.normal(0.5, 1, size=(9, 3))
    assert mmd2_unbiased(X, Y, 1.3) == pytest.approx(mmd2_loop(X, Y, 1.3), rel=1e-10)
    # two points each, by hand: k(x1,x2) = exp(-1/2) with h = 1 at unit distance
    X2, Y2 = np.array([[0.0], [1.0]]), np.array([[10.0], [11.0]])
    cross = (math.exp(-50) + math.exp(-60.5) + math.exp(-40.5) + math.exp(-50)) / 4
    assert mmd2_unbiased(X2, Y2, 1.0) == pytest.approx(2 * math.exp(-0.5) - 2 * cross)
    with pytest.raises(InputError):
        mmd2_unbiased(X[:1], Y, 1.0)


def test_permutation_statistics_match_a_loop_over_the_same_relabellings() -> None:
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(8, 2)), rng.normal(0.3, 1, size=(6, 2))
    B = 40
    res = mmd_permutation_test(X, Y, 0.9, permutations=B, rng=np.random.default_rng(7))
    # replay the relabellings the vectorised code draws and recompute each one in loops
    replay = np.random.default_rng(7)
    pooled = np.vstack([X, Y])
    chosen = np.argsort(replay.random((B, 14)), axis=1)[:, :8]
    stats = []
    for idx in chosen:
        mask = np.zeros(14, dtype=bool)
        mask[idx] = True
        stats.append(mmd2_loop(pooled[mask], pooled[~mask], 0.9))
    observed = mmd2_loop(X, Y, 0.9)
    assert res.mmd2 == pytest.approx(observed, rel=1e-10)
    expected_p = (1 + sum(s >= observed - 1e-12 for s in stats)) / (1 + B)
    assert res.p_value == pytest.approx(expected_p)
    assert res.sizes == (8, 6) and res.permutations == B


def test_permutation_p_value_is_calibrated_and_powerful() -> None:
    rng = np.random.default_rng(2)
    # same distribution: p-values roughly uniform (few below 0.05)
    ps = [
        mmd_permutation_test(
            rng.normal(size=(40, 5)), rng.normal(size=(40, 5)), 2.0, permutations=100, rng=rng
        ).p_value
        for _ in range(40)
    ]
    assert sum(p < 0.05 for p in ps) <= 6
    assert 0.3 < float(np.mean(ps)) < 0.7
    # a mean shift of one standard deviation: the smallest possible p-value
    shifted = mmd_permutation_test(
        rng.normal(size=(60, 5)), rng.normal(1.0, 1, size=(60, 5)), 2.0, permutations=200, rng=rng
    )
    assert shifted.p_value == pytest.approx(1 / 201)
    assert shifted.mmd2 > 0.05


def entropy_bits(p: list[float]) -> float:
    return -sum(v * math.log2(v) for v in p if v > 0)


def test_label_shift_by_hand() -> None:
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.1, 0.1, 0.4, 0.4])
    assert total_variation(p, q) == pytest.approx(0.6)
    # JS = H((p + q) / 2) - (H(p) + H(q)) / 2, in bits
    m = [0.3, 0.2, 0.3, 0.2]
    expected = entropy_bits(m) - 0.5 * (entropy_bits([0.5, 0.3, 0.2]) + entropy_bits([0.1] * 2))
    expected += -0.5 * entropy_bits([0.4, 0.4])
    assert js_divergence(p, q) == pytest.approx(expected, rel=1e-12)
    # (1/2, 1/2) vs (1, 0): H(3/4, 1/4) - 1/2 = 0.3113 bits
    assert js_divergence(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == pytest.approx(
        -0.75 * math.log2(0.75) - 0.25 * math.log2(0.25) - 0.5, rel=1e-12
    )
    assert js_divergence(p, p) == 0.0
    assert js_divergence(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(1.0)
    assert math.isnan(js_divergence(np.full(2, np.nan), p[:2]))


def test_chi2_p_values_by_hand() -> None:
    # 2 x 3: expected counts = row total * column total / 120; the statistic by Pearson's sum,
    # and with 2 degrees of freedom the chi-square tail is exp(-x / 2)
    a = np.array([30.0, 20.0, 10.0, 0.0])
    b = np.array([15.0, 25.0, 20.0, 0.0])
    cols = [45.0, 45.0, 30.0]
    stat = sum(
        (obs - row * col / 120.0) ** 2 / (row * col / 120.0)
        for counts, row in ((a, 60.0), (b, 60.0))
        for obs, col in zip(counts[:3], cols, strict=True)
    )
    assert stat == pytest.approx(80 / 9, rel=1e-12)
    assert chi2_homogeneity_p_value(a, b) == pytest.approx(math.exp(-stat / 2), rel=1e-12)
    # 2 x 2, one degree of freedom: tail erfc(sqrt(x / 2)); no Yates correction (which would
    # shrink |obs - expected| by 1/2: statistic 5.4, p 0.020, not 0.0098)
    stat = 4 * 5.0**2 / 15.0
    assert chi2_homogeneity_p_value(np.array([10.0, 20.0]), np.array([20.0, 10.0])) == (
        pytest.approx(math.erfc(math.sqrt(stat / 2)), rel=1e-12)
    )
    assert chi2_homogeneity_p_value(np.array([5.0, 0]), np.array([7.0, 0])) == 1.0
    assert math.isnan(chi2_homogeneity_p_value(np.zeros(2), np.array([1.0, 2.0])))


counts = st.lists(st.integers(0, 30), min_size=2, max_size=6)


@settings(max_examples=80, deadline=None)
@given(a=counts, b=counts, scale=st.integers(1, 4))
def test_label_shift_properties(a: list[int], b: list[int], scale: int) -> None:
    k = min(len(a), len(b))
    ca, cb = np.array(a[:k], float), np.array(b[:k], float)
    if not ca.sum() or not cb.sum():
        return
    p, q = ca / ca.sum(), cb / cb.sum()
    js = js_divergence(p, q)
    # symmetric, in [0, 1], zero exactly for one distribution, at most the total variation
    assert js == pytest.approx(js_divergence(q, p), abs=1e-15)
    assert 0.0 <= js <= total_variation(p, q) + 1e-12
    assert js_divergence(p, p) == 0.0
    # the chi-square p-value: a probability, the same for the samples swapped, and 1 when
    # one sample is the other scaled (the same class distribution)
    pv = chi2_homogeneity_p_value(ca, cb)
    assert 0.0 <= pv <= 1.0
    assert pv == pytest.approx(chi2_homogeneity_p_value(cb, ca), rel=1e-12)
    assert chi2_homogeneity_p_value(ca, scale * ca) == pytest.approx(1.0)


def test_label_shift_from_labels() -> None:
    a = np.array([0, 0, 1, 1], dtype=np.int64)
    b = np.array([0, 1, 1, 1, 1, 1, 2, 2], dtype=np.int64)
    np.testing.assert_allclose(label_distribution(b, 3), [1 / 8, 5 / 8, 2 / 8])
    s = label_shift(a, b, 3)
    assert s.tv == pytest.approx(0.5 * (3 / 8 + 1 / 8 + 2 / 8))
    assert s.sizes == (4, 8)
    assert 0 < s.chi2_p_value < 1
    empty = label_shift(np.array([], dtype=np.int64), b, 3)
    assert math.isnan(empty.tv) and math.isnan(empty.js) and math.isnan(empty.chi2_p_value)
