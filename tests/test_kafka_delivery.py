"""Receipts published while the next batch is applied (``server/kafka/delivery.py``).

The invariant the exactly-once protocol rests on: the checkpoint of batch t+1 is saved only
once batch t's outbox is on the broker. The publisher is held (a seam, as the store's writer
thread is in ``test_kafka_journal.py``) until the consumer has applied the next batch and
waits for it; what is on disk then is checked.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.kafka import BATCH, broker, config, read_receipts
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka import journal
from server.kafka.backoff import Backoff
from server.kafka.broker import LocalBroker
from server.kafka.checkpoint import CheckpointStore, ConsumerState
from server.kafka.consumer import ConsumerConfig, DeletionConsumer
from server.kafka.producer import replay_requests
from server.kafka.publisher import Position, Publisher
from server.kafka.topics import Topics
from server.kafka.wire import OutRecord
from simulator.runner.federation import Federation, build_federation
from simulator.state_files import read_state

__all__ = ["broker"]  # the fixture, imported for pytest

WAIT = 60.0


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


class HeldConsumer(DeletionConsumer):
    """Holds batch 1's publication until the consumer waits for it with batch 2 applied.

    ``fail``: batch 1's publication then fails as it does when a stop comes while the broker
    is away (the real publisher, pointed at a port nobody listens on, after a stop).
    """

    def __init__(self, fed: Federation, cfg: ConsumerConfig, *, fail: bool = False) -> None:
        super().__init__(fed, cfg)
        self.fail = fail
        self.waiting = threading.Event()  # the main thread waits for batch 1's receipts
        self.seen: dict[str, Any] = {}

    def _deliver(self, *, ahead: bool = False) -> bool:
        flying = self._delivery is not None and self._delivery.in_flight is not None
        if ahead and flying and not self.waiting.is_set():
            self.seen["W_ahead"] = self.fed.head.W.copy()
            self.seen["journal"] = journal_batches(self.config.state_dir)
            self.waiting.set()
        return super()._deliver(ahead=ahead)

    def _new_publisher(self) -> Publisher:
        outer = self

        class Held(Publisher):
            def publish(
                self,
                records: Sequence[OutRecord],
                batch: int,
                *,
                start: dict[Position, int],
                verify: bool,
            ) -> dict[Position, int]:
                if batch == 1 and not verify:
                    outer.seen["held"] = outer.waiting.wait(WAIT)
                    if outer.fail:
                        outer.stop()
                        self.bootstrap = "127.0.0.1:9"  # the broker is away
                return super().publish(records, batch, start=start, verify=verify)

        cfg = self.config
        backoff = Backoff(stop=self.waits.stopped)
        return Held(cfg.bootstrap, flush_timeout=cfg.flush_timeout, backoff=backoff)


def journal_batches(folder: Path) -> list[int]:
    """The batches journaled after the folder's snapshot."""
    token = str(read_state(folder / "checkpoint.npz")["snapshot"])
    return [r.batch for r in journal.read(folder / journal.NAME, token)]


def events(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == "deletion_batch"]


def held_stream(
    broker: LocalBroker, built: Federation, folder: Path, batches: int, *, fail: bool = False
) -> tuple[list[Any], HeldConsumer]:
    """``batches`` full batches of requests on the broker, and a held consumer of them."""
    fed = copy.deepcopy(built)
    requests = fed.requests[: batches * BATCH]
    replay_requests(requests, bootstrap=broker.bootstrap, topics=Topics())
    cfg = config(broker.bootstrap, folder, snapshot_every=10)
    return requests, HeldConsumer(fed, cfg, fail=fail)


def test_the_next_batch_is_applied_meanwhile_and_saved_only_after_the_receipts(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    requests, consumer = held_stream(broker, built, tmp_path, 3)

    summary = consumer.run()

    assert consumer.seen["held"], "batch 2 was not applied while batch 1's receipts were held"
    # batch 2 applied, but only batch 1 is persisted while its receipts are not out
    assert consumer.seen["journal"] == [1]
    receipts = read_receipts(broker.bootstrap, Topics())
    assert [r.request_id for r in receipts] == [r.request_id for r in requests]
    batches = events(tmp_path)
    assert [e["consumer_batch"] for e in batches] == [1, 2, 3] == list(range(1, 4))
    assert all(len(e["latency_seconds"]) == e["requests"] for e in batches)
    assert batches[1]["timings"]["publish_wait"] > 0.0  # batch 2 waited for batch 1's receipts
    assert summary["batches"] == 3 and summary["applied"] + summary["rejected"] == len(requests)


def test_a_stop_that_ends_the_publication_undoes_the_batch_applied_after_it(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    requests, consumer = held_stream(broker, built, tmp_path, 2, fail=True)
    fed, cfg = consumer.fed, consumer.config

    consumer.run()

    # batch 2 was applied, then undone: the federation is the checkpoint's (batch 1)
    assert journal_batches(cfg.state_dir) == []  # the clean end snapshotted batch 1
    assert not np.array_equal(fed.head.W, consumer.seen["W_ahead"])
    saved = copy.deepcopy(built)
    with CheckpointStore(cfg.state_dir, saved) as store:
        state = store.load()
    assert isinstance(state, ConsumerState)
    assert state.batch == 1 and state.offsets == {0: BATCH}
    np.testing.assert_array_equal(fed.head.W, saved.head.W)
    assert read_receipts(broker.bootstrap, Topics()) == []  # batch 1's never got out

    # a restart sends batch 1's receipts and answers batch 2: each request once
    again = DeletionConsumer(copy.deepcopy(built), cfg)
    again.run()
    receipts = read_receipts(broker.bootstrap, Topics())
    assert [r.request_id for r in receipts] == [r.request_id for r in requests]
