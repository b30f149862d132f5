"""From inputs to head features: extractor, random Fourier features, unit-ball clipping.

``x --extractor--> h --RFF (fixed)--> z --clip to ||z|| <= 1--> head`` (``method.md`` section
1). The extractor is trained with FedAvg on the clients' data (``extractor_data: private``:
the run is then *not* certified for the extractor) or on a public pool that is never deleted
from (``public``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from simulator.data.dataset import Dataset
from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth
from simulator.models import (
    BackboneSpec,
    ExtractorWithHead,
    build_backbone,
    extract_features,
    train_federated,
)
from simulator.runner.seeds import stage_rng, stage_seed
from simulator.scenario import Scenario

FloatArray = NDArray[np.float64]


@dataclass
class Featurizer:
    """The frozen map from raw inputs to head features."""

    model: ExtractorWithHead
    rff: RandomFourierFeatures
    device: torch.device
    round_losses: tuple[float, ...]
    seconds: float

    def __call__(self, x: NDArray[Any]) -> FloatArray:
        h = extract_features(self.model, x, device=self.device)
        return clip_to_unit_ball(self.rff.transform(h))


def build_extractor(scenario: Scenario, dataset: Dataset) -> ExtractorWithHead:
    """The backbone the scenario names, initialised from the extractor stage's seed."""
    m = scenario.model
    spec = BackboneSpec(
        kind=m.backbone,
        feature_dim=m.feature_dim,
        hidden=tuple(m.hidden),
        embed_dim=m.embed_dim,
        heads=m.heads,
        layers=m.layers,
    )
    gen = torch.Generator().manual_seed(stage_seed(scenario.seed, "extractor"))
    tokens = dataset.modality == "tokens"
    backbone = build_backbone(
        spec,
        input_dim=None if tokens else int(np.prod(dataset.x_train.shape[1:])),
        vocab_size=dataset.vocab_size,
        max_len=int(dataset.x_train.shape[1]) if tokens else None,
        generator=gen,
    )
    return ExtractorWithHead(backbone, dataset.num_classes, generator=gen)


def train_featurizer(
    scenario: Scenario,
    dataset: Dataset,
    client_data: Sequence[tuple[NDArray[Any], NDArray[Any]]],
    *,
    device: torch.device,
    progress: Callable[[int, float], None] | None = None,
) -> Featurizer:
    """FedAvg-train the extractor on ``client_data``, then draw the frozen RFF map."""
    model = build_extractor(scenario, dataset)
    m = scenario.model
    losses: tuple[float, ...] = ()
    seconds = 0.0
    if m.rounds > 0:
        result = train_federated(
            model,
            client_data,
            rounds=m.rounds,
            local_epochs=m.local_epochs,
            batch_size=m.batch_size,
            lr=m.lr,
            seed=stage_seed(scenario.seed, "extractor"),
            device=device,
            progress=progress,
        )
        losses, seconds = result.round_losses, result.seconds
    rng = stage_rng(scenario.seed, "rff")
    pool = np.concatenate([x for x, _ in client_data if len(x)], axis=0)
    h = extract_features(model, pool, device=device)
    bw = scenario.rff.bandwidth
    bandwidth = median_bandwidth(h, rng=rng) if bw == "median" else float(bw)
    rff = RandomFourierFeatures.draw(h.shape[1], scenario.rff.dim, bandwidth=bandwidth, rng=rng)
    return Featurizer(model, rff, device, losses, seconds)
