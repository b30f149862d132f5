"""The head-based methods' model split: extractor -> RFF -> clip -> linear head.

``x --extractor--> h --RFF (fixed)--> z --clip ||z|| <= 1--> head`` (``method.md`` section 1;
DecoRemoval Sec. 3.2). The comparison trains the extractor centrally on the rows it is given,
with the shared :class:`~simulator.unlearners.base.ModelSettings`; for ``cr`` and
``decoremoval`` those are all training rows, so deleted samples did shape the extractor: their
certificate covers the head only, and the results say so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth
from simulator.metrics.scores import class_probabilities
from simulator.models import ExtractorWithHead, extract_features
from simulator.unlearners.base import FloatArray, IntArray, ModelSettings, TrainingSet
from simulator.unlearners.networks import build_network, device_of, train_network
from simulator.unlearners.seeds import child_rng, child_torch


@dataclass
class Featurizer:
    """A trained, frozen extractor and RFF map: raw inputs to head features of norm <= 1."""

    model: ExtractorWithHead
    rff: RandomFourierFeatures
    device: torch.device

    def __call__(self, x: NDArray[Any]) -> FloatArray:
        h = extract_features(self.model, x, device=self.device)
        return clip_to_unit_ball(self.rff.transform(h))


#: Per-epoch weights of the extractor's training loss, given the network being trained.
EpochWeights = Callable[[ExtractorWithHead, int], FloatArray | None]


def train_featurizer(
    train: TrainingSet,
    rows: IntArray,
    settings: ModelSettings,
    seed: int,
    *,
    epoch_weights: EpochWeights | None = None,
) -> Featurizer:
    """Train the extractor on ``rows`` and draw the RFF map, both from ``seed``'s children.

    The median bandwidth heuristic (when ``settings.rff_bandwidth`` is None) is computed on the
    extractor features of ``rows``. ``epoch_weights(model, epoch)`` re-weights each epoch's
    training loss (DecoRemoval's extractor mode); None trains with the plain mean loss.
    """
    model = build_network(settings, train, child_torch(seed, "extractor", "init"))
    reweigh = None
    if epoch_weights is not None:
        hook = epoch_weights

        def reweigh(epoch: int) -> FloatArray | None:
            return hook(model, epoch)

    train_network(
        model,
        train,
        rows,
        settings,
        generator=child_torch(seed, "extractor", "train"),
        reweigh=reweigh,
    )
    device = device_of(settings)
    rng = child_rng(seed, "rff")
    h = extract_features(model, train.x[rows], device=device)
    bandwidth = settings.rff_bandwidth
    if bandwidth is None:
        bandwidth = median_bandwidth(h, rng=rng) if h.shape[0] >= 2 else 1.0
    rff = RandomFourierFeatures.draw(h.shape[1], settings.rff_dim, bandwidth=bandwidth, rng=rng)
    model.eval()
    return Featurizer(model, rff, device)


def head_proba(Z: FloatArray, W: FloatArray) -> FloatArray:
    """Normalised one-vs-rest sigmoids of the head's scores ``Z @ W`` (``metrics.scores``)."""
    return class_probabilities(np.asarray(Z @ W))
