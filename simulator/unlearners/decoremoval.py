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

Two modes (option ``mode``; ``decoremoval_extractor`` is ``decoremoval`` with
``mode=extractor``):

* ``head`` (default): the extractor is trained with the plain mean loss, decorrelation weights
  re-weight only the certified head's loss (our reduction of the paper's method).
* ``extractor``: decorrelation is also where the paper puts it, in representation learning
  ("iterative representation updating", Sec. 3.2 and Algorithm 1; StableNet, Zhang et al.,
  CVPR 2021, eq. 9): before every epoch after the first, weights are fitted cold on the
  extractor's *current* representation ``h`` of the training rows and re-weight that epoch's
  cross-entropy (:func:`simulator.models.local_train`'s ``reweigh``), so they are refitted as
  the representation changes. The head is then trained as in ``head`` mode.

What the certificate covers, in both modes: the linear head only. The extractor is trained
once on all training rows, deleted ones included, and never unlearnt. In ``extractor`` mode
those rows also shaped the extractor's *sample weights* (each epoch's weights are a function
of every row's representation), so the deleted rows influence the extractor twice, through
their loss terms and through everyone's weights; the (eps, delta) statement is still about
the head given this extractor, as in ``head`` mode.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from simulator.features.decorrelation import DecorrelationConfig, Objective, fit_weights
from simulator.models import ExtractorWithHead, extract_features
from simulator.seeds import child_seed
from simulator.unlearners.base import FloatArray, IntArray, ModelConfig, TrainingSet
from simulator.unlearners.features import DP_EXTRACTOR_NOTE, EpochWeights
from simulator.unlearners.headbased import (
    EXTRACTOR_NOTE,
    PUBLIC_EXTRACTOR_NOTE,
    CertifiedHeadUnlearner,
    SampleWeights,
)
from simulator.unlearners.networks import device_of

Mode = Literal["head", "extractor"]

#: The note of ``extractor`` mode (see the module docstring).
EXTRACTOR_MODE_NOTE = (
    "extractor mode: the extractor's training loss was re-weighted by decorrelation weights "
    "fitted on all training rows' representations, deleted ones included; the certificate "
    "covers the linear head only"
)


@dataclass(frozen=True)
class DecoRemovalConfig:
    """Options of DecoRemoval.

    Attributes
    ----------
    objective : Objective or None
        Overrides ``settings.decorrelation.objective`` (None: keep it).
    mode : Mode
        ``head`` (weights in the head only) or ``extractor`` (also in the extractor's training,
        refitted every epoch).
    """

    objective: Objective | None = None
    mode: Mode = "head"


@dataclass(frozen=True, eq=False)
class ColdRefit:
    """Re-weighting after a deletion: a cold :func:`fit_weights` on the retained rows."""

    config: DecorrelationConfig
    seed: int

    def __call__(
        self, retained_ids: IntArray, features: FloatArray, labels: IntArray
    ) -> FloatArray:
        """Decorrelation weights of the retained rows, fitted cold from the fixed seed."""
        if features.shape[0] < 2:  # nothing to decorrelate
            return np.ones(features.shape[0])
        result = fit_weights(
            features, config=self.config, rng=np.random.default_rng(self.seed), labels=labels
        )
        return np.asarray(result.weights, dtype=np.float64)


class DecoRemoval(CertifiedHeadUnlearner[DecoRemovalConfig]):
    """DecoRemoval: decorrelation-weighted certified head on frozen RFF features."""

    name: ClassVar[str] = "decoremoval"
    guarantee: ClassVar[str] = "(eps, delta)-certified head; extractor not certified"
    options_type: ClassVar[type[DecoRemovalConfig]] = DecoRemovalConfig

    def _config(self) -> DecorrelationConfig:
        config = self.settings.decorrelation
        if self.options.objective is not None:
            config = dataclasses.replace(config, objective=self.options.objective)
        return config

    def _extractor_notes(self, train: TrainingSet) -> tuple[str, ...]:
        if train.extractor_pool is not None:
            return (PUBLIC_EXTRACTOR_NOTE,)
        if self.settings.extractor_dp is not None:
            return (DP_EXTRACTOR_NOTE,)
        if self.options.mode == "extractor":
            return (EXTRACTOR_NOTE, EXTRACTOR_MODE_NOTE)
        return (EXTRACTOR_NOTE,)

    def _extractor_weights(self, train: TrainingSet, seed: int) -> EpochWeights | None:
        if self.options.mode != "extractor":
            return None
        config = self._config()
        device = device_of(self.settings)
        base = child_seed(seed, "decorrelation", "extractor")

        def weights(model: ExtractorWithHead, epoch: int) -> FloatArray | None:
            if epoch == 0:  # a random representation: nothing to decorrelate yet
                return None
            h = extract_features(model, train.x, device=device)
            result = fit_weights(
                h, config=config, rng=np.random.default_rng([base, epoch]), labels=train.y
            )
            return np.asarray(result.weights, dtype=np.float64)

        return weights

    def _sample_weights(self, Z: FloatArray, seed: int) -> SampleWeights:
        config = self._config()
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


class DecoRemovalExtractor(DecoRemoval):
    """DecoRemoval with decorrelation in the extractor's training too (``mode=extractor``)."""

    name: ClassVar[str] = "decoremoval_extractor"

    def __init__(
        self, settings: ModelConfig | None = None, options: DecoRemovalConfig | None = None
    ) -> None:
        given = options if options is not None else DecoRemovalConfig()
        super().__init__(settings, dataclasses.replace(given, mode="extractor"))
