"""Membership-inference maths: ROC summaries, per-sample scores, threshold attacks, MIA efficacy.

References: scikit-learn's ``roc_auc_score`` / ``roc_curve`` / ``LogisticRegression`` and
closed forms (Gaussian AUC, hand-computed entropies).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score, roc_curve

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


@settings(max_examples=60, deadline=None)
@given(pos=scores, neg=scores)
def test_auc_and_advantage_match_sklearn_with_ties(pos: list[float], neg: list[float]) -> None:
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    s = np.r_[pos, neg]
    if len(set(y)) < 2:
        return
    assert roc_auc(np.array(pos), np.array(neg)) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    fpr, tpr, _ = roc_curve(y, s)
    expected = max(0.0, float(np.max(tpr - fpr)))
    assert max_advantage(np.array(pos), np.array(neg)) == pytest.approx(expected, abs=1e-12)


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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_logistic_1d_matches_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.r_[rng.normal(0.3, 1, 150), rng.normal(-0.4, 0.7, 120)]
    t = np.r_[np.ones(150, bool), np.zeros(120, bool)]
    fit = fit_logistic_1d(x, t)
    ref = LogisticRegression(C=1.0, tol=1e-12, max_iter=10000).fit(x[:, None], t)
    assert fit.coef == pytest.approx(float(ref.coef_[0, 0]), abs=1e-6)
    assert fit.intercept == pytest.approx(float(ref.intercept_[0]), abs=1e-6)
    np.testing.assert_array_equal(fit.predict(x), ref.predict(x[:, None]))


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
