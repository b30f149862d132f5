"""Membership-inference maths: ROC summaries, per-sample scores, threshold attacks, MIA efficacy.

The ROC summaries and the logistic fit come from scikit-learn; they are checked against their
definitions (every member-non-member pair, every threshold, the fit's optimality conditions)
and closed forms (Gaussian AUC, hand-computed entropies), never against scikit-learn itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from simulator.errors import InputError
from simulator.metrics import (
    class_probabilities,
    fit_logistic_1d,
    max_advantage,
    membership_scores,
    mia_efficacy,
    ovr_loss,
    roc_auc,
    summarize_attack,
    threshold_attacks,
    tpr_at_fpr,
)

scores = st.lists(st.integers(-5, 5).map(float), min_size=1, max_size=40)


def auc_by_pairs(pos: list[float], neg: list[float]) -> float:
    """``P(s_member > s_nonmember) + P(=) / 2`` over every pair."""
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def advantage_by_thresholds(pos: list[float], neg: list[float]) -> float:
    """``max_t TPR(t) - FPR(t)``, a member flagged when ``s >= t``, over every score and +inf."""
    return max(
        sum(p >= t for p in pos) / len(pos) - sum(n >= t for n in neg) / len(neg)
        for t in [*pos, *neg, math.inf]
    )


@settings(max_examples=60, deadline=None)
@given(pos=scores, neg=scores)
def test_auc_and_advantage_follow_their_definitions_with_ties(
    pos: list[float], neg: list[float]
) -> None:
    assert roc_auc(np.array(pos), np.array(neg)) == pytest.approx(auc_by_pairs(pos, neg), abs=1e-12)
    expected = advantage_by_thresholds(pos, neg)
    assert max_advantage(np.array(pos), np.array(neg)) == pytest.approx(expected, abs=1e-12)
    # swapping the sides mirrors the AUC; shifting and scaling every score changes nothing
    assert roc_auc(np.array(neg), np.array(pos)) == pytest.approx(1 - auc_by_pairs(pos, neg))
    moved = [3.0 * v - 7.0 for v in pos], [3.0 * v - 7.0 for v in neg]
    assert roc_auc(*map(np.array, moved)) == pytest.approx(auc_by_pairs(pos, neg), abs=1e-12)


def test_known_answers() -> None:
    assert roc_auc(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert roc_auc(np.array([1.0, 2.0]), np.array([3.0, 4.0])) == 0.0
    assert roc_auc(np.array([1.0, 1.0]), np.array([1.0])) == 0.5
    assert max_advantage(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert max_advantage(np.array([1.0]), np.array([2.0])) == 0.0
    # empty side: undefined
    assert math.isnan(roc_auc(np.array([]), np.array([1.0])))
    s = summarize_attack(np.array([]), np.array([1.0, 2.0]))
    assert math.isnan(s.auc) and all(math.isnan(v) for v in s.tpr_at_fpr.values())


def test_tpr_at_fpr_threshold_is_the_holdout_quantile() -> None:
    neg = np.arange(1000, dtype=float)  # threshold at 1% FPR: the 990th order statistic = 990
    pos = np.array([989.0, 990.0, 991.0, 2000.0])
    assert tpr_at_fpr(pos, neg, 0.01) == pytest.approx(0.5)  # 991 and 2000 are strictly above
    # the realised FPR never exceeds the target
    t = np.quantile(neg, 0.99, method="higher")
    assert np.mean(neg > t) <= 0.01
    with pytest.raises(InputError):
        tpr_at_fpr(pos, neg, 0.0)


def test_gaussian_scores_give_the_closed_form_auc() -> None:
    rng = np.random.default_rng(0)
    mu = 1.0
    pos, neg = rng.normal(mu, 1, 20000), rng.normal(0, 1, 20000)
    # AUC = P(X > Y) = Phi(mu / sqrt 2); TPR at FPR a = 1 - Phi(z_{1-a} - mu)
    assert roc_auc(pos, neg) == pytest.approx(norm.cdf(mu / math.sqrt(2)), abs=0.01)
    assert tpr_at_fpr(pos, neg, 0.01) == pytest.approx(1 - norm.cdf(norm.ppf(0.99) - mu), abs=0.02)
    # advantage = 2 Phi(mu / 2) - 1 (best threshold halfway)
    assert max_advantage(pos, neg) == pytest.approx(2 * norm.cdf(mu / 2) - 1, abs=0.02)


def test_scores_by_hand() -> None:
    s = np.array([[0.0, 0.0], [2.0, -1.0]])
    y = np.array([0, 1])
    p = class_probabilities(s)
    sig = 1 / (1 + np.exp(-s))
    np.testing.assert_allclose(p, sig / sig.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(p[0], [0.5, 0.5])
    m = membership_scores(s, y)
    # uniform row: entropy ln 2, confidence 1/2, Mentr = -(1/2) ln(1/2) - (1/2) ln(1/2) = ln 2
    assert m.entropy[0] == pytest.approx(-math.log(2))
    assert m.confidence[0] == pytest.approx(0.5)
    assert m.modified_entropy[0] == pytest.approx(-math.log(2))
    assert m.phi[0] == pytest.approx(0.0)
    # loss is the head's own one-vs-rest logistic loss
    expected = math.log1p(math.exp(2.0)) + math.log1p(math.exp(1.0))  # y = (-1, +1)
    assert ovr_loss(s, y)[1] == pytest.approx(expected)
    assert m.loss[1] == pytest.approx(-expected)
    # row 2 predicts class 0 with high confidence but the label is 1: low confidence
    assert m.confidence[1] == pytest.approx(p[1, 1])
    assert m.phi[1] == pytest.approx(math.log(p[1, 1] / p[1, 0]))


def test_threshold_attacks_separate_overconfident_members() -> None:
    rng = np.random.default_rng(1)
    n, k = 400, 3
    y_m, y_h = rng.integers(0, k, n), rng.integers(0, k, n)
    # members: fitted (true class +3, others -3); holdout: random scores
    s_m = rng.normal(-3, 1, (n, k))
    s_m[np.arange(n), y_m] += 6.0
    s_h = rng.normal(0, 1, (n, k))
    res = threshold_attacks(membership_scores(s_m, y_m), membership_scores(s_h, y_h))
    assert set(res) == {"loss", "confidence", "entropy", "modified_entropy"}
    for name in ("loss", "confidence", "modified_entropy", "entropy"):
        assert res[name].auc > 0.95, name
        assert res[name].tpr_at_fpr[0.01] > 0.5, name
    # the same distribution on both sides: no signal
    same = threshold_attacks(
        membership_scores(s_h[:200], y_h[:200]), membership_scores(s_h[200:], y_h[200:])
    )
    assert all(abs(r.auc - 0.5) < 0.1 for r in same.values())


def logistic_objective(coef: float, intercept: float, x: np.ndarray, sign: np.ndarray) -> float:
    """``coef^2 / 2 + sum_i log(1 + exp(-t_i (coef x_i + b)))`` (C = 1)."""
    return 0.5 * coef**2 + float(np.sum(np.logaddexp(0.0, -sign * (coef * x + intercept))))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_logistic_1d_solves_its_objective(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.r_[rng.normal(0.3, 1, 150), rng.normal(-0.4, 0.7, 120)]
    t = np.r_[np.ones(150, bool), np.zeros(120, bool)]
    sign = np.where(t, 1.0, -1.0)
    fit = fit_logistic_1d(x, t)
    # first-order conditions: the penalised coefficient's and the free intercept's gradients
    q = 1.0 / (1.0 + np.exp(sign * (fit.coef * x + fit.intercept)))  # sigmoid(-margin)
    assert fit.coef - float(np.sum(sign * x * q)) == pytest.approx(0.0, abs=1e-7)
    assert float(np.sum(sign * q)) == pytest.approx(0.0, abs=1e-7)
    best = logistic_objective(fit.coef, fit.intercept, x, sign)
    for dc, db in [(1e-3, 0), (-1e-3, 0), (0, 1e-3), (0, -1e-3)]:
        assert best < logistic_objective(fit.coef + dc, fit.intercept + db, x, sign)
    # members have the larger x: a positive slope; prediction is the sign of the margin
    assert fit.coef > 0
    np.testing.assert_array_equal(fit.predict(x), fit.coef * x + fit.intercept > 0)


def test_logistic_1d_on_mirrored_data_has_no_intercept() -> None:
    x = np.random.default_rng(4).normal(1.0, 1.0, 200)
    fit = fit_logistic_1d(np.r_[x, -x], np.r_[np.ones(200, bool), np.zeros(200, bool)])
    assert fit.intercept == pytest.approx(0.0, abs=1e-9)
    assert fit.coef > 0
    with pytest.raises(InputError):
        fit_logistic_1d(np.array([1.0, np.nan]), np.array([True, False]))


def test_mia_efficacy_known_answers() -> None:
    rng = np.random.default_rng(3)
    members = rng.uniform(0.0, 0.1, 500)  # retained rows: confident (low entropy)
    holdout = rng.uniform(0.6, 0.7, 500)  # unseen rows: uncertain
    # a forget set that looks like the holdout has been forgotten (efficacy 1) ...
    assert mia_efficacy(members, holdout, rng.uniform(0.6, 0.7, 50), rng=rng).efficacy == 1.0
    # ... one that looks like the members has not (efficacy 0)
    assert mia_efficacy(members, holdout, rng.uniform(0.0, 0.1, 50), rng=rng).efficacy == 0.0
    res = mia_efficacy(members, holdout[:100], holdout[:10], rng=rng)
    assert res.train_per_class == 100  # balanced by subsampling the larger side
    assert math.isnan(mia_efficacy(members, holdout, np.array([]), rng=rng).efficacy)
