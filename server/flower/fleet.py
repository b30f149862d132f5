"""The server's view of the SuperNodes: partition ids, and round trips with timeouts.

Node ids are random and change when a SuperNode restarts; a client's stable identity is its
``partition-id`` node config. :meth:`Fleet.connect` asks every node which partition it holds
(``query.hello``) and maps partition -> node. :meth:`Fleet.exchange` sends one message per
client and collects the replies with a deadline. A client that answers with an error is asked
again (if the message may be repeated); a client that does not answer within the timeout is
reported as failed, with the reason (its message is already queued at its SuperNode: sending
it again would only add work, so the timeout is the patience). Nothing is dropped silently.
The fleet also records where the time went: wall time of every round trip against the
clients' own compute time (the ``timing`` record the ClientApp adds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from clients import protocol as rec
from server.flower.settings import FleetSettings
from simulator.errors import ClientUnavailableError, ConfigError

#: First pause between reply pulls, and how each next pause grows (up to the poll interval).
FIRST_PULL = 0.01
PULL_GROWTH = 1.5


#: One message to a client: its type and a function building its content (built per try).
Request = tuple[str, Callable[[], RecordDict]]


@dataclass(frozen=True)
class Exchange:
    """Replies of one exchange (by client id) and the clients that failed, with reasons."""

    replies: dict[int, RecordDict]
    failures: dict[int, str]


@dataclass(frozen=True)
class Failed:
    """Why a client's reply is missing; error replies may be asked again, timeouts not."""

    reason: str
    retryable: bool


@dataclass
class MessageStats:
    """Accumulated cost of one message type."""

    round_trips: int = 0
    messages: int = 0
    wall_seconds: float = 0.0
    client_seconds: float = 0.0  # slowest client's compute per round trip, summed

    def as_dict(self) -> dict[str, float]:
        """The counters as a JSON-ready dict."""
        return {
            "round_trips": self.round_trips,
            "messages": self.messages,
            "wall_seconds": self.wall_seconds,
            "client_seconds": self.client_seconds,
            "overhead_seconds": self.wall_seconds - self.client_seconds,
        }


@dataclass
class Fleet:
    """Partition -> node map over a Flower ``Grid``, and timed round trips.

    Parameters
    ----------
    grid : the ServerApp's grid.
    settings : timeouts, retries, polling.
    num_clients : partitions 0 .. num_clients-1 must all be present.
    log : where progress lines go.
    """

    grid: Grid
    settings: FleetSettings
    num_clients: int
    log: Callable[[str], None] = print
    nodes: dict[int, int] = field(default_factory=dict)
    stats: dict[str, MessageStats] = field(default_factory=dict)

    def connect(self) -> None:
        """Wait for a SuperNode of every partition and map partition -> node id."""
        deadline = time.monotonic() + self.settings.node_wait
        asked: set[int] = set()
        while True:
            fresh = {n for n in self.grid.get_node_ids() if n not in asked}
            if fresh:
                asked |= fresh
                self._hello(fresh, max(1.0, deadline - time.monotonic()))
            missing = sorted(set(range(self.num_clients)) - set(self.nodes))
            if not missing:
                self.log(f"connected to {self.num_clients} clients: {self.nodes}")
                return
            if time.monotonic() > deadline:
                wait, n = self.settings.node_wait, self.num_clients
                raise ClientUnavailableError(
                    {
                        c: f"no SuperNode with partition-id {c} answered within {wait:g} s"
                        for c in missing
                    },
                    f"connecting to the clients ({len(asked)} SuperNodes joined for {n} clients;"
                    " a local `flwr run` simulation needs `flwr federation simulation-config"
                    f" ... --num-supernodes {n}`)",
                )
            time.sleep(self.settings.poll_interval)

    def _hello(self, nodes: set[int], timeout: float) -> None:
        sent = {n: Message(RecordDict(), dst_node_id=n, message_type=rec.HELLO) for n in nodes}
        replies, _ = self._round_trip(sent, timeout, rec.HELLO)
        for node, reply in replies.items():
            if isinstance(reply, Failed):
                self.log(f"node {node} did not say hello: {reply.reason}")
                continue
            pid = rec.get_int(rec.config_of(reply), "partition-id")
            if not 0 <= pid < self.num_clients:
                self.log(f"node {node} holds partition {pid}, outside 0..{self.num_clients - 1}")
            elif pid in self.nodes and self.nodes[pid] != node:
                raise ConfigError(
                    f"SuperNodes {self.nodes[pid]} and {node} both hold partition {pid}",
                    "node-config.partition-id",
                )
            else:
                self.nodes[pid] = node

    def exchange(
        self,
        requests: Mapping[int, tuple[str, Callable[[], RecordDict]]],
        *,
        timeout: float,
        repeatable: bool,
    ) -> Exchange:
        """Send ``message_type, content()`` to each client; collect replies and failures.

        ``content`` is a factory so that a retry sends a fresh record. A repeatable message
        (queries, FedAvg rounds) is sent again, up to ``settings.retries`` times, to clients
        that answered with an error; a deletion is not (it changes the client).
        """
        attempts = 1 + (self.settings.retries if repeatable else 0)
        replies: dict[int, RecordDict] = {}
        failures: dict[int, str] = {}
        pending = dict(requests)
        for attempt in range(1, attempts + 1):
            sent: dict[int, Message] = {}
            for cid, (mtype, content) in pending.items():
                node = self.nodes.get(cid)
                if node is None:
                    failures[cid] = "no SuperNode holds this partition"
                    continue
                sent[cid] = Message(content(), dst_node_id=node, message_type=mtype)
            if not sent:
                break
            mtype = next(iter(pending.values()))[0]
            got, _ = self._round_trip(sent, timeout, mtype)
            failed = {c: r for c, r in got.items() if isinstance(r, Failed)}
            replies.update({c: r for c, r in got.items() if not isinstance(r, Failed)})
            for cid, why in failed.items():
                tries = f" (attempt {attempt} of {attempts})" if attempts > 1 else ""
                failures[cid] = why.reason + tries
                self.log(f"client {cid}: {failures[cid]} [{mtype}]")
            pending = {c: pending[c] for c, why in failed.items() if why.retryable}
            if not pending:
                break
        for cid in replies:
            failures.pop(cid, None)
        return Exchange(replies, failures)

    def _round_trip(
        self, sent: Mapping[int, Message], timeout: float, mtype: str
    ) -> tuple[dict[int, RecordDict | Failed], float]:
        """Send messages and collect their replies.

        Push every message in one call, then pull until every reply is in or ``timeout``
        passes. Pulls back off from :data:`FIRST_PULL` to ``settings.poll_interval`` (a reply
        that is quick is collected quickly; a slow one costs few requests).

        Returns key -> reply content (or why it is missing), and the wall seconds.
        """
        started = time.monotonic()
        waiting: dict[str, int] = {}
        out: dict[int, RecordDict | Failed] = {}
        keys = list(sent)
        mids = list(self.grid.push_messages([sent[k] for k in keys]))
        for i, key in enumerate(keys):
            if i < len(mids) and mids[i]:
                waiting[mids[i]] = key
            else:
                out[key] = Failed("the SuperLink did not accept the message", True)
        compute = 0.0
        deadline = started + timeout
        pause = min(FIRST_PULL, self.settings.poll_interval)
        while waiting:
            for reply in self.grid.pull_messages(list(waiting)):
                mid = reply.metadata.reply_to_message_id
                if mid not in waiting:
                    continue
                key = waiting.pop(mid)
                if reply.has_error():
                    err = reply.error
                    out[key] = Failed(f"error reply (code {err.code}): {err.reason}", True)
                    continue
                out[key] = reply.content
                own = rec.get_number(rec.config_of(reply.content), rec.HANDLER_SECONDS, 0.0)
                compute = max(compute, own)
            if not waiting or time.monotonic() > deadline:
                break
            time.sleep(pause)
            pause = min(pause * PULL_GROWTH, self.settings.poll_interval)
        for key in waiting.values():
            out[key] = Failed(f"no reply within {timeout:g} s", False)
        wall = time.monotonic() - started
        s = self.stats.setdefault(mtype, MessageStats())
        s.round_trips += 1
        s.messages += len(sent)
        s.wall_seconds += wall
        s.client_seconds += compute
        return out, wall
