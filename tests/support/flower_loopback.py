"""A Flower ``Grid`` that delivers messages to ClientApps in this process (tests only).

It runs the real ``clients.client_app:app`` with one ``Context`` per node, so the whole Flower
adapter stack (fleet, transport, channels, statistics cache, handlers, ``context.state``) runs
in milliseconds, without Ray or SuperNodes. Nodes can be made to fail: ``dead`` nodes never
answer, ``broken`` nodes answer a message type with an error, ``flaky`` nodes answer their first
message of a type with an error (a transient failure).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.supercore.task_identity import TaskIdentity

from clients.client_app import app as default_app

SERVER_NODE = 1


@dataclass
class LoopbackGrid:
    num_nodes: int
    app: ClientApp = default_app
    dead: set[int] = field(default_factory=set)  # partition ids that never answer
    broken: dict[int, str] = field(default_factory=dict)  # partition -> message type to fail
    flaky: dict[int, str] = field(default_factory=dict)  # partition -> type to fail once
    sent: Counter[tuple[int, str]] = field(default_factory=Counter)  # (partition, type) -> n
    kill_after: dict[tuple[int, str], int] = field(default_factory=dict)  # die after n of a type
    keep: bool = False  # keep every message delivered, in ``received``
    received: list[Message] = field(default_factory=list)

    def __post_init__(self) -> None:
        # a Message built outside a Flower process needs the run's identity
        TaskIdentity.run_id = 7
        TaskIdentity.node_id = SERVER_NODE
        TaskIdentity.task_id = 1
        ids = itertools.count(1000)
        self.node_of = {p: next(ids) for p in range(self.num_nodes)}
        self.partition_of = {n: p for p, n in self.node_of.items()}
        self.contexts = {
            n: Context(
                run_id=7,
                node_id=n,
                node_config={"partition-id": p, "num-partitions": self.num_nodes},
                state=RecordDict(),
                run_config={},
            )
            for p, n in self.node_of.items()
        }
        self._replies: dict[str, Message] = {}

    def get_node_ids(self) -> list[int]:
        return list(self.node_of.values())

    def push_messages(self, messages: list[Message]) -> list[str]:
        out = []
        for msg in messages:
            mid = uuid4().hex
            msg.metadata.__dict__["_message_id"] = mid
            msg.metadata.__dict__["_run_id"] = 7
            msg.metadata.__dict__["_src_node_id"] = SERVER_NODE
            out.append(mid)
            self._deliver(mid, msg)
        return out

    def _deliver(self, mid: str, msg: Message) -> None:
        node = msg.metadata.dst_node_id
        part = self.partition_of[node]
        mtype = msg.metadata.message_type
        self.sent[(part, mtype)] += 1
        if self.keep:
            self.received.append(msg)
        limit = self.kill_after.get((part, mtype))
        if limit is not None and self.sent[(part, mtype)] > limit:
            self.dead.add(part)
        if part in self.dead:
            return
        if self.flaky.get(part) == mtype:
            del self.flaky[part]
            self._replies[mid] = Message(Error(code=0, reason="transient"), reply_to=msg)
            return
        if self.broken.get(part) == mtype:
            self._replies[mid] = Message(Error(code=0, reason="broken on purpose"), reply_to=msg)
            return
        try:
            reply = self.app(msg, self.contexts[node])
        except Exception as exc:  # the engines turn handler exceptions into error replies
            reply = Message(Error(code=1, reason=f"{type(exc).__name__}: {exc}"), reply_to=msg)
        self._replies[mid] = reply

    def pull_messages(self, message_ids: list[str]) -> list[Message]:
        return [self._replies.pop(m) for m in list(message_ids) if m in self._replies]

    def unlearn_messages(self) -> dict[int, int]:
        """How many deletions each partition received."""
        return {p: self.sent[(p, "train.unlearn")] for p in range(self.num_nodes)}
