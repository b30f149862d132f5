"""``retrain``: extractor, RFF map and head trained from scratch on the retained rows.

The reference every other method is compared with (``method.md`` section 4: "the upper bound
for accuracy; closer to retrain is better"): after every removal the whole model split of
:mod:`simulator.unlearners.features` is retrained on the rows still retained, with the same
seeds, so its model depends only on the retained data. The head is the exact minimiser of the
L2-regularised one-vs-rest logistic loss (``simulator.head.train_head``) *without* the loss
perturbation ``b`` by default (``perturb=False``): retraining needs no certificate, and the
perturbation's cost is then visible in the certified methods' numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simulator.head import LocalHeadData, train_head
from simulator.models.featurizer import Featurizer
from simulator.seeds import child_rng
from simulator.unlearners.base import BaseUnlearner, FitReport, FloatArray, IntArray, TrainingSet
from simulator.unlearners.features import head_proba, privacy_info, train_featurizer

#: What a retrain from scratch retrains under ``extractor_data: public``.
POOL_NOTE = (
    "extractor and RFF map fitted on the public pool only, which no removal touches: a "
    "retrain from scratch retrains the head on the retained rows, with the same extractor"
)
#: What a retrain from scratch retrains under ``extractor_data: dp``.
DP_NOTE = (
    "every retrain from scratch trains the extractor again by DP-FedAvg on the retained rows, "
    "with fresh accountants (fits.json: extractor)"
)


@dataclass(frozen=True)
class RetrainConfig:
    """``perturb``: draw the head's ``b ~ N(0, sigma^2 I)`` as the certified heads do."""

    perturb: bool = False


@dataclass
class RetrainState:
    """The model trained on the current retained rows."""

    featurizer: Featurizer
    W: FloatArray
    seed: int


class Retrain(BaseUnlearner[RetrainConfig]):
    """Retraining from scratch after every removal (exact unlearning, the reference)."""

    name: ClassVar[str] = "retrain"
    guarantee: ClassVar[str] = "exact (model depends only on retained rows)"
    options_type: ClassVar[type[RetrainConfig]] = RetrainConfig
    uses_extractor_pool: ClassVar[bool] = True

    def _fit(self, train: TrainingSet, seed: int) -> tuple[RetrainState, FitReport]:
        notes: tuple[str, ...] = () if train.extractor_pool is None else (POOL_NOTE,)
        if self.settings.extractor_dp is not None:
            notes = (*notes, DP_NOTE)
        state = self._train_on(np.arange(train.n, dtype=np.int64), seed)
        return state, FitReport(0.0, privacy_info(state.featurizer), notes)

    def _train_on(self, rows: IntArray, seed: int) -> RetrainState:
        train, settings = self.train, self.settings
        featurizer = train_featurizer(train, rows, settings, seed)
        data = LocalHeadData(featurizer(train.x[rows]), train.y[rows], train.num_classes)
        d, k = data.dim, data.num_classes
        b = np.zeros((d, k))
        if self.options.perturb:
            b = child_rng(seed, "head").normal(0.0, settings.head.sigma, size=(d, k))
        # a binary task has one column: the head uses b's first (the draw keeps its old size)
        b = b[:, : data.columns]
        result = train_head(data, b, lam=settings.head.lam, tol=settings.head.tol)
        return RetrainState(featurizer, result.W, seed)

    def _remove(self, ids: IntArray) -> tuple[bool, dict[str, float]]:
        state: RetrainState = self._state
        rows = self.retained_ids
        if rows.size == 0:  # nothing left to learn from: a zero head (uniform predictions)
            self._state = RetrainState(state.featurizer, np.zeros_like(state.W), state.seed)
        else:
            self._state = self._train_on(rows, state.seed)
        return True, {}

    def _predict_proba(self, x: NDArray[Any]) -> FloatArray:
        state: RetrainState = self._state
        return head_proba(state.featurizer(x), state.W)

    @property
    def featurizer(self) -> Featurizer:
        """The extractor and RFF map trained on the rows retained at the last removal."""
        self._require_fit()
        state: RetrainState = self._state
        return state.featurizer
