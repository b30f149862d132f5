"""The runner's :class:`~simulator.runner.transport.ClientTransport` over Flower messages.

FedAvg rounds (``train``, weights as ``ArrayRecord``), the client setup (``train.setup`` with
the frozen extractor and RFF map), head statistics, deletions, weights and reports all go
through one :class:`~server.flower.fleet.Fleet`. Each message carries what the client needs to
rebuild its state deterministically (the resolved scenario YAML on ``train`` and
``train.setup``); everything else the client keeps in ``context.state``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
from flwr.app import RecordDict
from numpy.typing import NDArray

from clients import protocol as rec
from server.flower.channel import FlowerClientChannel, FlowerFanout, row_weights
from server.flower.fleet import Exchange, Fleet, Request
from simulator.errors import ClientUnavailableError, InputError
from simulator.federation import ClientReport
from simulator.federation.codec import decode_statistics
from simulator.head import HeadConfig
from simulator.head.backend import NUMPY
from simulator.models import LocalUpdate, StateArrays, state_to_arrays
from simulator.models.dp_fedavg import ClientAccountants, history_from_json, history_to_json
from simulator.models.featurizer import Featurizer
from simulator.models.fedavg import LocalRound
from simulator.runner.configs import head_config
from simulator.runner.shards import shard_digest
from simulator.runner.transport import RunnerClient
from simulator.scenario import Scenario, scenario_to_yaml

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def needs_exact_residual(config: HeadConfig) -> bool:
    """Whether every removal asks *all* clients for the gradient at the new head.

    That round trip gives the exact residual: what exact accounting charges, otherwise an
    opt-in diagnostic (``head.report_exact``, off by default on flower-deploy). Without it a
    deletion batch is one round trip, to the clients that own the rows.
    """
    return config.computes_exact


class FlowerTransport:
    """Clients reached through a Flower ``Grid`` (simulation or Deployment Engine).

    Parameters
    ----------
    fleet : connected fleet (partition -> node map).
    scenario : the run's scenario (sent to the clients as resolved YAML).
    name : ``flower-sim`` or ``flower-deploy`` (labels outputs).
    """

    def __init__(self, fleet: Fleet, scenario: Scenario, *, name: str) -> None:
        #: the SuperNodes this transport talks to
        self.fleet = fleet
        ev = scenario.evaluation
        #: the retrained reference reads every client's row weights: have them sent along
        #: with ``train.setup`` and every deletion instead of a ``query.weights`` round trip
        self.wants_weights = bool(ev.retrain_reference and ev.checkpoints)
        self._yaml = scenario_to_yaml(scenario)
        #: the transport's name (as scenarios spell it)
        self.name = name
        #: the fan-out sending one question to many clients
        self.fanout = FlowerFanout(self)
        self.rows_backend = NUMPY  # a message carries numpy arrays
        self._channels: dict[int, FlowerClientChannel] = {}
        self._clients = list(range(scenario.partition.num_clients))
        self._exact_round = needs_exact_residual(head_config(scenario))
        #: one DP accountant per client over every round (``extractor_data: dp``): the server
        #: sends each client its accountant's history with the round and keeps what comes back
        self.accountants = ClientAccountants() if scenario.model.extractor_data == "dp" else None

    def channel(self, client_id: int) -> FlowerClientChannel:
        """The channel of client ``client_id``."""
        return self._channels[client_id]

    def send(
        self, requests: Mapping[int, Request], *, repeatable: bool, train: bool = False
    ) -> Exchange:
        """One exchange with the head timeout (or the training timeout)."""
        s = self.fleet.settings
        timeout = s.train_timeout if train else s.timeout
        return self.fleet.exchange(requests, timeout=timeout, repeatable=repeatable)

    # ------------------------------------------------------------ FedAvg
    def local_round(self, round_index: int, global_arrays: StateArrays) -> Sequence[LocalUpdate]:
        """One FedAvg local round on every client, from the global model ``global_arrays``."""
        return self._fedavg_round(round_index, global_arrays)

    def generation_round(self, generation: int, trained_on: Mapping[int, IntArray]) -> LocalRound:
        """FedAvg rounds of a whole-model retrain (:mod:`simulator.runner.extractor_limit`).

        Every live client trains on its rows in ``trained_on`` only (sent as ``retained``),
        under the extractor ``generation``'s seeds (the client derives them from the
        scenario, whose shards stay its own), with the transport's accountants.
        """
        empty = np.zeros(0, dtype=np.int64)
        retained = {c: np.asarray(trained_on.get(c, empty), dtype=np.int64) for c in self._clients}
        return partial(self._fedavg_round, generation=generation, retained=retained)

    def _fedavg_round(
        self,
        round_index: int,
        global_arrays: StateArrays,
        *,
        generation: int = 0,
        retained: Mapping[int, IntArray] | None = None,
    ) -> Sequence[LocalUpdate]:
        accountants = self.accountants

        def content(client: int) -> RecordDict:
            config: dict[str, Any] = {"scenario": self._yaml, "round": round_index}
            arrays: dict[str, Any] = {rec.MODEL: global_arrays}
            if accountants is not None:
                config["dp-history"] = history_to_json(accountants.history(client))
            if retained is not None:
                config["generation"] = generation
                arrays[rec.RETAINED] = {"ids": retained[client]}
            return rec.content(config, arrays)

        ex = self.send(
            {c: (rec.TRAIN, partial(content, c)) for c in self._clients},
            repeatable=True,
            train=True,
        )
        if ex.failures:
            raise ClientUnavailableError(ex.failures, f"FedAvg round {round_index + 1}")
        updates = []
        for c in sorted(ex.replies):
            reply = ex.replies[c]
            metrics = rec.config_of(reply)
            n = rec.get_int(metrics, "num-examples")
            if n == 0:
                continue
            if accountants is not None:
                accountants.set_history(c, history_from_json(str(metrics["dp-history"])))
            arrays = rec.arrays_of(reply)[rec.MODEL]
            state = {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}
            updates.append(LocalUpdate(state, n, rec.get_number(metrics, "loss")))
        return updates

    # ------------------------------------------------------------ head clients
    def open_clients(
        self, featurizer: Featurizer, shards: Sequence[IntArray], *, retained: bool = False
    ) -> dict[int, RunnerClient]:
        """Send each client the featurizer; returns a channel per client.

        Each client rebuilds its shard from the scenario; ``retained`` (a whole-model
        retrain): it keeps only its rows of ``shards``, sent along.
        """
        extractor = state_to_arrays(featurizer.model)
        rff = featurizer.rff.to_arrays()

        def content(client: int) -> RecordDict:
            config = {"scenario": self._yaml, "weights": self.wants_weights}
            arrays: dict[str, Any] = {rec.MODEL: extractor, rec.RFF: rff}
            if retained:
                arrays[rec.RETAINED] = {"ids": np.asarray(shards[client], dtype=np.int64)}
            return rec.content(config, arrays)

        ex = self.send(
            {c: (rec.SETUP, partial(content, c)) for c in self._clients},
            repeatable=True,
            train=True,
        )
        if ex.failures:
            raise ClientUnavailableError(ex.failures, "building the clients' head rows")
        for c in self._clients:
            status = rec.config_of(ex.replies[c])
            if status["digest"] != shard_digest(shards[c]):
                raise InputError(
                    f"client {c} holds a different shard than the server expects: every "
                    "machine must load the same data for the scenario"
                )
            arrays = rec.arrays_of(ex.replies[c])
            self._channels[c] = FlowerClientChannel(self, c, shards[c], status, row_weights(arrays))
            if rec.RESULT in arrays:
                stats = decode_statistics(arrays[rec.RESULT])
                W0 = np.zeros((featurizer.rff.output_dim, stats.gradient.shape[1]))
                self.fanout.seed(c, W0, stats)
        return dict(self._channels)

    def refresh_weights(self) -> None:
        """Fetch current weights of every client whose cached weights are stale."""
        stale = [c for c, ch in self._channels.items() if ch.stale]

        def content() -> RecordDict:
            return rec.content()

        ex = self.send({c: (rec.WEIGHTS, content) for c in stale}, repeatable=True)
        if ex.failures:
            raise ClientUnavailableError(ex.failures, "reading weights")
        for c, reply in ex.replies.items():
            weights = row_weights(rec.arrays_of(reply))
            assert weights is not None, "query.weights answers the weights"
            self._channels[c].set_weights(weights)

    def exclude(self, client_id: int) -> None:
        """A failed client: never message it again."""
        self._channels.pop(client_id, None)
        self._clients = [c for c in self._clients if c != client_id]

    def reports(self, W: FloatArray, clients: Sequence[int]) -> dict[int, ClientReport]:
        """The report of each of ``clients`` at head ``W`` (one round trip)."""

        def content() -> RecordDict:
            return rec.content(None, {rec.HEAD: {"W": W}})

        ex = self.send({c: (rec.REPORT, content) for c in clients}, repeatable=True)
        if ex.failures:
            raise ClientUnavailableError(ex.failures, "client reports")
        out: dict[int, ClientReport] = {}
        for c, reply in sorted(ex.replies.items()):
            text = str(rec.config_of(reply)["report"])
            out[c] = ClientReport.from_dict(json.loads(text))
        return out

    def summary(self) -> dict[str, Any]:
        """Where the time went, per message type (``transport.json``)."""
        return {
            "transport": self.name,
            # every deletion batch: one round trip to the owners, plus one to every client
            # when the exact residual is needed
            "exact_residual_round": self._exact_round,
            "nodes": {str(c): n for c, n in sorted(self.fleet.nodes.items())},
            "messages": {k: v.as_dict() for k, v in sorted(self.fleet.stats.items())},
        }
