"""The Flower ClientApp: one client of the federation, holding its data shard.

Each handler is a thin adapter: decode the message, call the core, encode the reply (message
types in :mod:`clients.protocol`). What must survive between messages lives in
``context.state`` (:mod:`clients.state`); what can be rebuilt (the raw shard, from the scenario
and the partition id) is rebuilt. torch is imported only by the handlers that need it
(``train``, ``train.setup``), so the frequent head messages start fast in a fresh process.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from numpy.typing import NDArray

from clients import protocol as rec
from clients.state import load_client, partition_id, save_client
from simulator.errors import UnknownSampleError
from simulator.federation import FederatedClient
from simulator.federation.codec import decode_request, encode_deletion, encode_statistics
from simulator.head.logistic import StatisticsRequest


def timing_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Add the handler's own seconds to every reply (the server separates them from polling)."""
    started = time.perf_counter()
    reply = call_next(msg, context)
    if not reply.has_error():
        config = reply.content.config_records.get(rec.CONFIG)
        if config is None:
            config = reply.content[rec.CONFIG] = ConfigRecord()
        config[rec.HANDLER_SECONDS] = time.perf_counter() - started
    return reply


app = ClientApp(mods=[timing_mod])


@app.query("hello")
def hello(msg: Message, context: Context) -> Message:
    """Say which partition this node holds."""
    parts = context.node_config.get("num-partitions", -1)
    reply = {"partition-id": partition_id(context), "num-partitions": int(parts)}
    return Message(rec.content(reply), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One FedAvg round of the extractor on this client's shard."""
    from clients.build import local_update  # torch
    from simulator.models.dp_fedavg import ClientAccountants, history_from_json, history_to_json

    cfg = rec.config_of(msg.content)
    client = partition_id(context)
    accountants = None
    if "dp-history" in cfg:  # extractor_data dp: this client's accountant, kept by the server
        accountants = ClientAccountants({client: history_from_json(str(cfg["dp-history"]))})
    arrays = rec.arrays_of(msg.content)
    update = local_update(
        str(cfg["scenario"]),
        client,
        rec.get_int(cfg, "round"),
        arrays[rec.MODEL],
        accountants,
        _retained(arrays),
        int(rec.get_number(cfg, "generation", 0)),
    )
    if update is None:
        return Message(rec.content({"num-examples": 0, "loss": 0.0}), reply_to=msg)
    reply: dict[str, Any] = {"num-examples": update.num_examples, "loss": update.loss}
    if accountants is not None:
        reply["dp-history"] = history_to_json(accountants.history(client))
    return Message(rec.content(reply, {rec.MODEL: update.state}), reply_to=msg)


@app.train("setup")
def setup(msg: Message, context: Context) -> Message:
    """Build the head rows from the frozen extractor and RFF map; fit the weights."""
    from clients.build import build_client  # torch

    arrays = rec.arrays_of(msg.content)
    cfg = rec.config_of(msg.content)
    client, digest = build_client(
        str(cfg["scenario"]),
        partition_id(context),
        arrays[rec.MODEL],
        arrays[rec.RFF],
        _retained(arrays),
    )
    save_client(context, client)
    reply = {"rows": int(client.sample_ids.size), "digest": digest, **_status(client)}
    # the head's training starts at W = 0 (simulator/head/training.py): answer it now
    W0 = np.zeros((client.data.dim, client.data.columns))
    first = client.statistics(StatisticsRequest(W0, hessian=True, gram=True))
    out = {rec.RESULT: encode_statistics(first)}
    if bool(cfg.get("weights", False)):
        out[rec.ROW_WEIGHTS] = {"weights": client.data.weights}
    return Message(rec.content(reply, out), reply_to=msg)


def _retained(arrays: dict[str, dict[str, NDArray[Any]]]) -> NDArray[np.int64] | None:
    """The rows the server says this client still holds, or None (its whole shard).

    Sent with ``train`` and ``train.setup`` of a whole-model retrain at the extractor's limit.
    """
    if rec.RETAINED not in arrays:
        return None
    return np.asarray(arrays[rec.RETAINED]["ids"], dtype=np.int64)


@app.query("gradhess")
def gradhess(msg: Message, context: Context) -> Message:
    """Loss, gradient (and Hessian, Gram) sums of the retained rows at the given head."""
    client = load_client(context)
    request = decode_request(rec.config_of(msg.content), rec.arrays_of(msg.content)[rec.HEAD])
    stats = client.statistics(request)
    return Message(rec.content(None, {rec.RESULT: encode_statistics(stats)}), reply_to=msg)


@app.train("unlearn")
def unlearn(msg: Message, context: Context) -> Message:
    """Delete rows, refit the decorrelation weights, return what changed in the objective.

    With ``weights`` set in the request, the reply also carries the client's new row weights
    (what ``query.weights`` would answer next), so the server needs no second round trip.
    """
    client = load_client(context)
    arrays = rec.arrays_of(msg.content)
    ids = [int(i) for i in arrays[rec.IDS]["ids"]]
    unknown = client.unknown_ids(ids)
    if unknown:
        raise UnknownSampleError(unknown, f"shard of client {client.client_id}")
    head = arrays[rec.HEAD]
    change = client.delete(ids, W=head["W"], W_ref=head["W_ref"])
    save_client(context, client)
    out = {rec.RESULT: encode_deletion(change)}
    if bool(rec.config_of(msg.content).get("weights", False)):
        out[rec.ROW_WEIGHTS] = {"weights": client.data.weights}
    return Message(rec.content(_status(client), out), reply_to=msg)


@app.query("weights")
def weights(msg: Message, context: Context) -> Message:
    """Current weight of every row (0 for deleted rows)."""
    client = load_client(context)
    arrays = {rec.ROW_WEIGHTS: {"weights": client.data.weights}}
    return Message(rec.content(None, arrays), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The client's report at the given head (rows, deletions received, accuracy)."""
    client = load_client(context)
    W = rec.arrays_of(msg.content)[rec.HEAD]["W"]
    report = client.report(W)
    reply = {
        "report": json.dumps(report.to_dict()),
        "accuracy-retained": report.accuracy_retained,
        "retained": report.retained,
        "deletion-batches": report.deletion_batches,
    }
    return Message(rec.content(reply), reply_to=msg)


def _status(client: FederatedClient) -> dict[str, float | int]:
    """What the server mirrors: retained count, max weight, weight spread."""
    out: dict[str, float | int] = {
        "retained": client.retained_count,
        "max-weight": client.max_weight(),
        "deletion-batches": client.deletion_batches,
    }
    if client.last_weights is not None:
        out.update({f"w_{k}": v for k, v in client.last_weights.to_flat().items()})
    return out
