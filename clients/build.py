"""The torch side of a client: its raw shard, FedAvg updates and head rows.

Imported lazily by the ``train`` and ``train.setup`` handlers only. The raw shard is rebuilt
from the scenario and the partition id (``load_dataset`` and ``split_clients`` are
deterministic), then the same core functions as the in-process transport compute the update
or the client (:func:`simulator.runner.featurize.client_update`,
:func:`simulator.runner.shards.make_client`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError
from simulator.federation import FederatedClient
from simulator.models import LocalUpdate, resolve_device
from simulator.models.dp_fedavg import ClientAccountants
from simulator.runner.featurize import build_extractor, client_update, featurizer_from_arrays
from simulator.runner.federation import load_dataset, split_clients
from simulator.runner.shards import make_client, shard_digest
from simulator.scenario import Scenario, parse_scenario


def _shard(text: str, client_id: int) -> tuple[Scenario, Any, NDArray[np.int64]]:
    scenario = parse_scenario(text, source="<scenario from the server>")
    n = scenario.partition.num_clients
    if not 0 <= client_id < n:
        raise ConfigError(f"partition {client_id} is outside the scenario's {n} clients")
    dataset = load_dataset(scenario)
    shards, _ = split_clients(scenario, dataset)
    return scenario, dataset, shards[client_id]


def local_update(
    text: str,
    client_id: int,
    round_index: int,
    global_arrays: dict[str, NDArray[Any]],
    accountants: ClientAccountants | None = None,
) -> LocalUpdate | None:
    """The FedAvg update of this client in ``round_index``, or None if it holds no rows.

    ``accountants`` (``extractor_data: dp``) holds this client's accountant, restored from the
    history the server sent; its DP-SGD steps are recorded in it.
    """
    scenario, dataset, rows = _shard(text, client_id)
    if rows.size == 0:
        return None
    return client_update(
        scenario,
        build_extractor(scenario, dataset),
        dataset.x_train[rows],
        dataset.y_train[rows],
        round_index=round_index,
        client_index=client_id,
        global_arrays={k: np.asarray(v, dtype=np.float32) for k, v in global_arrays.items()},
        device=resolve_device(scenario.device),
        accountants=accountants,
    )


def build_client(
    text: str,
    client_id: int,
    extractor: dict[str, NDArray[Any]],
    rff: dict[str, NDArray[Any]],
) -> tuple[FederatedClient, str]:
    """The client's head rows and weights, and the fingerprint of its shard's ids."""
    scenario, dataset, rows = _shard(text, client_id)
    featurizer = featurizer_from_arrays(
        scenario,
        dataset,
        {k: np.asarray(v, dtype=np.float32) for k, v in extractor.items()},
        {k: np.asarray(v, dtype=np.float64) for k, v in rff.items()},
        device=resolve_device(scenario.device),
    )
    return make_client(scenario, dataset, client_id, rows, featurizer), shard_digest(rows)
