"""Offline LiRA with linear reference heads: the Gaussian score by hand, and a memorising head."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from simulator.errors import InputError
from simulator.head import LocalHeadData, train_head
from simulator.metrics import (
    LiraReferences,
    lira_scores,
    membership_scores,
    out_mask_for,
    reference_phi,
    roc_auc,
    threshold_attacks,
    tpr_at_fpr,
    train_references,
)


def test_scores_by_hand() -> None:
    refs = LiraReferences(np.zeros((3, 1, 2)), np.zeros((3, 2), dtype=bool))
    ref_phi = np.array([[1.0, 10.0], [2.0, 12.0], [3.0, 99.0]])
    out = np.array([[True, True], [True, True], [True, False]])  # target 1 was IN ref 2
    target = np.array([2.5, 11.0])
    # means over OUT refs: 2 and 11; pooled variance: ((1 + 0 + 1) + (1 + 1)) / ((3-1) + (2-1))
    std = np.sqrt(4.0 / 3.0)
    expected = norm.cdf((target - np.array([2.0, 11.0])) / std)
    np.testing.assert_allclose(lira_scores(refs, target, ref_phi, out), expected)
    # a target with no OUT reference gets the pooled OUT mean
    out2 = np.array([[True, False], [True, False], [True, False]])
    got = lira_scores(refs, np.array([2.0, 2.0]), ref_phi, out2)
    assert got[1] == pytest.approx(0.5)  # pooled mean is 2.0
    with pytest.raises(InputError):
        lira_scores(refs, target, ref_phi, np.zeros_like(out))


def _population(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, 60))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.integers(0, 2, 400).astype(np.int64)  # random labels: only memorisation helps
    return X, y


def test_lira_detects_members_of_a_memorising_head() -> None:
    X, y = _population(0)
    members, others = np.arange(200), np.arange(200, 400)
    rng = np.random.default_rng(1)
    lam, sigma = 1e-3, 0.01
    refs = train_references(X, y, np.arange(400), 2, count=16, lam=lam, sigma=sigma, rng=rng)
    assert refs.members.sum(axis=1).tolist() == [200] * 16
    b = rng.normal(0, sigma, size=(60, 1))  # a binary task is one column
    W = train_head(LocalHeadData(X[members], y[members], 2), b, lam=lam).W

    def scores(ids: np.ndarray) -> np.ndarray:
        phi = membership_scores(X[ids] @ W, y[ids]).phi
        return lira_scores(
            refs, phi, reference_phi(refs, X[ids], y[ids]), out_mask_for(refs, ids, ids.size)
        )

    s_in, s_out = scores(members), scores(others)
    auc = roc_auc(s_in, s_out)
    assert auc > 0.62  # measured 0.69 (d = 60 < n: the head can only partly memorise)
    assert 0.0 <= tpr_at_fpr(s_in, s_out, 0.01) <= 1.0
    # at least as strong as the population confidence attack on the same head
    pop = threshold_attacks(
        membership_scores(X[members] @ W, y[members]), membership_scores(X[others] @ W, y[others])
    )
    assert auc >= pop["confidence"].auc - 0.03

    # a head that never saw either set: no membership signal
    W0 = train_head(LocalHeadData(*_population(5), 2), b, lam=lam).W
    phi_in = membership_scores(X[members] @ W0, y[members]).phi
    phi_out = membership_scores(X[others] @ W0, y[others]).phi
    s0_in = lira_scores(
        refs, phi_in, reference_phi(refs, X[members], y[members]), out_mask_for(refs, members, 200)
    )
    s0_out = lira_scores(
        refs, phi_out, reference_phi(refs, X[others], y[others]), out_mask_for(refs, others, 200)
    )
    assert abs(roc_auc(s0_in, s0_out) - 0.5) < 0.1


def test_never_seen_targets_are_out_of_every_reference() -> None:
    X, y = _population(2)
    refs = train_references(
        X, y, np.arange(100), 2, count=2, lam=1e-2, sigma=0.1, rng=np.random.default_rng(0)
    )
    assert out_mask_for(refs, None, 7).all()
    mask = out_mask_for(refs, np.arange(100), 100)
    np.testing.assert_array_equal(mask, ~refs.members[:, :100])
    assert not refs.members[:, 100:].any()  # only retained rows are ever trained on
    with pytest.raises(InputError):
        train_references(
            X, y, np.arange(100), 2, count=0, lam=1e-2, sigma=0.1, rng=np.random.default_rng(0)
        )
