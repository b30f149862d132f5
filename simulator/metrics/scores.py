"""Per-sample membership scores of the one-vs-rest head (higher = more member-like).

The head (``decoremoval.tex`` Sec. 3.3) is K one-vs-rest logistic models with scores
``s_k = w_k . z`` (K > 2), or one logistic model with score ``s`` for a binary task. Class
probabilities are the normalised one-vs-rest sigmoids (what scikit-learn's one-vs-rest
``predict_proba`` does), and for one column the logistic model's own::

    p_k = sigmoid(s_k) / sum_j sigmoid(s_j)          (K > 2 columns)
    p_1 = sigmoid(s),  p_0 = 1 - p_1                 (one column, two classes)

The population threshold attacks (Yeom et al., CSF 2018; Song and Mittal, USENIX Sec. 2021)
score each sample by

* ``loss``: minus the head's own training loss ``sum_k log(1 + exp(-y_k s_k))`` over its
  columns (the quantity the certified objective minimises, ``simulator.head.logistic``);
* ``confidence``: ``p_y``;
* ``entropy``: minus the prediction entropy ``-sum_k p_k log p_k``;
* ``modified_entropy``: minus Song and Mittal's ``Mentr = -(1 - p_y) log p_y -
  sum_{k != y} p_k log(1 - p_k)``;

and LiRA (Carlini et al., S&P 2022) uses the logit-scaled confidence
``phi = log p_y - log(sum_{k != y} p_k)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError
from simulator.head.logistic import sigmoid

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Probabilities are clipped to [TINY, 1 - TINY] inside logarithms.
TINY = 1e-12
#: Names of the threshold attacks, in report order.
THRESHOLD_ATTACKS: tuple[str, ...] = ("loss", "confidence", "entropy", "modified_entropy")


def _classes(scores: FloatArray) -> int:
    """Number of classes a head's decision scores (n, columns) describe."""
    return 2 if scores.shape[1] == 1 else int(scores.shape[1])


def _check(scores: FloatArray, y: IntArray) -> None:
    if scores.ndim != 2 or y.shape != (scores.shape[0],):
        raise InputError(f"scores must be (n, K) and labels (n,), got {scores.shape}, {y.shape}")
    k = _classes(scores)
    if y.size and (y.min() < 0 or y.max() >= k):
        raise InputError(f"labels must lie in [0, {k})")


def class_probabilities(scores: FloatArray) -> FloatArray:
    """Class probabilities (n, K) from decision scores ``Z @ W`` (module docstring)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.shape[1] == 1:
        return np.column_stack([sigmoid(-s[:, 0]), sigmoid(s[:, 0])])
    # log sigmoid(s) = -log(1 + exp(-s)); normalise in log space for stability
    log_sig = -np.logaddexp(0.0, -s)
    log_sig -= log_sig.max(axis=1, keepdims=True)
    p = np.exp(log_sig)
    out: FloatArray = p / p.sum(axis=1, keepdims=True)
    return out


def ovr_loss(scores: FloatArray, y: IntArray) -> FloatArray:
    """Per-sample training loss of the head, ``sum_k log(1 + exp(-y_k s_k))`` over columns (n,).

    One column: ``log(1 + exp(-y s))`` with ``y = +1`` for class 1 and ``-1`` for class 0.
    """
    _check(scores, y)
    if scores.shape[1] == 1:
        signs = np.where(y == 1, 1.0, -1.0)[:, None]
    else:
        signs = -np.ones_like(scores)
        signs[np.arange(y.size), y] = 1.0
    out: FloatArray = np.logaddexp(0.0, -signs * scores).sum(axis=1)
    return out


def lira_phi(probabilities: FloatArray, y: IntArray) -> FloatArray:
    """``log p_y - log(sum_{k != y} p_k)`` (n,), clipped away from +-inf."""
    _check(probabilities, y)
    py = np.clip(probabilities[np.arange(y.size), y], TINY, 1.0 - TINY)
    out: FloatArray = np.log(py) - np.log1p(-py)
    return out


@dataclass(frozen=True)
class MembershipScores:
    """Every per-sample score (n,) of one model on one set; higher = more member-like."""

    loss: FloatArray
    confidence: FloatArray
    entropy: FloatArray
    modified_entropy: FloatArray
    phi: FloatArray

    def by_attack(self, attack: str) -> FloatArray:
        """The score a threshold attack uses."""
        if attack not in THRESHOLD_ATTACKS:
            raise InputError(f"unknown attack {attack!r}; known: {', '.join(THRESHOLD_ATTACKS)}")
        value: FloatArray = getattr(self, attack)
        return value

    @property
    def raw_entropy(self) -> FloatArray:
        """The prediction entropy itself (>= 0), the feature of the MIA-efficacy attack."""
        return -self.entropy


def membership_scores(scores: FloatArray, y: IntArray) -> MembershipScores:
    """All scores from decision scores ``Z @ W`` (n, K) and true labels (module docstring)."""
    s = np.asarray(scores, dtype=np.float64)
    _check(s, y)
    p = class_probabilities(s)
    rows = np.arange(y.size)
    logp = np.log(np.clip(p, TINY, 1.0))
    log1mp = np.log(np.clip(1.0 - p, TINY, 1.0))
    entropy = -np.sum(p * logp, axis=1)
    py = p[rows, y]
    others = p * log1mp
    others[rows, y] = 0.0
    mentr = -(1.0 - py) * logp[rows, y] - others.sum(axis=1)
    return MembershipScores(
        loss=-ovr_loss(s, y),
        confidence=py,
        entropy=-entropy,
        modified_entropy=-mentr,
        phi=lira_phi(p, y),
    )
