"""Offline LiRA (Carlini et al., S&P 2022) with cheap linear reference heads.

Reference ("shadow") heads are trained once, at the start of a run and again at retrain
checkpoints, each on a random half of the retained features with the same objective as the
certified head (``simulator.head.train_head``: one-vs-rest logistic, ``lam``, a fresh
perturbation ``b ~ N(0, sigma^2 I)``, uniform sample weights). For a target ``(z, y)`` only the
references that did *not* train on it ("OUT") are used: the attack fits a Gaussian to their
``phi = log p_y - log(sum_{k != y} p_k)`` (:func:`~simulator.metrics.scores.lira_phi`) with a
per-example mean and, as Carlini et al. recommend for few references, one global variance
(the pooled within-target variance), and scores the target model's ``phi`` one-sided::

    score = Phi((phi_target - mu_out) / sigma_out)          (higher = more member-like)

Targets with no OUT reference get the score of the pooled OUT distribution (mean of every
OUT value). Holdout samples are never trained on, so every reference is OUT for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr

from simulator.errors import InputError
from simulator.head import LocalHeadData, head_columns, train_head
from simulator.metrics.scores import class_probabilities, lira_phi

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

#: Floor of the OUT standard deviation (phi is a log-odds, O(1)).
MIN_STD = 1e-6


@dataclass(frozen=True)
class LiraReferences:
    """Reference heads and which training rows each one saw.

    Attributes
    ----------
    heads : (R, d, K) reference heads.
    members : (R, n_train) True where reference r trained on training row i.
    """

    heads: FloatArray
    members: BoolArray

    @property
    def count(self) -> int:
        """Number of reference heads R."""
        return int(self.heads.shape[0])


def train_references(  # noqa: PLR0913 (keyword-only hyperparameters of the reference heads)
    features: FloatArray,
    labels: IntArray,
    retained: IntArray,
    num_classes: int,
    *,
    count: int,
    lam: float,
    sigma: float,
    rng: np.random.Generator,
    tol: float = 1e-8,
) -> LiraReferences:
    """``count`` heads, each on a random half of the ``retained`` rows of ``features``."""
    if count < 1:
        raise InputError(f"need at least one reference head, got {count}")
    ids = np.asarray(retained, dtype=np.int64)
    if ids.size < 2:
        raise InputError("LiRA references need at least two retained rows")
    n, d = features.shape
    columns = head_columns(num_classes)
    heads = np.empty((count, d, columns))
    members = np.zeros((count, n), dtype=bool)
    for r in range(count):
        half = np.sort(rng.choice(ids, size=ids.size // 2, replace=False))
        members[r, half] = True
        data = LocalHeadData(features[half], labels[half], num_classes)
        b = rng.normal(0.0, sigma, size=(d, columns))
        heads[r] = train_head(data, b, lam=lam, tol=tol).W
    return LiraReferences(heads, members)


def reference_phi(refs: LiraReferences, Z: FloatArray, y: IntArray) -> FloatArray:
    """``phi`` of every reference on every target, shape (R, n)."""
    return np.stack([lira_phi(class_probabilities(Z @ W), y) for W in refs.heads])


def lira_scores(
    refs: LiraReferences,
    target_phi: FloatArray,
    ref_phi: FloatArray,
    out_mask: BoolArray,
) -> FloatArray:
    """One-sided offline LiRA scores (module docstring).

    Parameters
    ----------
    refs : the references (only their count is checked here).
    target_phi : (n,) ``phi`` of the attacked model on the targets.
    ref_phi : (R, n) ``phi`` of every reference on the targets (:func:`reference_phi`).
    out_mask : (R, n) True where reference r did not train on target j.
    """
    if ref_phi.shape != (refs.count, target_phi.size) or out_mask.shape != ref_phi.shape:
        raise InputError(
            f"shapes disagree: {refs.count} refs, {target_phi.shape} targets, "
            f"{ref_phi.shape} phi, {out_mask.shape} mask"
        )
    if not np.any(out_mask):
        raise InputError("no reference is OUT for any target")
    counts = out_mask.sum(axis=0)
    pooled = float(ref_phi[out_mask].mean())
    sums = np.where(out_mask, ref_phi, 0.0).sum(axis=0)
    mu = np.where(counts > 0, sums / np.maximum(counts, 1), pooled)
    # pooled within-target variance: sum of squared residuals / sum of (OUT count - 1)
    resid = np.where(out_mask, ref_phi - mu[None, :], 0.0)
    dof = float(np.maximum(counts - 1, 0).sum())
    std = MIN_STD if dof == 0 else max(float(np.sqrt(np.sum(resid**2) / dof)), MIN_STD)
    out: FloatArray = ndtr((target_phi - mu) / std)
    return out


def out_mask_for(refs: LiraReferences, train_ids: IntArray | None, n_targets: int) -> BoolArray:
    """OUT mask (R, n): training targets by id, or all-OUT for never-seen targets (``None``)."""
    if train_ids is None:
        return np.ones((refs.count, n_targets), dtype=bool)
    ids = np.asarray(train_ids, dtype=np.int64)
    if ids.size != n_targets:
        raise InputError(f"{ids.size} ids for {n_targets} targets")
    return np.asarray(~refs.members[:, ids])
