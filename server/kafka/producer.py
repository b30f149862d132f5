"""Replays a scenario's generated deletion stream onto the requests topic.

The stream is generated exactly as :func:`~simulator.runner.federation.build_federation` generates
it (same partition, labels and ``stream`` random generator), but without training anything:
only the data and the partition are needed. Records are keyed by request id and sent at a
fixed rate or as fast as possible; with a signing key each carries its HMAC
(:mod:`server.kafka.signing`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kafka import KafkaProducer

from server.kafka.publisher import producer_settings
from server.kafka.signing import HEADER, sign
from server.kafka.topics import Topics, ensure_topics
from simulator.runner.federation import deletion_stream, load_dataset, split_clients
from simulator.scenario import Scenario
from simulator.stream import DeletionRequest


def scenario_requests(scenario: Scenario) -> list[DeletionRequest]:
    """The scenario's deletion requests, as ``build_federation(scenario).requests``."""
    ds = load_dataset(scenario)
    shards, _ = split_clients(scenario, ds)
    return deletion_stream(scenario, ds, shards)


@dataclass(frozen=True)
class ReplayReport:
    """How many records were sent, over how long, and the rate (records/s; infinite in no time)."""

    sent: int
    seconds: float
    rate: float


def replay(
    values: Sequence[tuple[bytes | None, bytes]],
    *,
    bootstrap: str,
    topic: str,
    schedule: Sequence[float] | None = None,
    on_sent: Callable[[int], None] | None = None,
    signing_key: bytes | None = None,
) -> ReplayReport:
    """Send ``(key, value)`` records to ``topic``; record ``i`` not before ``schedule[i]``.

    ``schedule`` holds send times in seconds from the start (None: as fast as possible);
    ``signing_key`` signs every value. Returns once every record is acknowledged.
    """
    if schedule is not None and len(schedule) != len(values):
        raise ValueError(f"{len(schedule)} send times for {len(values)} records")
    producer = KafkaProducer(**{**producer_settings(bootstrap), "linger_ms": 20})
    try:
        start = time.perf_counter()
        for i, (key, value) in enumerate(values):
            if schedule is not None:
                delay = start + schedule[i] - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            headers = [] if signing_key is None else [(HEADER, sign(value, signing_key))]
            producer.send(topic, key=key, value=value, headers=headers)
            if on_sent is not None and (i + 1) % 1000 == 0:
                on_sent(i + 1)
        producer.flush()
        seconds = time.perf_counter() - start
    finally:
        producer.close()
    rate = len(values) / seconds if seconds > 0 else float("inf")
    return ReplayReport(len(values), seconds, rate)


def send_times(
    requests: Sequence[DeletionRequest], *, rate: float | None = None, realtime: bool = False
) -> list[float] | None:
    """Send time of each request, in seconds from the start.

    Send times: ``i / rate``; or, ``realtime``, each request's time since the first one's
    (``requested_at``, the scenario's ticks); neither: None (as fast as possible).
    """
    if rate is not None:
        if rate <= 0:
            raise ValueError(f"rate should be positive, got {rate}")
        return [i / rate for i in range(len(requests))]
    if realtime and requests:
        t0 = requests[0].requested_at
        return [max(0.0, (r.requested_at - t0).total_seconds()) for r in requests]
    return None


def replay_requests(  # noqa: PLR0913 (keyword-only send options, each defaulted)
    requests: Sequence[DeletionRequest],
    *,
    bootstrap: str,
    topics: Topics,
    schedule: Sequence[float] | None = None,
    request_partitions: int = 1,
    on_sent: Callable[[int], None] | None = None,
    signing_key: bytes | None = None,
) -> ReplayReport:
    """Create the topics if needed, then send every request as JSON keyed by its id."""
    ensure_topics(bootstrap, topics, request_partitions=request_partitions)
    values = [(r.request_id.encode("utf-8"), r.to_json()) for r in requests]
    return replay(
        values,
        bootstrap=bootstrap,
        topic=topics.requests,
        schedule=schedule,
        on_sent=on_sent,
        signing_key=signing_key,
    )
