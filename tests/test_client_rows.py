"""In-process clients whose head rows live on the head's backend (``head.client_rows: head``).

On a GPU this keeps the clients' statistics, exact passes and deletions on the device (issue
27); here torch runs on the CPU, the same code path. The run must take the decisions of the
host clients (numpy), and the clients must really compute with the head's arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.kafka import apply_requests
from support.scenarios import TEN_CLIENTS, scenario

from simulator.errors import ConfigError
from simulator.federation import FederatedClient
from simulator.head.backend import NUMPY, TorchBackend
from simulator.head.logistic import StatisticsRequest
from simulator.runner.federation import Federation, build_federation
from simulator.runner.shards import client_rows_backend
from simulator.stream.ledger import Ledger

TORCH_HEAD = ["head.backend=torch", "head.device=cpu"]


def streamed(*extra: str) -> tuple[Federation, list[tuple[str, str, float]]]:
    """The DecoRemoval quickstart (10 clients, re-weighting) after its whole stream."""
    fed = build_federation(scenario(TEN_CLIENTS, *TORCH_HEAD, *extra))
    ledger, receipts = Ledger(), []
    for i in range(0, len(fed.requests), 25):
        result = apply_requests(fed, ledger, fed.requests[i : i + 25])
        receipts += [(r.request_id, r.status, r.epsilon_spent) for r in result.receipts]
    return fed, receipts


@pytest.mark.parametrize("threads", [1, 2])
def test_clients_on_the_head_backend_take_the_host_clients_decisions(threads: int) -> None:
    host, on_host = streamed("head.client_rows=host")
    head, on_head = streamed("head.client_rows=head", f"client_threads={threads}")
    assert [r[:2] for r in on_head] == [r[:2] for r in on_host]
    np.testing.assert_allclose([r[2] for r in on_head], [r[2] for r in on_host], rtol=1e-6)
    assert head.head.retrains == host.head.retrains and head.head.removals == host.head.removals
    np.testing.assert_allclose(head.head.W, host.head.W, rtol=1e-7, atol=1e-10)
    for cid, client in head.clients.items():  # the same retained rows and weights
        assert isinstance(client, FederatedClient)
        np.testing.assert_array_equal(client.retained_ids, host.clients[cid].retained_ids)
        np.testing.assert_allclose(client.data.weights, host.clients[cid].data.weights)


def test_the_clients_compute_with_the_head_arrays() -> None:
    fed = build_federation(scenario(TEN_CLIENTS, *TORCH_HEAD, "head.client_rows=head"))
    assert isinstance(fed.head_data.rows_backend, TorchBackend)
    request = StatisticsRequest(torch.zeros(fed.head_data.dim, fed.head_data.columns))
    for client in fed.clients.values():
        assert isinstance(client, FederatedClient)
        assert isinstance(client.statistics(request).gradient, torch.Tensor)
    total = fed.head_data.statistics(request)  # a numpy head would come back converted
    assert isinstance(total.gradient, torch.Tensor) and isinstance(total.loss, torch.Tensor)
    host = build_federation(scenario(TEN_CLIENTS, *TORCH_HEAD, "head.client_rows=host"))
    assert host.head_data.rows_backend is NUMPY
    assert isinstance(host.head_data.statistics(request).gradient, np.ndarray)
    np.testing.assert_allclose(total.gradient.numpy(), host.head_data.statistics(request).gradient)


@pytest.mark.parametrize(
    ("settings", "where"),
    [
        (["head.client_rows=auto"], "host"),  # the head on the CPU: numpy clients
        (["head.client_rows=head", "head.backend=numpy"], "host"),  # the head's own is numpy
        (["head.client_rows=head", *TORCH_HEAD], "head"),
        (["head.client_rows=host", *TORCH_HEAD], "host"),
    ],
)
def test_where_the_clients_rows_live(settings: list[str], where: str) -> None:
    backend = client_rows_backend(scenario(TEN_CLIENTS, *settings))
    assert (backend.name == "torch") == (where == "head")


def test_clients_on_the_head_are_refused_outside_the_in_process_transport() -> None:
    with pytest.raises(ConfigError, match="client_rows"):
        scenario(TEN_CLIENTS, "head.client_rows=head", "transport=flower-sim")
    assert scenario(TEN_CLIENTS, "transport=flower-sim").head.client_rows == "auto"
