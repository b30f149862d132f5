"""Flower's simulation engine at a thousand clients: one pass over the queued messages.

In flwr 1.42 the simulation engine moves messages from its in-memory LinkState to the Ray
workers in ``add_messages_to_queue`` (``server/superlink/fleet/vce/vce_api.py``): every 0.1 s
it asks the state, *for every virtual SuperNode in turn*, for one undelivered message
(``InMemoryLinkState.get_message_ins(node_id, limit=1)``), and each of those calls walks the
whole message store, checking every stored message's expiry under the state's lock. A round to
N clients therefore costs N x (N messages in the store) checks per sweep: at 1,000 clients
about 5 s of Python for one all-client round trip, where the clients' own work is
milliseconds.

:func:`sweep_once` does the same in one pass: it checks every stored message's expiry once
(``_check_stored_messages``, which also drops expired and foreign messages, as Flower does),
then takes, in the order the server pushed them, the first undelivered message of each
SuperNode of the simulation (one per SuperNode per sweep, as Flower's ``limit=1`` does, so two
messages to one SuperNode never run at the same time) and marks it delivered.
:func:`one_pass_queue` installs it in ``vce_api`` for the duration of a simulation (the module
looks the function up when ``run_api`` starts its thread). With a LinkState other than the
in-memory one it leaves Flower's function in charge.

Internals used (flwr 1.42): ``vce_api.add_messages_to_queue`` (replaced),
``InMemoryLinkState.lock``, ``.message_ins_store``, ``._check_stored_messages``;
:func:`pin_problems` names any that changed (``tests/test_flower_many_clients.py``).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from queue import Queue
from typing import Any

from flwr.app import Message
from flwr.server.superlink.fleet.vce import vce_api
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
from flwr.supercore.date import now

#: Seconds between sweeps of the message store (Flower's own: 0.1 s). A sweep of an empty
#: store is a dictionary walk under a lock; of a store of 1,000 messages a few milliseconds.
SWEEP_INTERVAL = 0.02

#: Flower's ``add_messages_to_queue`` (restored after each simulation).
FLOWER_ADD_MESSAGES = vce_api.add_messages_to_queue


def sweep_once(state: InMemoryLinkState, nodes: Mapping[int, int] | set[int]) -> list[Message]:
    """The first undelivered message of each SuperNode in ``nodes``, marked delivered.

    Parameters
    ----------
    state : the simulation's in-memory LinkState.
    nodes : the simulation's SuperNode ids (a node -> partition mapping, or a set).

    Returns
    -------
    list of Message
        At most one per SuperNode, in the order the server stored them.
    """
    wanted = set(nodes)
    taken: dict[int, Message] = {}
    with state.lock:
        ids = list(state.message_ins_store)
        state._check_stored_messages(set(ids))  # drops the expired ones, as Flower does
        for mid in ids:
            msg = state.message_ins_store.get(mid)
            if msg is None or msg.metadata.delivered_at != "":
                continue
            node = msg.metadata.dst_node_id
            if node in wanted and node not in taken:
                taken[node] = msg
        delivered_at = now().isoformat()
        for msg in taken.values():
            msg.metadata.delivered_at = delivered_at
    return list(taken.values())


def add_messages_to_queue(
    state: Any,
    queue: Queue[Message],
    nodes_mapping: dict[int, int],
    f_stop: threading.Event,
) -> None:
    """Drop-in for Flower's ``add_messages_to_queue``: one pass over the store per sweep."""
    if not isinstance(state, InMemoryLinkState):
        FLOWER_ADD_MESSAGES(state, queue, nodes_mapping, f_stop)
        return
    nodes = set(nodes_mapping)
    while not f_stop.is_set():
        for msg in sweep_once(state, nodes):
            queue.put(msg)
        f_stop.wait(SWEEP_INTERVAL)


@contextmanager
def one_pass_queue() -> Iterator[None]:
    """Run the body with :func:`add_messages_to_queue` in Flower's simulation engine."""
    previous: Callable[..., None] = vce_api.add_messages_to_queue
    vce_api.add_messages_to_queue = add_messages_to_queue
    try:
        yield
    finally:
        vce_api.add_messages_to_queue = previous


def pin_problems() -> list[str]:
    """What no longer matches the simulation engine internals used here (empty: all good)."""
    problems: list[str] = []
    params = list(inspect.signature(FLOWER_ADD_MESSAGES).parameters)
    if params != ["state", "queue", "nodes_mapping", "f_stop"]:
        problems.append(f"vce_api.add_messages_to_queue takes {params}")
    if "target=add_messages_to_queue" not in inspect.getsource(vce_api.run_api):
        problems.append("vce_api.run_api no longer starts add_messages_to_queue by its name")
    init = inspect.getsource(InMemoryLinkState.__init__)
    for name in ("self.lock", "self.message_ins_store"):
        if name not in init:
            problems.append(f"InMemoryLinkState has no {name[5:]}")
    check = getattr(InMemoryLinkState, "_check_stored_messages", None)
    if check is None or "message_ids" not in inspect.signature(check).parameters:
        problems.append("InMemoryLinkState._check_stored_messages(message_ids) is gone")
    return problems
