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

from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import NDArray

from simulator.data.dataset import Dataset
from simulator.errors import ConfigError

SPURIOUS_SD = 0.3
"""Standard deviation of the spurious feature around its class anchor."""


@dataclass(frozen=True)
class SyntheticSpec:
    """Shape and strength of the synthetic task (validated on construction)."""

    n_train: int = 2000
    n_test: int = 1000
    n_features: int = 20
    n_classes: int = 2
    n_causal: int = 5
    spurious_strength: float = 0.9
    noise: float = 0.5
    correlation: float = 0.5
    shifted_strength: float | None = None
    n_shifted: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int | float) and not np.isfinite(value):
                raise ConfigError(f"must be finite, got {value}", f"synthetic.{f.name}")
        if self.n_classes < 2:
            raise ConfigError(
                f"need at least 2 classes, got {self.n_classes}", "synthetic.n_classes"
            )
        if self.n_train < self.n_classes or self.n_test < 1:
            raise ConfigError(
                f"need n_train >= n_classes and n_test >= 1 (got {self.n_train}, {self.n_test})",
                "synthetic.n_train",
            )
        if self.n_causal < 1 or self.n_features < self.n_causal + 1:
            raise ConfigError(
                f"need n_causal >= 1 and n_features >= n_causal + 1 (one spurious column); got "
                f"n_causal={self.n_causal}, n_features={self.n_features}",
                "synthetic.n_features",
            )
        for name in ("spurious_strength", "shifted_strength"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ConfigError(f"must lie in [0, 1], got {value}", f"synthetic.{name}")
        if self.noise < 0:
            raise ConfigError(f"must be >= 0, got {self.noise}", "synthetic.noise")
        d = self.n_features - 1
        lower = -1.0 / (d - 1) if d > 1 else -1.0
        if not lower < self.correlation < 1.0:
            raise ConfigError(
                f"equicorrelation over {d} columns must lie in ({lower:.4g}, 1) to be a valid "
                f"covariance, got {self.correlation}",
                "synthetic.correlation",
            )
        if self.n_shifted is not None and self.n_shifted < 1:
            raise ConfigError(f"must be >= 1, got {self.n_shifted}", "synthetic.n_shifted")


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
    chol: NDArray[np.float64]
    weights: NDArray[np.float64]
    anchors: NDArray[np.float64]


def _sample(
    spec: SyntheticSpec, mech: _Mechanism, n: int, strength: float, rng: np.random.Generator
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
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
    """
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
        ood_x=x_ood,
        ood_y=y_ood,
    )
