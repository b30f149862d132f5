"""``decoremoval``: RFF features, decorrelation sample weights and certified removal.

DecoRemoval (``decoremoval.tex`` Sec. 3.2-3.4, Algorithm 1): the head's logistic terms are
weighted by decorrelation weights learnt on the frozen RFF features; after every deletion the
weights are fitted again **cold** on the retained rows (uniform start, same seed and schedule),
so they are exactly the weights a from-scratch run on ``D'`` would use, and the certified
Newton step targets the re-weighted objective, whose residual is what the certificate charges
(``docs/certified-head.md``). Unlike the federated runner, which learns one weight vector per
client, the central comparison learns one over all rows.

The objective is the settings' ``decorrelation.objective`` (``paper``, ``stablenet`` or
``class_conditional``; :mod:`simulator.features.decorrelation`), which the method option
``objective`` overrides (``--option decoremoval.objective=class_conditional``).
``FitReport.info`` reports the weights' spread, ``n_eff / n`` and every class's share of the
weight mass (``class_mass_<k>``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from simulator.features.decorrelation import DecorrelationConfig, Objective, fit_weights
from simulator.seeds import child_seed
from simulator.unlearners.base import FloatArray, IntArray
from simulator.unlearners.headbased import CertifiedHeadUnlearner, SampleWeights


@dataclass(frozen=True)
class DecoRemovalOptions:
    """``objective``: overrides ``settings.decorrelation.objective`` (None: keep it)."""

    objective: Objective | None = None


@dataclass(frozen=True, eq=False)
class ColdRefit:
    """Re-weighting after a deletion: a cold :func:`fit_weights` on the retained rows."""

    config: DecorrelationConfig
    seed: int

    def __call__(
        self, retained_ids: IntArray, features: FloatArray, labels: IntArray
    ) -> FloatArray:
        if features.shape[0] < 2:  # nothing to decorrelate
            return np.ones(features.shape[0])
        result = fit_weights(
            features, config=self.config, rng=np.random.default_rng(self.seed), labels=labels
        )
        return np.asarray(result.weights, dtype=np.float64)


class DecoRemoval(CertifiedHeadUnlearner[DecoRemovalOptions]):
    """DecoRemoval: decorrelation-weighted certified head on frozen RFF features."""

    name: ClassVar[str] = "decoremoval"
    guarantee: ClassVar[str] = "(eps, delta)-certified head; extractor not certified"
    options_type: ClassVar[type[DecoRemovalOptions]] = DecoRemovalOptions

    def _sample_weights(self, Z: FloatArray, seed: int) -> SampleWeights:
        config = self.settings.decorrelation
        if self.options.objective is not None:
            config = dataclasses.replace(config, objective=self.options.objective)
        refit = ColdRefit(config, child_seed(seed, "decorrelation"))
        labels = self.train.y
        result = fit_weights(Z, config=config, rng=np.random.default_rng(refit.seed), labels=labels)
        spread = result.spread
        info = {
            "weight_std": spread.std,
            "weight_min": spread.min,
            "weight_max": spread.max,
            "weight_ess_ratio": spread.effective_sample_size_ratio,
            "dependence_ratio": (
                result.objective_final / result.objective_initial
                if result.objective_initial > 0
                else 1.0
            ),
            **{f"class_mass_{c}": v for c, v in spread.class_mass.items()},
        }
        return SampleWeights(np.asarray(result.weights, dtype=np.float64), refit, info)
