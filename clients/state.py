"""A client's state between Flower messages, kept in ``context.state``.

On Flower's Deployment Engine every message runs in a fresh process, so nothing survives in
module globals. After ``train.setup`` the client's shard (head features, labels, global ids,
weights, retained flags, decorrelation plan) lives in ``context.state`` as a
:class:`~simulator.federation.ClientSnapshot`; every later message restores the client from it
and, if the message changed it, saves it back. The raw shard for FedAvg is never stored: it is
rebuilt from the scenario and the partition id (deterministic).
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Context

from clients.protocol import STATE_SHARD, STATE_SHARD_META, pack, unpack
from simulator.errors import ConfigError, InputError
from simulator.federation import ClientSnapshot, FederatedClient


def partition_id(context: Context) -> int:
    """The partition (client id) of this node, from ``--node-config partition-id=N``."""
    value = context.node_config.get("partition-id")
    if value is None:
        raise ConfigError(
            "the SuperNode has no partition id: start it with "
            "--node-config 'partition-id=N num-partitions=M'",
            "node-config.partition-id",
        )
    return int(value)


def save_client(context: Context, client: FederatedClient) -> None:
    """Store the client's snapshot in ``context.state``."""
    arrays, scalars = client.snapshot().to_arrays()
    context.state[STATE_SHARD] = pack({STATE_SHARD: arrays})
    context.state[STATE_SHARD_META] = ConfigRecord(dict(scalars))


def load_client(context: Context) -> FederatedClient:
    """The client saved by :func:`save_client` (bit-identical answers)."""
    if STATE_SHARD not in context.state.array_records:
        raise InputError("this client has no head rows yet: the server must send train.setup")
    arrays = unpack(context.state.array_records[STATE_SHARD])[STATE_SHARD]
    meta = context.state.config_records[STATE_SHARD_META]
    scalars = {k: v for k, v in meta.items() if isinstance(v, int | float | str)}
    return FederatedClient.restore(ClientSnapshot.from_arrays(arrays, scalars))
