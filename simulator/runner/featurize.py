"""From inputs to head features: extractor, random Fourier features, unit-ball clipping.

``x --extractor--> h --RFF (fixed)--> z --clip to ||z|| <= 1--> head`` (``method.md`` section
1). The extractor is trained with FedAvg on the clients' data (``extractor_data: private``:
the run is then *not* certified for the extractor), on a public pool that is never deleted
from (``public``), or with DP-FedAvg on the clients' data (``dp``: DP-SGD on every client, one
RDP accountant per client over all rounds, :mod:`simulator.models.dp_fedavg`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from simulator.data.dataset import Dataset
from simulator.errors import ConfigError
from simulator.features.rff import RandomFourierFeatures
from simulator.models import (
    ExtractorWithHead,
    LocalEpochs,
    LocalUpdate,
    StateArrays,
    build_network,
    client_generator,
    load_arrays,
    local_train,
)
from simulator.models.dp_fedavg import ClientAccountants, DpSgdSettings, dp_local_train
from simulator.models.featurizer import Featurizer, freeze_featurizer
from simulator.models.fedavg import LocalRound, fedavg_rounds
from simulator.runner.configs import backbone_config
from simulator.scenario import Scenario
from simulator.seeds import child_rng, child_seed, child_torch


def build_extractor(scenario: Scenario, dataset: Dataset) -> ExtractorWithHead:
    """The backbone the scenario names, initialised from the extractor stage's seed."""
    return build_network(
        backbone_config(scenario),
        dataset.x_train,
        tokens=dataset.modality == "tokens",
        vocab_size=dataset.vocab_size,
        num_classes=dataset.num_classes,
        generator=torch.Generator().manual_seed(child_seed(scenario.seed, "extractor")),
    )


def dp_settings(scenario: Scenario) -> DpSgdSettings:
    """The DP-SGD mechanism of ``model.dp`` (``extractor_data: dp``)."""
    dp = scenario.model.dp
    return DpSgdSettings(dp.noise_multiplier, dp.max_grad_norm, dp.delta)


def client_update(  # noqa: PLR0913 (ClientUpdate's inputs: the ClientApp passes its message's fields)
    scenario: Scenario,
    model: ExtractorWithHead,
    x: NDArray[Any],
    y: NDArray[Any],
    *,
    round_index: int,
    client_index: int,
    global_arrays: StateArrays,
    device: torch.device,
    accountants: ClientAccountants | None = None,
) -> LocalUpdate:
    """``ClientUpdate`` of one client: local epochs from the global weights.

    The minibatch order and dropout come from ``client_generator(seed, round, client)``, so the
    update depends only on the scenario, the round, the client and the global weights: an
    in-process loop and a Flower ClientApp compute the same update. Under ``extractor_data:
    dp`` the epochs are DP-SGD (:func:`~simulator.models.dp_fedavg.dp_local_train`), the noise
    from ``child_torch(seed, "dp-noise", round, client)``, every step recorded in the client's
    accountant of ``accountants`` (kept by the caller across rounds).
    """
    m = scenario.model
    seed = child_seed(scenario.seed, "extractor")
    schedule = LocalEpochs(m.local_epochs, m.batch_size, m.lr)
    load_arrays(model, global_arrays)
    if m.extractor_data == "dp":
        if accountants is None:
            raise ConfigError(
                "extractor_data dp trains with DP-SGD: the caller keeps the clients' accountants",
                "model.extractor_data",
            )
        return dp_local_train(
            model,
            x,
            y,
            schedule=schedule,
            settings=dp_settings(scenario),
            accountant=accountants.accountant(client_index),
            generator=client_generator(seed, round_index, client_index),
            noise_generator=child_torch(seed, "dp-noise", round_index, client_index),
            device=device,
        ).update
    return local_train(
        model,
        x,
        y,
        schedule=schedule,
        generator=client_generator(seed, round_index, client_index),
        device=device,
    )


def in_process_round(
    scenario: Scenario,
    dataset: Dataset,
    client_data: Sequence[tuple[NDArray[Any], NDArray[Any]]],
    *,
    device: torch.device,
    accountants: ClientAccountants | None = None,
) -> LocalRound:
    """A :data:`LocalRound` that trains every non-empty client here, one after another.

    ``accountants``: the clients' DP accountants (``extractor_data: dp``), kept across rounds.
    """
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
                accountants=accountants,
            )
            for c, (x, y) in enumerate(client_data)
            if len(x)
        ]

    return run


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

    ``pool`` holds the inputs the median bandwidth heuristic (``rff.bandwidth: median``) is
    computed on the features of (the extractor's training rows, or under ``dp`` rows no client
    holds).
    """
    model = build_extractor(scenario, dataset)
    losses: tuple[float, ...] = ()
    seconds = 0.0
    if scenario.model.rounds > 0:
        losses, seconds = fedavg_rounds(
            model, scenario.model.rounds, local_round, device=device, progress=progress
        )
    bw = scenario.rff.bandwidth
    featurizer = freeze_featurizer(
        model,
        pool,
        dim=scenario.rff.dim,
        bandwidth=None if bw == "median" else float(bw),
        rng=child_rng(scenario.seed, "rff"),
        device=device,
    )
    return replace(featurizer, round_losses=losses, seconds=seconds)


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
    return Featurizer(model, RandomFourierFeatures.from_arrays(rff), device)
