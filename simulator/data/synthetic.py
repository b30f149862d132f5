"""Synthetic tabular data with a known causal / spurious / nuisance structure and a known shift.

Columns (see :func:`synthetic_truth`):

* ``0 .. n_causal-1`` — **causal** features.  Together with the nuisance columns they are drawn
  from ``N(0, Σ)`` with ``Σ = (1-ρ) I + ρ 11ᵀ`` (``ρ = correlation``), and the label is
  ``y = argmax_k (z_causal W)_k + noise·ε_k`` with a random ``W`` and ``ε ~ N(0, 1)``.
* ``n_causal`` — one planted **spurious** feature: with probability ``spurious_strength`` it sits
  near the anchor of the true class, otherwise near the anchor of a uniformly chosen other
  class (anchors ``linspace(-1, 1, K)``, spread ``SPURIOUS_SD``).
* the rest — **nuisance** features: correlated with the causal ones through ``Σ`` but absent from
  the label mechanism.

The in-distribution test set follows the training distribution.  ``ood_x``/``ood_y`` hold a
*shifted* test set whose spurious feature agrees with the label with probability
``shifted_strength`` (default ``1 - spurious_strength``: for two classes the correlation flips),
the covariate shift of the paper's OOD setting (Sec. "Experimental Setting") with ground truth:
a model that relies on the causal columns keeps its accuracy there, one that relies on the
spurious column loses it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.data.dataset import Dataset
from simulator.errors import ConfigError
from simulator.scenario.data_spec import SyntheticSpec

SPURIOUS_SD = 0.3
"""Standard deviation of the spurious feature around its class anchor."""


@dataclass(frozen=True)
class SyntheticTruth:
    """Ground truth of :func:`make_synthetic` for a spec (independent of the seed)."""

    causal_columns: tuple[int, ...]
    spurious_column: int
    nuisance_columns: tuple[int, ...]
    train_spurious_strength: float
    shifted_spurious_strength: float
    covariance: NDArray[np.float64]
    """Covariance of the causal + nuisance columns, in column order without the spurious one."""


def synthetic_truth(spec: SyntheticSpec) -> SyntheticTruth:
    """Which columns are causal, spurious and nuisance, and the strengths of the shift."""
    d = spec.n_features - 1
    cov = (1.0 - spec.correlation) * np.eye(d) + spec.correlation * np.ones((d, d))
    shifted = (
        1.0 - spec.spurious_strength if spec.shifted_strength is None else spec.shifted_strength
    )
    return SyntheticTruth(
        causal_columns=tuple(range(spec.n_causal)),
        spurious_column=spec.n_causal,
        nuisance_columns=tuple(range(spec.n_causal + 1, spec.n_features)),
        train_spurious_strength=spec.spurious_strength,
        shifted_spurious_strength=shifted,
        covariance=cov,
    )


@dataclass(frozen=True)
class _Mechanism:
    """The seeded parts of the task: covariance factor, label weights, spurious anchors."""

    chol: NDArray[np.float64]
    weights: NDArray[np.float64]
    anchors: NDArray[np.float64]


def _sample(
    spec: SyntheticSpec, mech: _Mechanism, n: int, strength: float, rng: np.random.Generator
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """``n`` rows and labels; the spurious column agrees with the label w.p. ``strength``."""
    base = rng.standard_normal((n, mech.chol.shape[0])) @ mech.chol.T
    causal = base[:, : spec.n_causal]
    logits = causal @ mech.weights + spec.noise * rng.standard_normal((n, spec.n_classes))
    y = np.argmax(logits, axis=1).astype(np.int64)
    aligned = rng.random(n) < strength
    other = (y + rng.integers(1, spec.n_classes, size=n)) % spec.n_classes
    shown = np.where(aligned, y, other)
    spurious = mech.anchors[shown] + SPURIOUS_SD * rng.standard_normal(n)
    x = np.column_stack([causal, spurious, base[:, spec.n_causal :]])
    return x.astype(np.float32), y


def make_synthetic(spec: SyntheticSpec, rng: np.random.Generator) -> Dataset:
    """Draw train, in-distribution test and shifted (``ood``) sets of the synthetic task.

    Parameters
    ----------
    spec : SyntheticSpec
        Sizes and strengths.
    rng : numpy.random.Generator
        The only source of randomness (mechanism weights, then train, test, shifted rows).

    Returns
    -------
    Dataset
        Modality ``"tabular"``; ``ood_x``/``ood_y`` are the shifted test set with true labels.

    Raises
    ------
    ConfigError
        Fewer training rows than classes (checked here, not by the schema, so that the
        pre-flight estimate can name a class count too large for memory first).
    """
    if spec.n_train < spec.n_classes:
        raise ConfigError(
            f"need n_train >= n_classes, got {spec.n_train} < {spec.n_classes}", "synthetic.n_train"
        )
    truth = synthetic_truth(spec)
    weights = rng.standard_normal((spec.n_causal, spec.n_classes))
    weights /= np.linalg.norm(weights, axis=0, keepdims=True)
    mech = _Mechanism(
        chol=np.asarray(np.linalg.cholesky(truth.covariance), dtype=np.float64),
        weights=weights,
        anchors=np.linspace(-1.0, 1.0, spec.n_classes),
    )
    x_train, y_train = _sample(spec, mech, spec.n_train, spec.spurious_strength, rng)
    x_test, y_test = _sample(spec, mech, spec.n_test, spec.spurious_strength, rng)
    n_shifted = spec.n_test if spec.n_shifted is None else spec.n_shifted
    x_ood, y_ood = _sample(spec, mech, n_shifted, truth.shifted_spurious_strength, rng)
    return Dataset(
        name="synthetic",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        num_classes=spec.n_classes,
        modality="tabular",
        class_names=tuple(f"class_{k}" for k in range(spec.n_classes)),
        class_labels=tuple(range(spec.n_classes)),
        ood_x=x_ood,
        ood_y=y_ood,
    )
