"""ROC summaries of a membership score: AUC, advantage and TPR at a fixed low FPR.

A membership-inference attack (``metrics.md``, "Membership inference") gives every candidate a
score, higher meaning "more likely a training member". Members are the forget set (samples that
*were* trained on and have since been deleted), non-members a never-seen holdout. Following
Carlini et al. (S&P 2022, "Membership inference attacks from first principles"), the summaries
are

* ROC AUC, the Mann-Whitney probability ``P(s_member > s_nonmember) + P(=)/2``;
* the membership advantage ``max_t (TPR(t) - FPR(t))`` (Yeom et al., CSF 2018);
* TPR at FPR ``alpha``: the threshold is the non-members' ``1 - alpha`` quantile (the
  ``"higher"`` order statistic, so the realised FPR never exceeds ``alpha``) and a member
  counts as detected when its score is strictly above it.

Empty member or non-member sets give NaN for every summary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError

FloatArray = NDArray[np.float64]

#: The low false-positive rates reported by default (1% and 0.1%).
DEFAULT_FPRS: tuple[float, ...] = (0.01, 0.001)


@dataclass(frozen=True)
class AttackSummary:
    """ROC summaries of one attack on one model.

    Attributes
    ----------
    auc : ROC AUC (0.5 = no better than chance).
    advantage : ``max_t TPR - FPR`` in [0, 1].
    tpr_at_fpr : TPR at each requested FPR (keys are the FPRs).
    members, nonmembers : how many scores each side had.
    """

    auc: float
    advantage: float
    tpr_at_fpr: dict[float, float] = field(default_factory=dict)
    members: int = 0
    nonmembers: int = 0


def _scores(x: FloatArray, name: str) -> FloatArray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise InputError(f"{name} scores must be 1-D, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} scores contain non-finite values")
    return arr


def _labelled(members: FloatArray, nonmembers: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Labels (1: member) and scores of both sides, as scikit-learn's ROC functions take them."""
    pos, neg = _scores(members, "member"), _scores(nonmembers, "non-member")
    labels = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    return labels, np.concatenate([pos, neg])


def roc_auc(members: FloatArray, nonmembers: FloatArray) -> float:
    """ROC AUC, ``P(s_member > s_nonmember) + P(=)/2`` (scikit-learn's ``roc_auc_score``)."""
    labels, scores = _labelled(members, nonmembers)
    if labels.all() or not labels.any():
        return float("nan")
    from sklearn.metrics import roc_auc_score  # at first use: 0.3 s of every start

    return float(roc_auc_score(labels, scores))


def max_advantage(members: FloatArray, nonmembers: FloatArray) -> float:
    """``max_t TPR(t) - FPR(t)`` over every threshold ``s >= t`` (>= 0: ``t`` above all).

    The thresholds are those of scikit-learn's ``roc_curve`` (every distinct score, and one
    above them all).
    """
    labels, scores = _labelled(members, nonmembers)
    if labels.all() or not labels.any():
        return float("nan")
    from sklearn.metrics import roc_curve

    fpr, tpr, _ = roc_curve(labels, scores, drop_intermediate=False)
    return float(max(0.0, float(np.max(tpr - fpr))))


def tpr_at_fpr(members: FloatArray, nonmembers: FloatArray, fpr: float) -> float:
    """Share of members scored strictly above the non-members' ``1 - fpr`` quantile."""
    if not 0.0 < fpr < 1.0:
        raise InputError(f"fpr must lie in (0, 1), got {fpr}")
    pos, neg = _scores(members, "member"), _scores(nonmembers, "non-member")
    if not pos.size or not neg.size:
        return float("nan")
    threshold = float(np.quantile(neg, 1.0 - fpr, method="higher"))
    return float(np.mean(pos > threshold))


def summarize_attack(
    members: FloatArray, nonmembers: FloatArray, fprs: Sequence[float] = DEFAULT_FPRS
) -> AttackSummary:
    """Every summary of one attack (module docstring)."""
    return AttackSummary(
        auc=roc_auc(members, nonmembers),
        advantage=max_advantage(members, nonmembers),
        tpr_at_fpr={float(f): tpr_at_fpr(members, nonmembers, f) for f in fprs},
        members=int(np.size(members)),
        nonmembers=int(np.size(nonmembers)),
    )


def fpr_label(fpr: float) -> str:
    """Bounded label text of an FPR: ``0.01`` -> ``"0.01"``, ``0.001`` -> ``"0.001"``."""
    if not math.isfinite(fpr):
        raise InputError(f"fpr must be finite, got {fpr}")
    return f"{fpr:g}"
