"""A requests topic re-created with another partition count than the checkpoint knows.

Through the bundled broker: the checkpoint holds offsets of three partitions, then the topic is
deleted and created again with one (or the other way round). Under ``--on-offset-gap fail``
the consumer stops with one clear message (no ``KeyError`` from the Kafka client, as a
checkpointed partition that no longer exists used to give, for ever, under every policy);
under ``replay`` and ``skip`` it goes on with the partitions the topic has now, and every
request on them gets its answer (``skip``: those it does not skip, counted).
"""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from support.kafka import broker, config, read_receipts
from support.scenarios import QUICKSTART, ROOT, TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker
from server.kafka.consumer import DeletionConsumer
from server.kafka.offsets import OffsetGapError
from server.kafka.producer import replay_requests
from server.kafka.topics import Topics
from simulator.runner.federation import Federation, build_federation

__all__ = ["broker"]

TOPICS = Topics("parts-requests", "parts-receipts", "parts-dead-letters")


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


def consume(built: Federation, bootstrap: str, folder: Path, **extra: Any) -> dict[str, Any]:
    return DeletionConsumer(copy.deepcopy(built), config(bootstrap, folder, **extra)).run()


def recreate(bootstrap: str, partitions: int) -> None:
    """Delete the requests topic and create it again with ``partitions`` partitions."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([TOPICS.requests])
        for _ in range(50):  # the deletion may take a moment to be seen
            if TOPICS.requests not in admin.list_topics():
                break
            time.sleep(0.1)
        admin.create_topics([NewTopic(TOPICS.requests, partitions, 1)])
        described = admin.describe_topics([TOPICS.requests])
        assert len(described[0]["partitions"]) == partitions
    finally:
        admin.close()


def checkpoint_on(built: Federation, bootstrap: str, folder: Path, partitions: int) -> None:
    replay_requests(
        built.requests[:30], bootstrap=bootstrap, topics=TOPICS, request_partitions=partitions
    )
    summary = consume(built, bootstrap, folder, topics=TOPICS, request_partitions=partitions)
    assert len(summary["offsets"]) == partitions


def answered_after(bootstrap: str, count: int) -> Counter[str]:
    """Receipts after the first ``count`` (the first session's, and its outbox sent again)."""
    return Counter(r.request_id for r in read_receipts(bootstrap, TOPICS)[count:])


def test_fewer_partitions_stop_the_consumer_with_one_clear_line(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    checkpoint_on(built, broker.bootstrap, tmp_path, 3)
    recreate(broker.bootstrap, 1)
    replay_requests(built.requests[30:40], bootstrap=broker.bootstrap, topics=TOPICS)
    command = [
        sys.executable, "-m", "server.cli", "run", str(QUICKSTART),
        *[arg for o in TEN_CLIENTS for arg in ("--set", o)],
        "--stream", "kafka", "--bootstrap", broker.bootstrap, "--no-plots",
        "--requests-topic", TOPICS.requests, "--receipts-topic", TOPICS.receipts,
        "--dead-letter-topic", TOPICS.dead_letters,
        "--output", str(tmp_path / "run"), "--state-dir", str(tmp_path / "state"),
        "--idle-timeout", "1",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "KeyError" not in done.stderr
    assert "no longer exists" in done.stderr and "--on-offset-gap" in done.stderr


@pytest.mark.parametrize("policy", ["replay", "skip"])
def test_fewer_partitions_go_on_with_the_partitions_the_topic_has(
    policy: str, broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    checkpoint_on(built, broker.bootstrap, tmp_path, 3)
    before = len(read_receipts(broker.bootstrap, TOPICS))
    recreate(broker.bootstrap, 1)
    fresh = built.requests[30:40]
    replay_requests(fresh, bootstrap=broker.bootstrap, topics=TOPICS)
    with pytest.raises(OffsetGapError, match="no longer exists"):
        consume(built, broker.bootstrap, tmp_path, topics=TOPICS)
    summary = consume(built, broker.bootstrap, tmp_path, topics=TOPICS, on_offset_gap=policy)
    kinds = Counter(g["kind"] for g in summary["gaps"] if g["action"] == policy)
    assert kinds["removed"] == 2  # partitions 1 and 2; partition 0 has a gap of its own
    assert sorted(summary["offsets"]) == ["0"]
    answered = answered_after(broker.bootstrap, before)
    if policy == "replay":  # the new log read from its start: every new request, once
        assert {r.request_id: answered[r.request_id] for r in fresh} == dict.fromkeys(
            (r.request_id for r in fresh), 1
        )
    else:  # skipped, and counted
        assert not any(r.request_id in answered for r in fresh)
        assert summary["skipped_records"] == len(fresh)
    later = built.requests[40:45]  # after the gap, the stream goes on
    replay_requests(later, bootstrap=broker.bootstrap, topics=TOPICS)
    consume(built, broker.bootstrap, tmp_path, topics=TOPICS)
    answered = answered_after(broker.bootstrap, before)
    assert all(answered[r.request_id] == 1 for r in later)


def test_more_partitions_are_read_from_their_start(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    checkpoint_on(built, broker.bootstrap, tmp_path, 1)
    before = len(read_receipts(broker.bootstrap, TOPICS))
    recreate(broker.bootstrap, 3)
    fresh = built.requests[30:45]
    replay_requests(fresh, bootstrap=broker.bootstrap, topics=TOPICS, request_partitions=3)
    summary = consume(
        built, broker.bootstrap, tmp_path, topics=TOPICS, on_offset_gap="replay",
        request_partitions=3,
    )  # fmt: skip
    assert sorted(summary["offsets"]) == ["0", "1", "2"]
    answered = answered_after(broker.bootstrap, before)
    assert {r.request_id: answered[r.request_id] for r in fresh} == dict.fromkeys(
        (r.request_id for r in fresh), 1
    )
