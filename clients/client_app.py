"""The Flower ClientApp: one client of the federation, holding its data shard.

Each handler is a thin adapter: decode the message, call the core, encode the reply (message
types in :mod:`clients.records`). What must survive between messages lives in
``context.state`` (:mod:`clients.state`); what can be rebuilt (the raw shard, from the scenario
and the partition id) is rebuilt. torch is imported only by the handlers that need it
(``train``, ``train.setup``), so the frequent head messages start fast in a fresh process.
"""

from __future__ import annotations

import json
import time

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable

from clients import records as rec
from clients.state import load_client, partition_id, save_client
from simulator.errors import UnknownSampleError
from simulator.federation import FederatedClient
from simulator.federation.codec import encode_deletion, encode_statistics


def timing_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Add the handler's own seconds to every reply (the server separates them from polling)."""
    started = time.perf_counter()
    reply = call_next(msg, context)
    if not reply.has_error():
        reply.content[rec.TIMING] = ConfigRecord({"seconds": time.perf_counter() - started})
    return reply


app = ClientApp(mods=[timing_mod])


@app.query("hello")
def hello(msg: Message, context: Context) -> Message:
    """Say which partition this node holds."""
    parts = context.node_config.get("num-partitions", -1)
    reply = {"partition-id": partition_id(context), "num-partitions": int(parts)}
    return Message(RecordDict({rec.REPLY: rec.config(reply)}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One FedAvg round of the extractor on this client's shard."""
    from clients.build import local_update  # torch

    cfg = msg.content.config_records[rec.CONFIG]
    update = local_update(
        str(cfg["scenario"]),
        partition_id(context),
        rec.get_int(cfg, "round"),
        rec.from_array_record(msg.content.array_records[rec.ARRAYS]),
    )
    content = RecordDict({rec.METRICS: MetricRecord({"num-examples": 0, "loss": 0.0})})
    if update is not None:
        content[rec.ARRAYS] = rec.to_array_record(update.state)
        content[rec.METRICS] = MetricRecord(
            {"num-examples": update.num_examples, "loss": update.loss}
        )
    return Message(content, reply_to=msg)


@app.train("setup")
def setup(msg: Message, context: Context) -> Message:
    """Build the head rows from the frozen extractor and RFF map; fit the weights."""
    from clients.build import build_client  # torch

    cfg = msg.content.config_records[rec.CONFIG]
    client, digest = build_client(
        str(cfg["scenario"]),
        partition_id(context),
        rec.from_array_record(msg.content.array_records[rec.ARRAYS]),
        rec.from_array_record(msg.content.array_records[rec.RFF]),
    )
    save_client(context, client)
    reply = {"rows": int(client.sample_ids.size), "digest": digest, **_status(client)}
    # the head's training starts at W = 0 (simulator/head/training.py): answer it now
    W0 = np.zeros((client.data.dim, client.data.columns))
    first = client.statistics(W0, hessian=True, gram=True)
    content = RecordDict(
        {rec.REPLY: rec.config(reply), rec.RESULT: rec.to_array_record(encode_statistics(first))}
    )
    return Message(content, reply_to=msg)


@app.query("gradhess")
def gradhess(msg: Message, context: Context) -> Message:
    """Loss, gradient (and Hessian, Gram) sums of the retained rows at the given head."""
    client = load_client(context)
    head = rec.from_array_record(msg.content.array_records[rec.HEAD])
    cfg = msg.content.config_records[rec.CONFIG]
    stats = client.statistics(
        head["W"],
        hessian=bool(cfg["hessian"]),
        gram=bool(cfg["gram"]),
        hessian_at=head.get("hessian_at"),
    )
    content = RecordDict({rec.RESULT: rec.to_array_record(encode_statistics(stats))})
    return Message(content, reply_to=msg)


@app.train("unlearn")
def unlearn(msg: Message, context: Context) -> Message:
    """Delete rows, refit the decorrelation weights, return what changed in the objective."""
    client = load_client(context)
    ids = [int(i) for i in rec.from_array_record(msg.content.array_records[rec.IDS])["ids"]]
    unknown = client.unknown_ids(ids)
    if unknown:
        raise UnknownSampleError(unknown, f"shard of client {client.client_id}")
    head = rec.from_array_record(msg.content.array_records[rec.HEAD])
    change = client.delete(ids, W=head["W"], W_ref=head["W_ref"])
    save_client(context, client)
    content = RecordDict(
        {
            rec.RESULT: rec.to_array_record(encode_deletion(change)),
            rec.REPLY: rec.config(_status(client)),
        }
    )
    return Message(content, reply_to=msg)


@app.query("weights")
def weights(msg: Message, context: Context) -> Message:
    """Current weight of every row (0 for deleted rows)."""
    client = load_client(context)
    arrays = {"weights": client.data.weights}
    return Message(RecordDict({rec.RESULT: rec.to_array_record(arrays)}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """This client's report at the given head (rows, deletions received, accuracy)."""
    client = load_client(context)
    W = rec.from_array_record(msg.content.array_records[rec.HEAD])["W"]
    report = client.report(W)
    metrics = MetricRecord(
        {
            "accuracy-retained": report.accuracy_retained,
            "retained": report.retained,
            "deletion-batches": report.deletion_batches,
        }
    )
    reply = ConfigRecord({"report": json.dumps(report.to_dict())})
    return Message(RecordDict({rec.REPLY: reply, rec.METRICS: metrics}), reply_to=msg)


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
