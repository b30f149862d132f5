"""Train a DP extractor again from scratch on the retained rows ``D'`` (one more generation).

Under ``extractor_data: dp`` with ``model.dp.extractor_epsilon_limit`` the whole model is
retrained when the extractor's group charge would pass the limit
(:mod:`simulator.runner.extractor_limit`). The extractor of generation ``g`` is exactly what
``build_federation`` trains at the start, run on ``D'`` and under the generation's own root
seed :func:`generation_seed`: the same DP-FedAvg (DP-SGD on every client that still has rows,
``model.rounds`` rounds), **fresh** accountants (one per client, empty), a fresh RFF map with
the median bandwidth on the test split's features (no client row), fresh initial weights,
minibatches and noise. Generation 0 is the scenario's own seed, so a from-scratch run on ``D'``
with the generation's seed gives the same extractor bit for bit (tested).

Why fresh randomness: with the noise of generation 0 reused, the difference of the old and
the new extractor would cancel the noise and expose the removed rows' clipped gradients
(``E0 - E1 = g(D) - g(D')``); with independent noise the new extractor is a DP-SGD output on
``D'`` alone and the old one's leakage stays what was charged for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from simulator.arrays import IntArray
from simulator.data.dataset import Dataset
from simulator.models.dp_fedavg import ClientAccountants
from simulator.models.featurizer import Featurizer
from simulator.runner.featurize import in_process_round, train_featurizer
from simulator.scenario import Scenario
from simulator.seeds import child_seed


def generation_seed(seed: int, generation: int) -> int:
    """The root seed of the extractor stage of ``generation`` (0: the scenario's ``seed``)."""
    return seed if generation == 0 else child_seed(seed, "extractor-generation", generation)


def generation_scenario(scenario: Scenario, generation: int) -> Scenario:
    """``scenario`` with the extractor generation's root seed (only the extractor stage uses it)."""
    if generation == 0:
        return scenario
    return scenario.model_copy(update={"seed": generation_seed(scenario.seed, generation)})


def retained_pools(
    dataset: Dataset, trained_on: Mapping[int, IntArray], clients: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every client's retained inputs and labels by client index (empty for a client without).

    The index keeps each client's minibatch generator, noise and accountant its own: a client
    that left (failed, excluded) trains nothing, and the others keep their places.
    """
    empty = np.zeros(0, dtype=np.int64)
    rows = [np.asarray(trained_on.get(c, empty), dtype=np.int64) for c in range(clients)]
    return [(dataset.x_train[r], dataset.y_train[r]) for r in rows]


def train_dp_generation(
    scenario: Scenario,
    dataset: Dataset,
    pools: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    generation: int,
    device: torch.device,
) -> tuple[Featurizer, ClientAccountants]:
    """The extractor of ``generation`` trained by DP-FedAvg on ``pools``, and its accountants.

    ``pools``: each client's retained ``(x, y)`` by client index (:func:`retained_pools`).
    The RFF bandwidth is fitted on the test split's features, as at the start (no client row).
    """
    sc = generation_scenario(scenario, generation)
    accountants = ClientAccountants()
    local_round = in_process_round(sc, dataset, pools, device=device, accountants=accountants)
    featurizer = train_featurizer(
        sc, dataset, dataset.x_test, local_round=local_round, device=device
    )
    return featurizer, accountants
