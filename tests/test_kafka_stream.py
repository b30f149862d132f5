"""The consumer against a real broker: receipts, duplicates, dead letters, offsets, resume."""

from __future__ import annotations

import copy
import gc
import json
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaConsumer, TopicPartition
from support.kafka import BATCH, broker, config, headers, in_process, read_receipts, read_topic
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker
from server.kafka.consumer import DeletionConsumer
from server.kafka.producer import replay, replay_requests, scenario_requests
from server.kafka.publisher import Publisher
from server.kafka.topics import Topics, ensure_topics
from simulator.runner.federation import Federation, build_federation

__all__ = ["broker"]  # the fixture, imported for pytest


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


@pytest.fixture
def fed(built: Federation) -> Federation:
    return copy.deepcopy(built)


def test_every_request_is_answered_once_and_the_model_matches(
    broker: LocalBroker, fed: Federation, tmp_path: Path
) -> None:
    requests = fed.requests
    assert scenario_requests(fed.scenario) == requests  # the producer's stream is the runner's
    topics = Topics()
    replay_requests(requests, bootstrap=broker.bootstrap, topics=topics)
    reference = copy.deepcopy(fed)
    frozen: list[int] = []  # objects the garbage collector skips, seen from each batch

    def seen(event: dict, _: Federation) -> None:
        if event["event"] == "deletion_batch":
            frozen.append(gc.get_freeze_count())

    summary = DeletionConsumer(fed, config(broker.bootstrap, tmp_path), on_event=[seen]).run()
    # the set-up (federation, checkpoint state, Kafka client) is frozen out of the full
    # collections while the batches run (server/kafka/collector.py), and thawed after
    assert frozen and min(frozen) > 10_000 and gc.get_freeze_count() == 0

    receipts = read_receipts(broker.bootstrap, topics)
    assert [r.request_id for r in receipts] == [r.request_id for r in requests]
    assert [r.status for r in receipts] == in_process(reference, requests)
    np.testing.assert_array_equal(fed.head.W, reference.head.W)
    assert summary["records"] == len(requests) and summary["dead_letters"] == 0
    assert summary["applied"] + summary["rejected"] == len(requests)
    assert summary["batches"] == -(-len(requests) // BATCH)
    # offsets were committed after the checkpoint, for lag monitoring
    probe = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="unlearnsim")
    try:
        assert probe.committed(TopicPartition(topics.requests, 0)) == len(requests)
    finally:
        probe.close()
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    batches = [e for e in events if e["event"] == "deletion_batch"]
    assert sum(e["requests"] for e in batches) == len(requests)
    assert all(len(e["latency_seconds"]) == e["requests"] for e in batches)


def test_duplicates_and_malformed_records_never_stop_the_stream(
    broker: LocalBroker, fed: Federation, tmp_path: Path
) -> None:
    topics = Topics("req", "rec", "dlq")
    ensure_topics(broker.bootstrap, topics)
    requests = fed.requests[:40]
    half = [(r.request_id.encode(), r.to_json()) for r in requests[:20]]
    rest = [(r.request_id.encode(), r.to_json()) for r in requests[20:]]
    bad_version = json.loads(requests[0].to_json()) | {"schema_version": 2, "request_id": "v2"}
    garbage = [
        (b"g1", b"\x00\x01 not json"),
        (b"g2", json.dumps({"request_id": "no-subject"}).encode()),
        (b"g3", json.dumps(bad_version).encode()),
        (b"g4", b"{" + b" " * (1536 * 1024) + b"}"),  # 1.5 MiB: over the 1 MiB limit
        (b"g5", b""),
    ]
    again = [(r.request_id.encode(), r.to_json()) for r in requests[3:6]]
    replay(half + garbage + again + rest, bootstrap=broker.bootstrap, topic=topics.requests)

    summary = DeletionConsumer(fed, config(broker.bootstrap, tmp_path, topics=topics)).run()

    dead = read_topic(broker.bootstrap, topics.dead_letters)
    assert [m.key for m in dead] == [k for k, _ in garbage]
    assert [headers(m)["reason-kind"] for m in dead] == [
        b"malformed",
        b"schema",
        b"schema",
        b"oversized",
        b"malformed",
    ]
    for m, (_, original) in zip(dead[:3], garbage[:3], strict=True):
        assert m.value == original  # the original bytes, unchanged
        assert headers(m)["reason"]
    assert b"schema_version" in headers(dead[2])["reason"]
    assert len(dead[3].value) == 900 * 1024 and headers(dead[3])["truncated"] == b"true"
    assert headers(dead[3])["original-size"] == str(len(garbage[3][1])).encode()

    receipts = read_receipts(broker.bootstrap, topics)
    by_status: dict[str, list[str]] = {}
    for r in receipts:
        by_status.setdefault(r.status, []).append(r.request_id)
    assert sorted(by_status["duplicate"]) == sorted(r.request_id for r in requests[3:6])
    answered = by_status.get("applied", []) + by_status.get("rejected", [])
    assert sorted(answered) == sorted(r.request_id for r in requests)  # exactly once each
    assert summary["dead_letters"] == 5 and summary["duplicates"] == 3
    assert summary["records"] == 48


class Crash(BaseException):
    """The process dies (not an error the consumer could handle)."""


def test_crash_between_checkpoint_and_publish_sends_only_what_is_missing(
    broker: LocalBroker, built: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fed = copy.deepcopy(built)
    requests = fed.requests
    topics = Topics()
    replay_requests(requests, bootstrap=broker.bootstrap, topics=topics)
    real_send = Publisher._send

    def dies_half_way(self: Publisher, pending: list, batch: int, ends: dict) -> None:
        if batch == 3:  # checkpoint 3 is on disk; half its receipts reach the broker
            real_send(self, pending[: len(pending) // 2], batch, ends)
            raise Crash
        real_send(self, pending, batch, ends)

    monkeypatch.setattr(Publisher, "_send", dies_half_way)
    with pytest.raises(Crash):
        DeletionConsumer(fed, config(broker.bootstrap, tmp_path)).run()
    monkeypatch.undo()
    assert len(read_receipts(broker.bootstrap, topics)) == 2 * BATCH + BATCH // 2

    restarted = copy.deepcopy(built)  # a new process rebuilds the federation
    summary = DeletionConsumer(restarted, config(broker.bootstrap, tmp_path)).run()
    receipts = read_receipts(broker.bootstrap, topics)
    # the missing half was sent, the half already there was not: one receipt per request
    assert [r.request_id for r in receipts] == [r.request_id for r in requests]
    reference = copy.deepcopy(built)
    in_process(reference, requests)
    np.testing.assert_array_equal(restarted.head.W, reference.head.W)
    assert summary["records"] == len(requests)
