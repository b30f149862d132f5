"""Never skip silently: check that the requests log still holds what the checkpoint expects.

A checkpoint says, per requests partition, the next offset to read and a fingerprint of the
last record it consumed there (offset, timestamp and a digest of key and value). Before reading
on from it, the consumer probes every partition (:func:`probe`): the log's earliest offset, its
end (the highwater of a fetch: ``end_offsets()`` is unreliable on some brokers) and the record
just before the checkpointed offset. :func:`find_gap` turns that into a :class:`Gap`:

* ``truncated``: the log ends before the checkpointed offset (topic re-created, log lost);
* ``expired``: the log starts after it (retention or deletion removed unread records);
* ``rewritten``: the offsets are there but the record before them is another one (topic
  re-created and refilled past the old position, the silent skip of a broker restart on
  ``memory://`` storage);
* ``removed``: the partition no longer exists (the topic was re-created with fewer
  partitions).

The consumer stops with :class:`OffsetGapError` unless told what to do (``--on-offset-gap``):
``replay`` re-reads the log from its earliest offset (request ids answered before get
``duplicate`` receipts), ``skip`` goes on from where nothing can be re-read (the log's end;
for ``expired``, its start), counting what it skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from server.kafka.errors import BrokerUnavailableError, CheckpointError

Policy = Literal["fail", "replay", "skip"]
POLICIES: tuple[Policy, ...] = ("fail", "replay", "skip")
#: (offset, timestamp ms, digest of key and value) of the last record consumed in a partition.
Fingerprint = tuple[int, int, str]


class OffsetGapError(CheckpointError):
    """The requests log no longer holds what the checkpoint expects (the message says what)."""


def fingerprint(
    offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None
) -> Fingerprint:
    """The identity of one record: where, when, and a digest of its bytes."""
    h = hashlib.blake2b(digest_size=12)
    for part in (key, value):
        h.update(b"-" if part is None else b"+%d:" % len(part))
        h.update(part or b"")
    return (offset, timestamp_ms, h.hexdigest())


@dataclass(frozen=True)
class Probe:
    """What a partition holds now: ``[earliest, latest)`` and the record at ``expected - 1``."""

    partition: int
    earliest: int
    latest: int
    before: Fingerprint | None
    #: the topic has no such partition any more
    missing: bool = False


@dataclass(frozen=True)
class Gap:
    """A checkpointed position the log no longer supports."""

    partition: int
    kind: Literal["truncated", "expired", "rewritten", "removed"]
    expected: int
    earliest: int
    latest: int

    def describe(self, topic: str) -> str:
        """A sentence saying what happened to the checkpointed position in ``topic``."""
        if self.kind == "removed":
            return (
                f"{topic}[{self.partition}]: the checkpoint resumes at offset {self.expected}, "
                "but the partition no longer exists (the topic was re-created with fewer "
                "partitions)"
            )
        what = {
            "truncated": "the log now ends before it",
            "expired": "the log now starts after it (unread records were deleted)",
            "rewritten": "the record before it is not the one the checkpoint consumed",
        }[self.kind]
        return (
            f"{topic}[{self.partition}]: the checkpoint resumes at offset {self.expected}, but "
            f"{what}: the log holds offsets {self.earliest}..{self.latest - 1} (topic re-created, "
            "truncated or expired)"
        )

    def resume_at(self, policy: Policy) -> int:
        """Where reading goes on under ``policy`` (``replay`` or ``skip``)."""
        if policy == "replay" or self.kind == "expired":
            return self.earliest
        return self.latest

    def skipped(self, policy: Policy) -> int:
        """Records never to be read under ``policy`` (as far as the log can tell)."""
        if self.kind == "removed":  # whatever the lost partition held past it is unknown
            return 0
        if self.kind == "expired":
            return self.earliest - self.expected
        return 0 if policy == "replay" else self.latest - self.earliest


def find_gap(probe: Probe, expected: int, last: Fingerprint | None) -> Gap | None:
    """The gap between a checkpoint (``expected``, ``last``) and what the log holds, if any."""
    args = (probe.partition, expected, probe.earliest, probe.latest)
    if probe.missing:
        return Gap(probe.partition, "removed", *args[1:])
    if probe.latest < expected:
        return Gap(probe.partition, "truncated", *args[1:])
    if probe.earliest > expected:
        return Gap(probe.partition, "expired", *args[1:])
    if last is not None and probe.before is not None and probe.before != last:
        return Gap(probe.partition, "rewritten", *args[1:])
    return None


def probe(
    bootstrap: str,
    topic: str,
    expected: Mapping[int, int],
    *,
    options: Mapping[str, Any] | None = None,
    timeout: float = 15.0,
) -> dict[int, Probe]:
    """Probe the partitions of ``expected`` (partition -> next offset the checkpoint reads) once.

    Raises
    ------
    BrokerUnavailableError
        The broker did not answer every partition within ``timeout`` seconds.
    """
    if not expected:
        return {}
    with LogProbe(bootstrap, topic, options=options, timeout=timeout) as log:
        return log.probe(expected)


class LogProbe:
    """One consumer kept open to probe the requests log again and again (every fetch).

    Parameters
    ----------
    bootstrap, topic : the broker and the requests topic.
    options : the Kafka client's security options.
    timeout : seconds a probe may wait for the broker (connecting included).
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        options: Mapping[str, Any] | None = None,
        timeout: float = 15.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.options = dict(options or {})
        self.timeout = timeout
        self._consumer: KafkaConsumer | None = None

    def _open(self, timeout: float | None = None) -> KafkaConsumer:
        if self._consumer is None:
            try:
                self._consumer = KafkaConsumer(
                    bootstrap_servers=self.bootstrap,
                    enable_auto_commit=False,
                    auto_offset_reset="earliest",
                    allow_auto_create_topics=False,  # never re-create a lost topic by probing
                    fetch_max_wait_ms=50,
                    request_timeout_ms=5000,
                    reconnect_backoff_max_ms=1000,  # a broker back is seen within a second
                    bootstrap_timeout_ms=int((timeout or self.timeout) * 1000),
                    **self.options,
                )
            except KafkaError as exc:
                raise BrokerUnavailableError(f"cannot reach {self.bootstrap}: {exc}") from exc
        return self._consumer

    def probe(self, expected: Mapping[int, int], timeout: float | None = None) -> dict[int, Probe]:
        """What each partition of ``expected`` holds now (:class:`Probe`).

        Raises
        ------
        BrokerUnavailableError
            The broker did not answer every partition within ``timeout`` (default: the
            probe's) seconds; the consumer is closed and opened again by the next probe.
        """
        if not expected:
            return {}
        try:
            return self._probe(expected, self.timeout if timeout is None else timeout)
        except (KafkaError, BrokerUnavailableError) as exc:
            self.close()  # a consumer that saw the broker go away starts afresh next time
            if isinstance(exc, BrokerUnavailableError):
                raise
            raise BrokerUnavailableError(
                f"probing {self.topic} at {self.bootstrap} failed: {exc}"
            ) from exc

    def reachable(self, partitions: Iterable[int], timeout: float) -> None:
        """Ask the broker where ``partitions`` start (raises :class:`BrokerUnavailableError`)."""
        try:  # the same client throughout: it reconnects by itself when the broker is back
            consumer = self._open(timeout)
            parts = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            consumer.beginning_offsets(parts, timeout_ms=timeout * 1000)
        except KafkaError as exc:
            raise BrokerUnavailableError(
                f"{self.bootstrap} does not answer for {self.topic}: {exc}"
            ) from exc

    def _probe(self, expected: Mapping[int, int], timeout: float) -> dict[int, Probe]:
        consumer = self._open(timeout)
        for fresh in (False, True):
            gone = self._missing(consumer, expected, fresh=fresh)
            found = {p: Probe(p, 0, 0, None, missing=True) for p in gone}
            rest = {p: o for p, o in expected.items() if p not in gone}
            try:
                return found | (self._read(consumer, rest, timeout) if rest else {})
            except KeyError:  # kafka-python's lookup of a partition the topic no longer has
                if fresh:
                    raise BrokerUnavailableError(
                        f"{self.topic} at {self.bootstrap}: its partitions changed while "
                        "they were probed"
                    ) from None
        raise AssertionError("unreachable")

    def _missing(
        self, consumer: KafkaConsumer, expected: Mapping[int, int], *, fresh: bool
    ) -> set[int]:
        """The partitions of ``expected`` that the topic does not have.

        From the cached metadata, asked again (``fresh``, or where the cache lacks one of
        them): a topic re-created with fewer partitions.
        """
        known = consumer.partitions_for_topic(self.topic)
        if not fresh and known is not None and set(expected) <= known:
            return set()
        consumer.topics()  # a metadata request: the cache may predate the topic's re-creation
        known = consumer.partitions_for_topic(self.topic) or set()
        return set(expected) - known

    def _read(
        self, consumer: KafkaConsumer, expected: Mapping[int, int], timeout: float
    ) -> dict[int, Probe]:
        """Earliest, latest and the record before ``expected`` of partitions that exist."""
        parts = {p: TopicPartition(self.topic, p) for p in sorted(expected)}
        consumer.unsubscribe()  # fresh partition states: no highwater of an earlier probe
        consumer.assign(list(parts.values()))
        earliest = consumer.beginning_offsets(list(parts.values()), timeout_ms=timeout * 1000)
        start = {p: max(expected[p] - 1, earliest[tp]) for p, tp in parts.items()}
        for p, tp in parts.items():
            consumer.seek(tp, start[p])
        before: dict[int, Fingerprint | None] = {}
        latest: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        while len(latest) < len(parts):
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"could not read {self.topic} partitions {sorted(set(parts) - set(latest))} "
                    f"at {self.bootstrap} within {timeout:g} s"
                )
            polled = consumer.poll(timeout_ms=100, max_records=len(parts))
            for tp, messages in polled.items():
                if tp.partition in latest:
                    continue
                m = messages[0]
                if m.offset == expected[tp.partition] - 1:
                    before[tp.partition] = fingerprint(m.offset, m.timestamp, m.key, m.value)
                latest[tp.partition] = consumer.highwater(tp) or m.offset + 1
                consumer.pause(tp)
            for p, tp in parts.items():  # nothing at or after the start: the highwater says so
                high = consumer.highwater(tp)
                if p not in latest and high is not None and high <= start[p]:
                    latest[p] = high
                    consumer.pause(tp)
        return {p: Probe(p, earliest[tp], latest[p], before.get(p)) for p, tp in parts.items()}

    def close(self) -> None:
        """Close the consumer (the next probe opens another)."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            with contextlib.suppress(Exception):  # the consumer of a vanished broker
                consumer.close()

    def __enter__(self) -> LogProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
