"""Never skip silently: the bundled broker restarted on ``memory://`` loses the log under a
checkpoint; the consumer stops with a clear error, or replays or skips as told and counts it.
Also: several request partitions, per-partition offsets in the checkpoint, a crash and resume.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from support.kafka import broker, config, read_receipts
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker
from server.kafka.checkpoint import CheckpointStore
from server.kafka.consumer import DeletionConsumer
from server.kafka.offsets import OffsetGapError
from server.kafka.producer import replay_requests
from server.kafka.publisher import Publisher
from server.kafka.topics import Topics, ensure_topics
from simulator.runner.federation import Federation, build_federation

__all__ = ["broker"]


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


def consume(built: Federation, bootstrap: str, folder: Path, **extra: Any) -> dict[str, Any]:
    """One consumer process's session (a fresh copy of the built federation, as a restart)."""
    return DeletionConsumer(copy.deepcopy(built), config(bootstrap, folder, **extra)).run()


def restart_empty(broker: LocalBroker) -> None:
    """Stop the broker and start it again on the same port: memory:// storage starts empty.

    The topics are created at once, one partition each: Tansu ignores a client's
    ``allow_auto_create_topics=False`` and gives a topic that a running consumer's fetch
    re-creates its default of 4 partitions, and the tests below are about one partition. A
    running consumer's fetch can still get there first (it did once in a full suite: the new
    log then held 14 of its records on partition 0, a "truncated" gap instead of a
    "rewritten" one), so such a topic is deleted and created again until it has one.
    """
    broker.stop()
    broker.start()
    topics = Topics()
    for _ in range(20):
        ensure_topics(broker.bootstrap, topics)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            described = admin.describe_topics([topics.requests])
            if len(described[0]["partitions"]) == 1:
                return
            admin.delete_topics([topics.requests])
        finally:
            admin.close()
        time.sleep(0.1)
    raise AssertionError("the requests topic kept coming back with several partitions")


def events(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]


def test_a_log_shorter_than_the_checkpoint_stops_the_consumer(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    topics = Topics()
    requests = built.requests
    replay_requests(requests[:40], bootstrap=broker.bootstrap, topics=topics)
    assert consume(built, broker.bootstrap, tmp_path)["offsets"] == {"0": 40}

    restart_empty(broker)  # topics re-created empty; 10 new requests
    replay_requests(requests[40:50], bootstrap=broker.bootstrap, topics=topics)
    with pytest.raises(OffsetGapError, match=r"offset 40.*ends before it.*--on-offset-gap"):
        consume(built, broker.bootstrap, tmp_path)
    assert read_receipts(broker.bootstrap, topics) == []  # nothing answered, nothing skipped

    summary = consume(built, broker.bootstrap, tmp_path, on_offset_gap="replay")
    receipts = read_receipts(broker.bootstrap, topics)
    # the last checkpoint's outbox went with the old log: it is sent again, then the new log
    outbox = [r.request_id for r in requests[32:40]]
    assert [r.request_id for r in receipts] == outbox + [r.request_id for r in requests[40:50]]
    assert summary["offset_gaps"] == 1 and summary["replayed_records"] == 10
    assert summary["gaps"][0]["kind"] == "truncated" and summary["offsets"] == {"0": 10}
    gaps = [e for e in events(tmp_path) if e["event"] == "offset_gap"]
    assert [g["action"] for g in gaps] == ["fail", "replay"]  # the stop, then the replay
    assert (gaps[1]["expected"], gaps[1]["earliest"], gaps[1]["latest"]) == (40, 0, 10)


def test_a_refilled_log_past_the_checkpoint_is_not_skipped_silently(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    """Issue 19's silent skip: after a broker restart the new log grew past the checkpointed
    offset, and the consumer used to resume there, skipping every new request before it."""
    topics = Topics()
    requests = built.requests
    replay_requests(requests[:40], bootstrap=broker.bootstrap, topics=topics)
    consume(built, broker.bootstrap, tmp_path)

    restart_empty(broker)
    fresh = requests[26:76]  # 50 requests: offsets 0..49 of the new log
    replay_requests(fresh, bootstrap=broker.bootstrap, topics=topics)
    with pytest.raises(OffsetGapError, match="not the one the checkpoint consumed"):
        consume(built, broker.bootstrap, tmp_path)
    assert read_receipts(broker.bootstrap, topics) == []

    summary = consume(built, broker.bootstrap, tmp_path, on_offset_gap="replay")
    receipts = read_receipts(broker.bootstrap, topics)[8:]  # after the old outbox, sent again
    assert sorted(r.request_id for r in receipts) == sorted(r.request_id for r in fresh)
    assert summary["gaps"][0]["kind"] == "rewritten" and summary["skipped_records"] == 0


def test_skip_goes_on_past_the_gap_and_counts_it(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    topics = Topics()
    requests = built.requests
    replay_requests(requests[:40], bootstrap=broker.bootstrap, topics=topics)
    consume(built, broker.bootstrap, tmp_path)
    restart_empty(broker)
    replay_requests(requests[26:76], bootstrap=broker.bootstrap, topics=topics)

    summary = consume(built, broker.bootstrap, tmp_path, on_offset_gap="skip")
    assert summary["offset_gaps"] == 1 and summary["skipped_records"] == 50
    assert summary["session"]["skipped_records"] == 50
    assert len(read_receipts(broker.bootstrap, topics)) == 8  # the old outbox; all 50 skipped
    later = requests[70:75]  # skipped before, never answered
    replay_requests(later, bootstrap=broker.bootstrap, topics=topics)
    summary = consume(built, broker.bootstrap, tmp_path)  # no new gap: fail is fine now
    receipts = read_receipts(broker.bootstrap, topics)[8:]
    assert [r.request_id for r in receipts] == [r.request_id for r in later]
    assert {r.status for r in receipts} <= {"applied", "rejected"}
    assert summary["offset_gaps"] == 1 and summary["sessions"] == 3


def test_a_running_consumer_notices_the_log_shrink_under_it(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    topics = Topics()
    requests = built.requests
    replay_requests(requests[:40], bootstrap=broker.bootstrap, topics=topics)
    restarted = threading.Event()

    def broker_restarts(event: dict[str, Any], _: Federation) -> None:
        if (
            event["event"] == "deletion_batch"
            and event["consumer_batch"] == 3
            and not restarted.is_set()
        ):
            restarted.set()
            restart_empty(broker)
            replay_requests(requests[40:45], bootstrap=broker.bootstrap, topics=topics)

    fed = copy.deepcopy(built)
    settings = config(
        broker.bootstrap, tmp_path, on_offset_gap="replay", idle_timeout=4.0, flush_timeout=2.0
    )
    summary = DeletionConsumer(fed, settings, on_event=[broker_restarts]).run()
    assert restarted.is_set() and summary["offset_gaps"] == 1
    assert summary["gaps"][0]["kind"] == "truncated"
    answered = Counter(r.request_id for r in read_receipts(broker.bootstrap, topics))
    # the new log, replayed, each once (in order within a partition: the consumer's fetches
    # may have made Tansu re-create the topic with 4 partitions before the producer did)
    assert answered == Counter(r.request_id for r in requests[40:45])


def test_a_running_consumer_reads_every_partition_of_a_recreated_topic(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    """Issue 28: after a wipe, the running consumer's own fetches made Tansu re-create the
    requests topic with its default partition count (4) before the producer created it; the
    new requests spread over partitions the consumer never read (1 of 5 answered)."""
    topics = Topics()
    requests = built.requests
    replay_requests(requests[:40], bootstrap=broker.bootstrap, topics=topics)
    restarted = threading.Event()

    def broker_restarts(event: dict[str, Any], _: Federation) -> None:
        third = event["event"] == "deletion_batch" and event["consumer_batch"] == 3
        if third and not restarted.is_set():
            restarted.set()
            restart_empty(broker)
            time.sleep(3.0)  # the consumer's clients fetch from the empty broker meanwhile
            replay_requests(requests[40:45], bootstrap=broker.bootstrap, topics=topics)

    settings = config(
        broker.bootstrap, tmp_path, on_offset_gap="replay", idle_timeout=4.0, flush_timeout=2.0
    )
    summary = DeletionConsumer(copy.deepcopy(built), settings, on_event=[broker_restarts]).run()
    assert restarted.is_set() and summary["offset_gaps"] == 1
    answered = Counter(r.request_id for r in read_receipts(broker.bootstrap, topics))
    assert answered == Counter(r.request_id for r in requests[40:45])  # every one, once
    assert sum(summary["offsets"].values()) == 5 and summary["records"] == 45


class Crash(BaseException):
    """The process dies."""


def test_several_request_partitions_resume_from_per_partition_offsets(
    broker: LocalBroker, built: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = Topics("multi-req", "multi-rec", "multi-dlq")
    requests = built.requests
    replay_requests(requests, bootstrap=broker.bootstrap, topics=topics, request_partitions=3)
    real_send = Publisher._send

    def dies(self: Publisher, pending: list, batch: int, ends: dict) -> None:
        if batch == 3:
            raise Crash
        real_send(self, pending, batch, ends)

    monkeypatch.setattr(Publisher, "_send", dies)
    with pytest.raises(Crash):
        consume(built, broker.bootstrap, tmp_path, topics=topics, request_partitions=3)
    monkeypatch.undo()
    with CheckpointStore(tmp_path / "state", copy.deepcopy(built)) as store:
        saved = store.load()
    assert saved is not None and len(saved.offsets) >= 2  # offsets of several partitions
    assert set(saved.last_records) == set(saved.offsets)

    summary = consume(built, broker.bootstrap, tmp_path, topics=topics, request_partitions=3)
    receipts = read_receipts(broker.bootstrap, topics)
    counts = Counter(r.request_id for r in receipts)
    assert set(counts) == {r.request_id for r in requests}
    assert all(n == 1 for n in counts.values())  # one receipt each, across the crash
    assert sorted(summary["offsets"]) == ["0", "1", "2"]
    assert sum(summary["offsets"].values()) == len(requests) == summary["records"]


def run_while_the_log_is_replaced(
    broker: LocalBroker, built: Federation, folder: Path, policy: str, fresh: list[Any]
) -> dict[str, Any]:
    """Consume 40 requests; after the third batch (offset 40) the broker loses its log and the
    topics are refilled with ``fresh`` past that offset, while the consumer runs."""
    replay_requests(built.requests[:40], bootstrap=broker.bootstrap, topics=Topics())
    replaced = threading.Event()

    def broker_loses_its_log(event: dict[str, Any], _: Federation) -> None:
        third = event["event"] == "deletion_batch" and event["consumer_batch"] == 3
        if third and not replaced.is_set():
            replaced.set()
            restart_empty(broker)
            replay_requests(fresh, bootstrap=broker.bootstrap, topics=Topics())

    settings = config(
        broker.bootstrap, folder, on_offset_gap=policy, idle_timeout=4.0, flush_timeout=2.0
    )
    summary = DeletionConsumer(
        copy.deepcopy(built), settings, on_event=[broker_loses_its_log]
    ).run()
    assert replaced.is_set()
    return summary


def test_a_running_consumer_replays_a_log_refilled_past_its_offset(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    """Issue 28: the log lost and refilled past the position while running was read on from
    the old offset (the new log's first records never answered); replay answers them all."""
    fresh = built.requests[20:76]  # 56 records: offsets 0..55 of the new log, 20 answered before
    summary = run_while_the_log_is_replaced(broker, built, tmp_path, "replay", fresh)
    gaps = [e for e in events(tmp_path) if e["event"] == "offset_gap"]
    assert [(g["kind"], g["action"], g["expected"]) for g in gaps] == [("rewritten", "replay", 40)]
    after = [e for e in events(tmp_path) if e.get("consumer_batch", 0) > 3]
    assert sum(e["requests"] for e in after) == len(fresh)  # every record of the new log
    assert sum(e["duplicates"] for e in after) == 20  # those answered before the loss
    assert summary["offset_gaps"] == 1 and summary["replayed_records"] == len(fresh)
    assert summary["offsets"] == {"0": len(fresh)} and summary["records"] == 40 + len(fresh)


def test_a_running_consumer_skips_a_refilled_log_and_records_it(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    fresh = built.requests[16:76]  # 60 records: offsets 0..59 of the new log
    summary = run_while_the_log_is_replaced(broker, built, tmp_path, "skip", fresh)
    assert read_receipts(broker.bootstrap, Topics()) == []  # skipped, as told, and counted
    gaps = [e for e in events(tmp_path) if e["event"] == "offset_gap"]
    assert [(g["action"], g["skipped"]) for g in gaps] == [("skip", 60)]
    assert summary["skipped_records"] == 60 and summary["offsets"] == {"0": 60}
