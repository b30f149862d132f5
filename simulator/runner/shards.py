"""What one client builds from the scenario and its partition id (every transport alike).

A client of any transport calls these functions: the Flower ClientApp after rebuilding the
dataset from the scenario (``load_dataset`` and ``split_clients`` are deterministic), the
in-process transport directly. So a client's head rows and decorrelation weights do not depend
on where it runs.
"""

from __future__ import annotations

import hashlib

import numpy as np
from numpy.typing import NDArray

from simulator.data.dataset import Dataset
from simulator.federation import FederatedClient, WeightingPlan
from simulator.head.backend import NUMPY, Backend, make_backend, resolve
from simulator.methods import method
from simulator.models.featurizer import Featurizer
from simulator.runner.configs import decorrelation_config
from simulator.scenario import Scenario
from simulator.seeds import child_seed

IntArray = NDArray[np.int64]


def weighting_plan(scenario: Scenario, client_id: int) -> WeightingPlan | None:
    """Decorrelation settings and the lift seed of ``client_id``; None without decorrelation."""
    if not method(scenario.method).decorrelates:
        return None
    config = decorrelation_config(scenario)
    return WeightingPlan(config, child_seed(scenario.seed, "decorrelation", client_id))


def make_client(
    scenario: Scenario,
    dataset: Dataset,
    client_id: int,
    rows: IntArray,
    featurizer: Featurizer,
    *,
    backend: Backend = NUMPY,
) -> FederatedClient:
    """Client ``client_id`` holding training ``rows``: head features and initial weights.

    ``backend``: where its head rows live (:func:`client_rows_backend`; numpy on the host).
    """
    return FederatedClient(
        client_id,
        rows,
        featurizer(dataset.x_train[rows]),
        dataset.y_train[rows],
        dataset.num_classes,
        weighting=weighting_plan(scenario, client_id),
        backend=backend,
    )


def client_rows_backend(scenario: Scenario) -> Backend:
    """Where in-process clients keep their head rows (``head.client_rows``).

    ``host``: numpy. ``head``: the head's backend on its device, so the clients' statistics,
    exact passes and deletions run there and the server's sums never leave it. ``auto``:
    ``head`` when the head runs on cuda (what bounced through host memory was most of a
    streamed batch there: docs/benchmarks.md, issue 27), else ``host``.
    """
    head = scenario.head
    device, _ = resolve(head.device, head.backend)
    if head.client_rows == "host" or (head.client_rows == "auto" and device != "cuda"):
        return NUMPY
    return make_backend(head.device, head.backend)


def shard_digest(rows: IntArray) -> str:
    """A short fingerprint of a shard's global ids (server and client must agree on it)."""
    return hashlib.sha256(np.asarray(rows, dtype=np.int64).tobytes()).hexdigest()[:16]
