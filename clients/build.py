"""The torch side of a client: its raw shard, FedAvg updates and head rows.

Imported lazily by the ``train`` and ``train.setup`` handlers only. The raw shard is rebuilt
from the scenario and the partition id (``load_dataset`` and ``split_clients`` are
deterministic), then the same core functions as the in-process transport compute the update
or the client (:func:`simulator.runner.featurize.client_update`,
:func:`simulator.runner.shards.make_client`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError, InputError
from simulator.federation import FederatedClient
from simulator.models import LocalUpdate, resolve_device
from simulator.models.dp_fedavg import ClientAccountants
from simulator.runner.extractor_refit import generation_scenario
from simulator.runner.featurize import build_extractor, client_update, featurizer_from_arrays
from simulator.runner.federation import load_dataset, split_clients
from simulator.runner.shards import make_client, shard_digest
from simulator.scenario import Scenario, parse_scenario


@lru_cache(maxsize=2)
def _federation_data(text: str) -> tuple[Scenario, Any, tuple[NDArray[np.int64], ...]]:
    """The scenario, its dataset and every client's shard, built once per process and scenario.

    A process that serves many clients (a Ray worker of the simulation engine serves hundreds)
    loads the dataset and splits it once instead of once per message; the result is the same
    (both are deterministic in the scenario). A fresh process per message (the Deployment
    Engine) simply builds it again. Callers only read the arrays.
    """
    scenario = parse_scenario(text, source="<scenario from the server>")
    dataset = load_dataset(scenario)
    shards, _ = split_clients(scenario, dataset)
    return scenario, dataset, tuple(shards)


def _shard(
    text: str, client_id: int, retained: NDArray[np.int64] | None = None
) -> tuple[Scenario, Any, NDArray[np.int64]]:
    """The scenario, the dataset and this client's rows: its shard, or ``retained`` of it.

    ``retained``: the rows the server says this client still holds (a whole-model retrain at
    the extractor's limit, :mod:`simulator.runner.extractor_limit`), in the server's order.

    Raises
    ------
    ConfigError
        The partition is not one of the scenario's clients.
    InputError
        ``retained`` names a row outside this client's shard.
    """
    scenario, dataset, shards = _federation_data(text)
    n = scenario.partition.num_clients
    if not 0 <= client_id < n:
        raise ConfigError(f"partition {client_id} is outside the scenario's {n} clients")
    rows = shards[client_id]
    if retained is None:
        return scenario, dataset, rows
    retained = np.asarray(retained, dtype=np.int64)
    foreign = retained[~np.isin(retained, rows)]
    if foreign.size:
        raise InputError(
            f"client {client_id} was asked to keep {foreign.size} row(s) outside its shard "
            f"(e.g. row {int(foreign[0])})"
        )
    return scenario, dataset, retained


def local_update(  # noqa: PLR0913 (the train message's fields, the last two optional)
    text: str,
    client_id: int,
    round_index: int,
    global_arrays: dict[str, NDArray[Any]],
    accountants: ClientAccountants | None = None,
    retained: NDArray[np.int64] | None = None,
    generation: int = 0,
) -> LocalUpdate | None:
    """The FedAvg update of this client in ``round_index``, or None if it holds no rows.

    ``accountants`` (``extractor_data: dp``) holds this client's accountant, restored from the
    history the server sent; its DP-SGD steps are recorded in it. ``retained`` and
    ``generation`` (a whole-model retrain at the extractor's limit): train on these rows of
    the shard only (:func:`_shard`), under the extractor generation's seeds
    (:func:`~simulator.runner.extractor_refit.generation_scenario`), as the in-process
    transport does.
    """
    scenario, dataset, rows = _shard(text, client_id, retained)
    if rows.size == 0:
        return None
    scenario = generation_scenario(scenario, generation)  # its shard is the scenario's own
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
    retained: NDArray[np.int64] | None = None,
) -> tuple[FederatedClient, str]:
    """The client's head rows and weights, and the fingerprint of its rows' ids.

    ``retained``: hold these rows of the shard only (:func:`_shard`).
    """
    scenario, dataset, rows = _shard(text, client_id, retained)
    featurizer = featurizer_from_arrays(
        scenario,
        dataset,
        {k: np.asarray(v, dtype=np.float32) for k, v in extractor.items()},
        {k: np.asarray(v, dtype=np.float64) for k, v in rff.items()},
        device=resolve_device(scenario.device),
    )
    return make_client(scenario, dataset, client_id, rows, featurizer), shard_digest(rows)
