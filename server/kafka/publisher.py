"""Delivers a batch's receipts and dead letters exactly once, across crashes and outages.

Every record of batch ``b`` carries the header ``unlearnsim-outbox: b:i`` (``i``, its index in
the batch's outbox). The outbox is checkpointed before it is
published, so after a crash (or a failed send, whose records may or may not have been written)
the publisher first reads the output topics from the offsets reached before that batch and
sends only the records it does not find there. The consumer is the only writer of its output
topics, and a lock on its state folder keeps it alone, so a record found there was written by
an earlier attempt at the same batch. Sends use an idempotent producer (``acks=all``), which
removes the duplicates of the producer's own retries. A stopped consumer does not retry
(:mod:`server.kafka.waits`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError

from server.kafka.backoff import Backoff
from server.kafka.batcher import caught_up
from server.kafka.security import client_options
from server.kafka.waits import ConsumerInterrupted
from server.kafka.wire import OutRecord, header

log = logging.getLogger(__name__)

OUTBOX_HEADER = "unlearnsim-outbox"
#: (topic, partition)
Position = tuple[str, int]


class Publisher:
    """Sends outboxes; ``publish`` returns only when every record is on the broker.

    Parameters
    ----------
    bootstrap : ``host:port`` of the broker.
    flush_timeout : seconds a send may take before it counts as failed (then: back off,
        check what arrived, send the rest).
    scan_timeout : seconds a check of the output topics may take before it is retried.
    backoff : delays between attempts while the broker is away.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        flush_timeout: float = 10.0,
        scan_timeout: float = 30.0,
        backoff: Backoff | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.flush_timeout = flush_timeout
        self.scan_timeout = scan_timeout
        self.backoff = backoff or Backoff()
        self.retries = 0
        self._producer: KafkaProducer | None = None

    def publish(
        self,
        records: Sequence[OutRecord],
        batch: int,
        *,
        start: dict[Position, int],
        verify: bool,
    ) -> dict[Position, int]:
        """Deliver the outbox of ``batch``; returns the updated ``start`` for the next one.

        ``start`` holds, per output partition, an offset at or before the first record this
        batch may have written there. With ``verify`` (recovery), records already present are
        not sent again. Retries with back-off until the broker takes them.

        Raises
        ------
        ConsumerInterrupted
            An attempt failed after the consumer was stopped (no retry then).
        """
        ends = dict(start)
        pending = list(enumerate(records))
        while True:
            try:
                if verify:
                    present, scanned = self._scan(batch, {r.topic for r in records}, start)
                    ends.update(scanned)  # read to the end: where the next batch starts
                    pending = [(i, r) for i, r in pending if i not in present]
                if pending:
                    self._send(pending, batch, ends)
                self.backoff.reset()
                return ends
            except (KafkaError, OSError) as exc:
                self._close_producer()
                if self.backoff.stopped:  # the outbox is in the checkpoint: the next start sends it
                    log.warning("publishing batch %d failed (%s); stopped", batch, exc)
                    raise ConsumerInterrupted(f"stopped while publishing batch {batch}") from exc
                self.retries += 1
                log.warning("publishing batch %d failed (%s); retrying", batch, exc)
                self.backoff.sleep()
                verify = True

    def _send(
        self, pending: list[tuple[int, OutRecord]], batch: int, ends: dict[Position, int]
    ) -> None:
        producer = self._get_producer()
        futures = [
            producer.send(
                r.topic,
                key=r.key,
                value=r.value,
                headers=[*r.headers, (OUTBOX_HEADER, f"{batch}:{i}".encode())],
            )
            for i, r in pending
        ]
        producer.flush(timeout=self.flush_timeout)
        written: dict[Position, int] = {}
        for future in futures:
            meta = future.get(timeout=0)
            pos = (meta.topic, meta.partition)
            written[pos] = max(written.get(pos, 0), meta.offset + 1)
        ends.update(written)  # where this send ended, even on a re-created (shorter) topic

    def _scan(
        self, batch: int, topics: set[str], start: dict[Position, int]
    ) -> tuple[set[int], dict[Position, int]]:
        """Indexes of this batch's records already in ``topics``, and the end offsets read."""
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # a start past a re-created topic's end: all of it
            allow_auto_create_topics=False,
            request_timeout_ms=5000,
            bootstrap_timeout_ms=5000,
            **client_options(),
        )
        try:
            parts = _assign(consumer, topics, start)
            return self._read_tags(consumer, parts, f"{batch}:".encode(), topics)
        finally:
            consumer.close()

    def _read_tags(
        self, consumer: KafkaConsumer, parts: list[TopicPartition], prefix: bytes, topics: set[str]
    ) -> tuple[set[int], dict[Position, int]]:
        """Read ``parts`` to their ends; the indexes tagged ``prefix``, and the end offsets."""
        present: set[int] = set()
        rewound: set[TopicPartition] = set()
        deadline = time.monotonic() + self.scan_timeout
        while True:
            for messages in consumer.poll(timeout_ms=200).values():
                for m in messages:
                    tag = header(m.headers, OUTBOX_HEADER) or b""
                    if tag.startswith(prefix):
                        present.add(int(tag[len(prefix) :]))
            _rewind_recreated(consumer, parts, rewound)
            if caught_up(consumer, parts):
                return present, {(tp.topic, tp.partition): consumer.position(tp) for tp in parts}
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"reading {sorted(topics)} took over {self.scan_timeout} s")

    def _get_producer(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = KafkaProducer(**producer_settings(self.bootstrap))
        return self._producer

    def _close_producer(self) -> None:
        """Throw a failed producer away so that none of its records can still be sent.

        kafka-python's ``close(timeout=0)`` flushes first and raises while records are pending,
        leaving its sender thread to deliver them later, after the check that precedes a
        resend: a duplicate. So the sender is force-closed (pending batches aborted) and joined.
        """
        producer, self._producer = self._producer, None
        if producer is None:
            return
        sender = getattr(producer, "_sender", None)
        if sender is not None:
            sender.force_close()
            sender.join(self.flush_timeout)
        try:
            producer.close(timeout=0)
        except Exception:  # a broken producer is being thrown away
            log.debug("closing a failed producer raised", exc_info=True)

    def close(self) -> None:
        """Close the producer, waiting at most ``flush_timeout`` for pending records.

        Once stopped, nothing is waited for: a publication a stop interrupted is thrown away
        (its outbox is in the checkpoint; the next start sends what did not arrive).
        """
        if self.backoff.stopped:
            self._close_producer()
        elif self._producer is not None:
            self._producer.close(timeout=self.flush_timeout)
            self._producer = None


def producer_settings(bootstrap: str) -> dict[str, Any]:
    """Producer settings for the ``kafka-python`` client.

    Idempotent, acknowledged by all replicas, small linger, bounded blocking; TLS/SASL
    from the environment (:mod:`server.kafka.security`).
    """
    return {
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": 5,
        "batch_size": 256 * 1024,
        "max_request_size": 2 * 1024 * 1024,
        "max_block_ms": 5000,
        "request_timeout_ms": 5000,
        "bootstrap_timeout_ms": 5000,
        **client_options(),
    }


def _assign(
    consumer: KafkaConsumer, topics: set[str], start: dict[Position, int]
) -> list[TopicPartition]:
    """Assign every partition of ``topics`` to ``consumer``, each at its ``start`` offset."""
    parts: list[TopicPartition] = []
    for topic in sorted(topics):
        ids = consumer.partitions_for_topic(topic)
        if not ids:
            raise KafkaTimeoutError(f"no metadata for topic {topic}")
        parts.extend(TopicPartition(topic, p) for p in sorted(ids))
    consumer.assign(parts)
    for tp in parts:
        consumer.seek(tp, start.get((tp.topic, tp.partition), 0))
    return parts


def _rewind_recreated(
    consumer: KafkaConsumer, parts: list[TopicPartition], rewound: set[TopicPartition]
) -> None:
    """Read from the beginning (once) a partition that ends before its start: re-created."""
    for tp in parts:
        high = consumer.highwater(tp)
        if high is not None and high < consumer.position(tp) and tp not in rewound:
            rewound.add(tp)
            consumer.seek_to_beginning(tp)
