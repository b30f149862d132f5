"""How the runner reaches its clients: one protocol, several transports.

The runner (:func:`simulator.runner.federation.build_federation`, the deletion loop) only ever talks
to a :class:`ClientTransport`: it asks for FedAvg rounds of the extractor, then for the clients
of the certified head (:class:`RunnerClient`, the head protocol plus what the loop reads), a
parallel :class:`~simulator.federation.ClientFanout` if the transport has one, and the clients'
final reports. :class:`InProcessTransport` holds :class:`~simulator.federation.FederatedClient`
objects in this process; the Flower transports (``server/flower/``) send the same calls as
messages. Everything a client computes is a deterministic function of the scenario, its
partition id and what the server sends it (:mod:`simulator.runner.shards`), so every transport
gives the same head.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from simulator.arrays import FloatArray, IntArray
from simulator.data.dataset import Dataset
from simulator.federation import (
    ClientChannel,
    ClientFanout,
    ClientReport,
    FederatedClient,
    WeightReport,
)
from simulator.federation.threads import ThreadFanout
from simulator.head.backend import Backend
from simulator.models import LocalUpdate, StateArrays
from simulator.models.dp_fedavg import ClientAccountants
from simulator.models.featurizer import Featurizer
from simulator.models.fedavg import LocalRound
from simulator.runner.extractor_refit import generation_scenario, retained_pools
from simulator.runner.featurize import in_process_round
from simulator.runner.shards import client_rows_backend, make_client
from simulator.scenario import Scenario


class RetainedView(Protocol):
    """Current weights of a client's rows (0 when deleted) and the local retained indices."""

    @property
    def weights(self) -> FloatArray:
        """Current weight of each local row (0 when deleted)."""
        ...

    @property
    def retained_ids(self) -> IntArray:
        """Local indices of the retained rows."""
        ...


class RunnerClient(ClientChannel, Protocol):
    """A client as the runner sees it: the head protocol plus what the loop reads."""

    @property
    def retained_ids(self) -> IntArray:
        """Global ids of the retained rows."""
        ...

    @property
    def last_weights(self) -> WeightReport | None:
        """The client's last weight report, if any."""
        ...

    @property
    def data(self) -> RetainedView:
        """Current weights of the client's rows."""
        ...

    def retained_weights(self) -> tuple[IntArray, FloatArray]:
        """Global ids of the retained rows and their current weights."""
        ...


class ClientTransport(Protocol):
    """The clients of one run, however they are reached."""

    #: the clients' DP accountants under ``extractor_data: dp`` (one per client, kept across
    #: every round; a whole-model retrain starts new ones), else None
    accountants: ClientAccountants | None

    @property
    def name(self) -> str:
        """``inprocess``, ``flower-sim`` or ``flower-deploy``."""
        ...

    def local_round(self, round_index: int, global_arrays: StateArrays) -> Sequence[LocalUpdate]:
        """One FedAvg round: the local updates of every client with rows, in client order."""
        ...

    def generation_round(self, generation: int, trained_on: Mapping[int, IntArray]) -> LocalRound:
        """FedAvg rounds of a whole-model retrain at the extractor's limit.

        Every client trains on its rows in ``trained_on`` only, under the extractor
        ``generation``'s seeds (:func:`~simulator.runner.extractor_refit.generation_scenario`),
        with the transport's accountants (:mod:`simulator.runner.extractor_limit`).
        """
        ...

    def open_clients(
        self, featurizer: Featurizer, shards: Sequence[IntArray], *, retained: bool = False
    ) -> dict[int, RunnerClient]:
        """Send the frozen feature map; every client builds its head rows and weights.

        ``shards`` are the global row ids the server expects each client to hold;
        ``retained``: they are what is left of the clients' shards after a whole-model
        retrain, and each client keeps only those.
        """
        ...

    def exclude(self, client_id: int) -> None:
        """Stop reaching a client that failed."""
        ...

    @property
    def fanout(self) -> ClientFanout | None:
        """Parallel path for head statistics and deletions, if the transport has one."""
        ...

    @property
    def rows_backend(self) -> Backend:
        """The array backend the clients compute with (numpy unless they share the head's)."""
        ...

    def reports(self, W: FloatArray, clients: Sequence[int]) -> dict[int, ClientReport]:
        """Each listed client's report at head ``W``."""
        ...


class InProcessTransport:
    """Clients as objects in this process (fast experiments, tests, the reference).

    Parameters
    ----------
    scenario, dataset : the run.
    shards : global row ids of every client (``split_clients``).
    device : torch device for local training and features.
    accountants : the clients' DP accountants under ``extractor_data: dp`` (else None).
    """

    name = "inprocess"
    fanout: ClientFanout | None = None

    def __init__(
        self,
        scenario: Scenario,
        dataset: Dataset,
        shards: Sequence[IntArray],
        *,
        device: torch.device,
        accountants: ClientAccountants | None = None,
    ) -> None:
        self._scenario = scenario
        #: the clients' DP accountants (``extractor_data: dp``), kept across every round
        self.accountants = accountants
        self._dataset = dataset
        self._shards = list(shards)
        self._device = device
        #: where the clients' head rows live (``head.client_rows``)
        self.rows_backend = client_rows_backend(scenario)
        self._clients: dict[int, FederatedClient] = {}
        self._round: LocalRound | None = None

    def __getstate__(self) -> dict[str, object]:
        """State for pickling.

        Picklable (a restarted consumer reloads a built federation); the local-round
        closure is not kept but rebuilt when next needed.
        """
        return {**self.__dict__, "_round": None}

    def local_round(self, round_index: int, global_arrays: StateArrays) -> Sequence[LocalUpdate]:
        """One FedAvg local round on every client, from the global model ``global_arrays``."""
        if self._round is None:
            pools = [(self._dataset.x_train[s], self._dataset.y_train[s]) for s in self._shards]
            self._round = in_process_round(
                self._scenario,
                self._dataset,
                pools,
                device=self._device,
                accountants=self.accountants,
            )
        return self._round(round_index, global_arrays)

    def generation_round(self, generation: int, trained_on: Mapping[int, IntArray]) -> LocalRound:
        """FedAvg rounds of a whole-model retrain (:class:`ClientTransport`), here."""
        scenario = generation_scenario(self._scenario, generation)
        pools = retained_pools(self._dataset, trained_on, len(self._shards))
        return in_process_round(
            scenario, self._dataset, pools, device=self._device, accountants=self.accountants
        )

    def open_clients(
        self, featurizer: Featurizer, shards: Sequence[IntArray], *, retained: bool = False
    ) -> dict[int, RunnerClient]:
        """Build an in-process client per shard (``retained`` or not); returns them by id."""
        self._clients = {
            c: make_client(
                self._scenario, self._dataset, c, rows, featurizer, backend=self.rows_backend
            )
            for c, rows in enumerate(shards)
        }
        threads = self._scenario.client_threads
        self.fanout = ThreadFanout(self._clients, threads) if threads > 1 else None
        return dict(self._clients)

    def exclude(self, client_id: int) -> None:
        """Drop client ``client_id`` from the federation."""
        self._clients.pop(client_id, None)

    def reports(self, W: FloatArray, clients: Sequence[int]) -> dict[int, ClientReport]:
        """The report of each of ``clients`` at head ``W``."""
        return {c: self._clients[c].report(W) for c in clients}
