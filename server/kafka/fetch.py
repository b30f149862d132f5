"""Reading the next micro-batch: a fetch error that retrying cannot heal stops the consumer.

While the broker is away, polls fail softly and the consumer backs off and retries
(:mod:`server.kafka.consumer`). Some errors never heal that way: records compressed with a codec
whose library is not installed (``UnsupportedCodecError``), a corrupt record batch, a record
larger than the fetch size, a topic the consumer may not read. kafka-python marks them
non-retriable, and worse, its consumer never returns from the next ``poll`` after a record batch
failed to decode (it loops over the exhausted batch at full CPU). So :func:`next_records` turns
such an error into :class:`FetchError`: the consumer stops with a one-line message naming the
cause and what to do (the command exits 2), its checkpoint untouched and nothing skipped. The
poll itself is an abandonable wait (:mod:`server.kafka.waits`): a stop leaves it at once.

Every codec Kafka defines is readable: gzip (standard library), snappy (``python-snappy``),
lz4 (``lz4``) and zstd (``zstandard``) are dependencies of unlearnsim.
"""

from __future__ import annotations

import re

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import (
    KafkaError,
    LogTruncationError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    UnsupportedCodecError,
)

from server.kafka.batcher import BatchConfig, next_batch
from server.kafka.waits import Waits
from server.kafka.wire import Incoming
from simulator.errors import UnlearnSimError

#: The package kafka-python needs for each codec (what ``pip install`` takes).
CODEC_PACKAGES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}
#: Errors about where the consumer reads: the consumer's own log check handles them.
POSITION_ERRORS = (OffsetOutOfRangeError, NoOffsetForPartitionError, LogTruncationError)
NOT_SKIPPED = "the checkpoint is intact and nothing was skipped"


class FetchError(UnlearnSimError, RuntimeError):
    """Reading the requests failed in a way retrying cannot heal (the message says what to do)."""


def next_records(
    consumer: KafkaConsumer,
    parts: list[TopicPartition],
    policy: BatchConfig,
    *,
    waits: Waits,
    topic: str,
) -> list[Incoming]:
    """The next micro-batch (:func:`server.kafka.batcher.next_batch`), read in an abandonable wait.

    Raises
    ------
    FetchError
        The fetch failed with an error that does not heal (:func:`unhealable`).
    KafkaError
        Any other fetch error (the caller backs off and retries).
    ConsumerInterrupted
        The consumer was stopped while it waited.
    """
    try:
        with waits.abandonable():
            return next_batch(consumer, parts, policy)
    except KafkaError as exc:
        fatal = unhealable(exc, topic)
        if fatal is not None:
            raise fatal from exc
        raise


def unhealable(exc: KafkaError, topic: str) -> FetchError | None:
    """The :class:`FetchError` that ``exc`` (raised by a poll of ``topic``) is, or None.

    None for a retriable error and for errors about the read position (handled by the
    consumer's log check); a :class:`FetchError` with a one-line message otherwise.
    """
    if isinstance(exc, POSITION_ERRORS) or exc.retriable:
        return None
    if isinstance(exc, UnsupportedCodecError):
        return FetchError(_codec_message(exc, topic))
    return FetchError(
        f"cannot read {topic}: {type(exc).__name__}: {exc}. Retrying does not heal this "
        f"(kafka-python marks it non-retriable); fix the cause and restart: {NOT_SKIPPED}"
    )


def _codec_message(exc: UnsupportedCodecError, topic: str) -> str:
    """What to install for the codec ``exc`` names (kafka-python's message names it)."""
    found = re.search(r"for (\w+) compression", str(exc))
    codec = found.group(1) if found else None
    if codec in CODEC_PACKAGES:
        fix = f"install the {codec} codec (pip install {CODEC_PACKAGES[codec]})"
    else:
        fix = "produce with gzip, snappy, lz4, zstd or no compression"
    return (
        f"cannot read {topic}: its records are compressed with a codec this installation cannot "
        f"decompress ({exc}); {fix} and restart: {NOT_SKIPPED}"
    )
