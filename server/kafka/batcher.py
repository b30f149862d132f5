"""Micro-batches off the requests topic: at most ``max_requests``, closed by a wait only when idle.

A batch closes when it holds ``max_requests`` records, or when ``max_wait`` seconds have passed
since its first record *and* the consumer has read everything the broker had (its position
reached the highwater of the last fetch on every partition). So a backlog (a replay, the catch
up after a restart or an outage) is always cut into full batches, the same cut in every run,
and a live stream waits at most ``max_wait`` before its batch is applied. ``max_hold`` bounds
the wait should the highwater never be reached.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from kafka import KafkaConsumer, TopicPartition

from server.kafka.settings import consumer_default
from server.kafka.wire import Incoming


@dataclass(frozen=True)
class BatchConfig:
    """How requests are grouped into one certified removal."""

    max_requests: int = 500
    max_wait: float = consumer_default("max_wait")
    max_hold: float = 30.0
    poll_timeout: float = 0.1

    def __post_init__(self) -> None:
        if self.max_requests < 1:
            raise ValueError(f"max_requests should be >= 1, got {self.max_requests}")
        if self.max_wait < 0 or self.max_hold < self.max_wait:
            raise ValueError("need 0 <= max_wait <= max_hold")


def next_batch(
    consumer: KafkaConsumer, parts: list[TopicPartition], policy: BatchConfig
) -> list[Incoming]:
    """The next micro-batch, or ``[]`` after one empty poll (so the caller can check for stop)."""
    batch: list[Incoming] = []
    first = 0.0
    while True:
        room = policy.max_requests - len(batch)
        polled = consumer.poll(timeout_ms=int(policy.poll_timeout * 1000), max_records=room)
        for tp in sorted(polled, key=lambda t: (t.topic, t.partition)):
            for m in polled[tp]:
                headers = tuple((str(k), bytes(v or b"")) for k, v in m.headers or ())
                batch.append(Incoming(m.partition, m.offset, m.key, m.value, m.timestamp, headers))
        if not batch:
            return batch
        now = time.monotonic()
        if not first:
            first = now
        if len(batch) >= policy.max_requests:
            return batch
        waited = now - first
        if waited >= policy.max_hold or (waited >= policy.max_wait and caught_up(consumer, parts)):
            return batch


def caught_up(consumer: KafkaConsumer, parts: Iterable[TopicPartition]) -> bool:
    """Whether every partition's position has reached the highwater of its last fetch."""
    for tp in parts:
        high = consumer.highwater(tp)
        if high is None or consumer.position(tp) < high:
            return False
    return True


def lag(consumer: KafkaConsumer, parts: list[TopicPartition]) -> int:
    """Records on the broker not yet read (from the last fetch's highwater)."""
    total = 0
    for tp in parts:
        high = consumer.highwater(tp)
        if high is not None:
            total += max(0, high - consumer.position(tp))
    return total
