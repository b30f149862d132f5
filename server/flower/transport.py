"""The runner's :class:`~simulator.runner.transport.ClientTransport` over Flower messages.

FedAvg rounds (``train``, weights as ``ArrayRecord``), the client setup (``train.setup`` with
the frozen extractor and RFF map), head statistics, deletions, weights and reports all go
through one :class:`~server.flower.fleet.Fleet`. Each message carries what the client needs to
rebuild its state deterministically (the resolved scenario YAML on ``train`` and
``train.setup``); everything else the client keeps in ``context.state``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import RecordDict
from numpy.typing import NDArray

from clients import records as rec
from server.flower.channel import FlowerClientChannel, FlowerFanout
from server.flower.fleet import Exchange, Fleet
from simulator.errors import ClientUnavailableError, InputError
from simulator.federation import ClientReport
from simulator.federation.codec import decode_statistics
from simulator.models import LocalUpdate, StateArrays, state_to_arrays
from simulator.runner.featurize import Featurizer
from simulator.runner.shards import shard_digest
from simulator.runner.transport import RunnerClient
from simulator.scenario import Scenario, scenario_to_yaml

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Request = tuple[str, Callable[[], RecordDict]]


class FlowerTransport:
    """Clients reached through a Flower ``Grid`` (simulation or Deployment Engine).

    Parameters
    ----------
    fleet : connected fleet (partition -> node map).
    scenario : the run's scenario (sent to the clients as resolved YAML).
    name : ``flower-sim`` or ``flower-deploy`` (labels outputs).
    """

    def __init__(self, fleet: Fleet, scenario: Scenario, *, name: str) -> None:
        self._fleet = fleet
        self._yaml = scenario_to_yaml(scenario)
        self._name = name
        self._fanout = FlowerFanout(self)
        self._channels: dict[int, FlowerClientChannel] = {}
        self._clients = list(range(scenario.partition.num_clients))

    @property
    def name(self) -> str:
        return self._name

    @property
    def fanout(self) -> FlowerFanout:
        return self._fanout

    @property
    def fleet(self) -> Fleet:
        return self._fleet

    def channel(self, client_id: int) -> FlowerClientChannel:
        return self._channels[client_id]

    def send(
        self, requests: Mapping[int, Request], *, repeatable: bool, train: bool = False
    ) -> Exchange:
        """One exchange with the head timeout (or the training timeout)."""
        s = self._fleet.settings
        timeout = s.train_timeout if train else s.timeout
        return self._fleet.exchange(requests, timeout=timeout, repeatable=repeatable)

    # ------------------------------------------------------------ FedAvg
    def local_round(self, round_index: int, global_arrays: StateArrays) -> Sequence[LocalUpdate]:
        def content() -> RecordDict:
            return RecordDict(
                {
                    rec.ARRAYS: rec.to_array_record(global_arrays),
                    rec.CONFIG: rec.config({"scenario": self._yaml, "round": round_index}),
                }
            )

        ex = self.send(
            {c: (rec.TRAIN, content) for c in self._clients}, repeatable=True, train=True
        )
        if ex.failures:
            raise ClientUnavailableError(ex.failures, f"FedAvg round {round_index + 1}")
        updates = []
        for c in sorted(ex.replies):
            reply = ex.replies[c]
            metrics = reply.metric_records[rec.METRICS]
            n = rec.get_int(metrics, "num-examples")
            if n == 0:
                continue
            arrays = rec.from_array_record(reply.array_records[rec.ARRAYS])
            state = {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}
            updates.append(LocalUpdate(state, n, rec.get_number(metrics, "loss")))
        return updates

    # ------------------------------------------------------------ head clients
    def open_clients(
        self, featurizer: Featurizer, shards: Sequence[IntArray]
    ) -> dict[int, RunnerClient]:
        extractor = state_to_arrays(featurizer.model)
        rff = featurizer.rff.to_arrays()

        def content() -> RecordDict:
            return RecordDict(
                {
                    rec.ARRAYS: rec.to_array_record(extractor),
                    rec.RFF: rec.to_array_record(rff),
                    rec.CONFIG: rec.config({"scenario": self._yaml}),
                }
            )

        ex = self.send(
            {c: (rec.SETUP, content) for c in self._clients}, repeatable=True, train=True
        )
        if ex.failures:
            raise ClientUnavailableError(ex.failures, "building the clients' head rows")
        for c in self._clients:
            status = ex.replies[c].config_records[rec.REPLY]
            if status["digest"] != shard_digest(shards[c]):
                raise InputError(
                    f"client {c} holds a different shard than the server expects: every "
                    "machine must load the same data for the scenario"
                )
            self._channels[c] = FlowerClientChannel(self, c, shards[c], status)
            if rec.RESULT in ex.replies[c].array_records:
                first = rec.from_array_record(ex.replies[c].array_records[rec.RESULT])
                stats = decode_statistics(first)
                W0 = np.zeros((featurizer.rff.output_dim, stats.gradient.shape[1]))
                self._fanout.seed(c, W0, stats)
        return dict(self._channels)

    def refresh_weights(self) -> None:
        """Fetch current weights of every client whose cached weights are stale."""
        stale = [c for c, ch in self._channels.items() if ch.stale]

        def content() -> RecordDict:
            return RecordDict()

        ex = self.send({c: (rec.WEIGHTS, content) for c in stale}, repeatable=True)
        if ex.failures:
            raise ClientUnavailableError(ex.failures, "reading weights")
        for c, reply in ex.replies.items():
            weights = rec.from_array_record(reply.array_records[rec.RESULT])["weights"]
            self._channels[c].set_weights(np.asarray(weights, dtype=np.float64))

    def exclude(self, client_id: int) -> None:
        """A failed client: never message it again."""
        self._channels.pop(client_id, None)
        self._clients = [c for c in self._clients if c != client_id]

    def reports(self, W: FloatArray, clients: Sequence[int]) -> dict[int, ClientReport]:
        def content() -> RecordDict:
            return RecordDict({rec.HEAD: rec.to_array_record({"W": W})})

        ex = self.send({c: (rec.REPORT, content) for c in clients}, repeatable=True)
        if ex.failures:
            raise ClientUnavailableError(ex.failures, "client reports")
        out: dict[int, ClientReport] = {}
        for c, reply in sorted(ex.replies.items()):
            text = str(reply.config_records[rec.REPLY]["report"])
            out[c] = ClientReport.from_dict(json.loads(text))
        return out

    def summary(self) -> dict[str, Any]:
        """Where the time went, per message type (``transport.json``)."""
        return {
            "transport": self._name,
            "nodes": {str(c): n for c, n in sorted(self._fleet.nodes.items())},
            "messages": {k: v.as_dict() for k, v in sorted(self._fleet.stats.items())},
        }
