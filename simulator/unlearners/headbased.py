"""Shared part of the two certified-head methods (``cr`` and ``decoremoval``).

Both train the extractor and draw the RFF map once on every training row
(:func:`~simulator.unlearners.features.train_featurizer`), then train the project's
:class:`~simulator.head.CertifiedHead` on the frozen features and remove from it with its
certified Newton steps (Guo et al., ICML 2020; DecoRemoval Sec. 3.3, Algorithm 1). They
differ only in the sample weights of the head's loss: uniform for CR, decorrelation weights
fitted cold on the retained rows after every deletion for DecoRemoval.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simulator.head import CertifiedHead, LocalHeadData
from simulator.head.data import Reweigher
from simulator.methods import method
from simulator.models.featurizer import Featurizer
from simulator.seeds import child_rng
from simulator.unlearners.base import (
    BaseUnlearner,
    FitReport,
    FloatArray,
    IntArray,
    NoConfig,
    OptionsT,
    TrainingSet,
)
from simulator.unlearners.features import (
    DP_EXTRACTOR_NOTE,
    EpochWeights,
    head_proba,
    privacy_info,
    train_featurizer,
)

#: The note every result of a head-only certificate carries (``method.md`` section 1).
EXTRACTOR_NOTE = (
    "extractor trained on all training rows, deleted ones included: the certificate covers "
    "the linear head only, not the extractor"
)

#: The note of a head-only certificate's method under ``extractor_data: public``.
PUBLIC_EXTRACTOR_NOTE = (
    "extractor and RFF map fitted on the public pool only (no client's row): the certificate "
    "covers the whole model"
)


@dataclass
class HeadState:
    """Mutable state of a certified-head method: the frozen featurizer and the head."""

    featurizer: Featurizer
    head: CertifiedHead


@dataclass(frozen=True)
class SampleWeights:
    """Initial sample weights of the head's loss and the re-weighting run after deletions."""

    weights: FloatArray | None
    reweigh: Reweigher | None
    info: dict[str, float]


class CertifiedHeadUnlearner(BaseUnlearner[OptionsT]):
    """A certified head on frozen RFF features; subclasses choose the sample weights."""

    uses_extractor_pool: ClassVar[bool] = True

    @abstractmethod
    def _sample_weights(self, Z: FloatArray, seed: int) -> SampleWeights:
        """Weights for the rows of ``Z`` (all training rows) and their re-weighting."""

    def _extractor_weights(self, train: TrainingSet, seed: int) -> EpochWeights | None:
        """Per-epoch weights of the extractor's loss (None: plain training, both methods)."""
        return None

    def _extractor_notes(self, train: TrainingSet) -> tuple[str, ...]:
        if train.extractor_pool is not None:
            return (PUBLIC_EXTRACTOR_NOTE,)
        if self.settings.extractor_dp is not None:
            return (DP_EXTRACTOR_NOTE,)
        return (EXTRACTOR_NOTE,)

    def _fit(self, train: TrainingSet, seed: int) -> tuple[HeadState, FitReport]:
        extractor_rows = train if train.extractor_pool is None else train.extractor_pool
        featurizer = train_featurizer(
            train,
            np.arange(train.n),
            self.settings,
            seed,
            epoch_weights=self._extractor_weights(extractor_rows, seed),
        )
        Z = featurizer(train.x)
        sw = self._sample_weights(Z, seed)
        data = LocalHeadData(Z, train.y, train.num_classes, weights=sw.weights, reweigh=sw.reweigh)
        head = CertifiedHead(data, self.settings.head, rng=child_rng(seed, "head"))
        info = dict(sw.info)
        info["budget"] = head.budget
        info["training_residual"] = head.cumulative_residual
        info.update(privacy_info(featurizer))
        return HeadState(featurizer, head), FitReport(0.0, info, self._extractor_notes(train))

    def _remove(self, ids: IntArray) -> tuple[bool, dict[str, float]]:
        state: HeadState = self._state
        report = method(self.name).remove(state.head, [int(i) for i in ids])
        info = {
            "charged": report.charged,
            "budget_used_ratio": report.budget_used_ratio,
            "epsilon_spent": report.epsilon_spent,
        }
        return report.retrained, info

    def _predict_proba(self, x: NDArray[Any]) -> FloatArray:
        state: HeadState = self._state
        return head_proba(state.featurizer(x), state.head.W)

    @property
    def featurizer(self) -> Featurizer:
        """The frozen extractor and RFF map the head sits on (trained once, at :meth:`fit`)."""
        self._require_fit()
        state: HeadState = self._state
        return state.featurizer

    @property
    def head(self) -> CertifiedHead:
        """The certified head (for reports and tests)."""
        self._require_fit()
        state: HeadState = self._state
        return state.head


class UniformHeadUnlearner(CertifiedHeadUnlearner[NoConfig]):
    """A certified head with uniform sample weights and no options (``cr``, ``retrain_head``).

    The two differ only in what their registry entry's removal does to the head (a certified
    Newton step or a retrain from scratch).
    """

    options_type: ClassVar[type[NoConfig]] = NoConfig

    def _sample_weights(self, Z: FloatArray, seed: int) -> SampleWeights:
        return SampleWeights(None, None, {})
