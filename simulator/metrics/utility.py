"""Utility metrics.

Accuracy and support-weighted F1 (the paper's ACC and F1, Sec. 4.1), and the
distance of a head to the retrained one (``metrics.md``, "Utility").
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError

IntArray = NDArray[np.int64]


def _check(y_true: IntArray, y_pred: IntArray) -> None:
    if y_true.shape != y_pred.shape or y_true.ndim != 1:
        raise InputError(
            f"label arrays must be 1-D of equal length, got {y_true.shape}, {y_pred.shape}"
        )


def accuracy(y_true: IntArray, y_pred: IntArray) -> float:
    """Share of correct predictions; NaN for an empty set."""
    _check(y_true, y_pred)
    return float(np.mean(y_true == y_pred)) if y_true.size else float("nan")


def weighted_f1(y_true: IntArray, y_pred: IntArray) -> float:
    """F1 per class present in ``y_true``, averaged with weights equal to class support.

    scikit-learn's ``f1_score(average="weighted")``: a class never predicted has F1 0, a class
    only predicted weighs nothing. NaN for an empty set.
    """
    _check(y_true, y_pred)
    if not y_true.size:
        return float("nan")
    from sklearn.metrics import f1_score  # at first use: 0.3 s of every start

    return float(f1_score(y_true, y_pred, average="weighted", zero_division=0.0))


def prediction_agreement(a: IntArray, b: IntArray) -> float:
    """Share of samples on which two models predict the same class; NaN for an empty set."""
    _check(a, b)
    return float(np.mean(a == b)) if a.size else float("nan")


def relative_distance(W: NDArray[np.float64], W_ref: NDArray[np.float64]) -> float:
    """``||W - W_ref||_F / ||W_ref||_F``: distance of a head to the retrained one."""
    if W.shape != W_ref.shape:
        raise InputError(f"heads differ in shape: {W.shape} vs {W_ref.shape}")
    return float(np.linalg.norm(W - W_ref) / max(float(np.linalg.norm(W_ref)), 1e-300))
