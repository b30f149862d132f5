"""From inputs to head features: extractor, random Fourier features, unit-ball clipping.

``x --extractor--> h --RFF (fixed)--> z --clip to ||z|| <= 1--> head`` (``method.md`` section
1). The extractor is trained with FedAvg on the clients' data (``extractor_data: private``:
the run is then *not* certified for the extractor) or on a public pool that is never deleted
from (``public``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from simulator.data.dataset import Dataset
from simulator.errors import InputError
from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth
from simulator.models import (
    ExtractorWithHead,
    LocalUpdate,
    StateArrays,
    build_backbone,
    client_generator,
    extract_features,
    fedavg,
    load_arrays,
    local_train,
    state_to_arrays,
)
from simulator.runner.configs import backbone_config
from simulator.scenario import Scenario
from simulator.seeds import child_rng, child_seed

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
    spec = backbone_config(scenario)
    gen = torch.Generator().manual_seed(child_seed(scenario.seed, "extractor"))
    tokens = dataset.modality == "tokens"
    backbone = build_backbone(
        spec,
        input_dim=None if tokens else int(np.prod(dataset.x_train.shape[1:])),
        vocab_size=dataset.vocab_size,
        max_len=int(dataset.x_train.shape[1]) if tokens else None,
        generator=gen,
    )
    return ExtractorWithHead(backbone, dataset.num_classes, generator=gen)


#: One FedAvg round seen from the server: ``(round, global weights) -> local updates`` of every
#: client with rows, in client order (McMahan et al. 2017, Algorithm 1, ``ClientUpdate``).
LocalRound = Callable[[int, StateArrays], Sequence[LocalUpdate]]


def client_update(
    scenario: Scenario,
    model: ExtractorWithHead,
    x: NDArray[Any],
    y: NDArray[Any],
    *,
    round_index: int,
    client_index: int,
    global_arrays: StateArrays,
    device: torch.device,
) -> LocalUpdate:
    """``ClientUpdate`` of one client: local epochs from the global weights.

    The minibatch order and dropout come from ``client_generator(seed, round, client)``, so the
    update depends only on the scenario, the round, the client and the global weights: an
    in-process loop and a Flower ClientApp compute the same update.
    """
    m = scenario.model
    seed = child_seed(scenario.seed, "extractor")
    load_arrays(model, global_arrays)
    return local_train(
        model,
        x,
        y,
        epochs=m.local_epochs,
        batch_size=m.batch_size,
        lr=m.lr,
        generator=client_generator(seed, round_index, client_index),
        device=device,
    )


def in_process_round(
    scenario: Scenario,
    dataset: Dataset,
    client_data: Sequence[tuple[NDArray[Any], NDArray[Any]]],
    *,
    device: torch.device,
) -> LocalRound:
    """A :data:`LocalRound` that trains every non-empty client here, one after another."""
    work = build_extractor(scenario, dataset)

    def run(round_index: int, global_arrays: StateArrays) -> list[LocalUpdate]:
        return [
            client_update(
                scenario,
                work,
                x,
                y,
                round_index=round_index,
                client_index=c,
                global_arrays=global_arrays,
                device=device,
            )
            for c, (x, y) in enumerate(client_data)
            if len(x)
        ]

    return run


def fedavg_rounds(
    model: ExtractorWithHead,
    rounds: int,
    local_round: LocalRound,
    *,
    device: torch.device,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[tuple[float, ...], float]:
    """FedAvg from ``model``'s weights; ``model`` ends with the final global weights.

    Returns the example-weighted mean client loss of every round and the seconds taken.
    """
    started = time.perf_counter()
    model.to(device)
    global_arrays = state_to_arrays(model)
    losses: list[float] = []
    for r in range(rounds):
        updates = list(local_round(r, global_arrays))
        if not updates:
            raise InputError("no client has any training rows")
        global_arrays = fedavg(updates)
        total = sum(u.num_examples for u in updates)
        losses.append(sum(u.loss * u.num_examples for u in updates) / total)
        if progress is not None:
            progress(r + 1, losses[-1])
    load_arrays(model, global_arrays)
    return tuple(losses), time.perf_counter() - started


def train_featurizer(
    scenario: Scenario,
    dataset: Dataset,
    pool: NDArray[Any],
    *,
    local_round: LocalRound,
    device: torch.device,
    progress: Callable[[int, float], None] | None = None,
) -> Featurizer:
    """FedAvg-train the extractor through ``local_round``, then draw the frozen RFF map.

    ``pool`` holds the inputs the extractor was trained on; the median bandwidth heuristic
    (``rff.bandwidth: median``) is computed on their features.
    """
    model = build_extractor(scenario, dataset)
    losses: tuple[float, ...] = ()
    seconds = 0.0
    if scenario.model.rounds > 0:
        losses, seconds = fedavg_rounds(
            model, scenario.model.rounds, local_round, device=device, progress=progress
        )
    rng = child_rng(scenario.seed, "rff")
    h = extract_features(model, pool, device=device)
    bw = scenario.rff.bandwidth
    bandwidth = median_bandwidth(h, rng=rng) if bw == "median" else float(bw)
    rff = RandomFourierFeatures.draw(h.shape[1], scenario.rff.dim, bandwidth=bandwidth, rng=rng)
    return Featurizer(model, rff, device, losses, seconds)


def featurizer_from_arrays(
    scenario: Scenario,
    dataset: Dataset,
    extractor: StateArrays,
    rff: dict[str, NDArray[np.float64]],
    *,
    device: torch.device,
) -> Featurizer:
    """Rebuild a trained featurizer from its arrays (what a server sends its clients)."""
    model = build_extractor(scenario, dataset)
    load_arrays(model, extractor)
    return Featurizer(model, RandomFourierFeatures.from_arrays(rff), device, (), 0.0)
