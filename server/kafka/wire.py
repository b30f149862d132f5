"""Records on the wire: decoding requests, encoding receipts and dead letters.

A request record's value is one :class:`~simulator.stream.DeletionRequest` as JSON (the key, the
request id, only spreads requests over partitions). Anything else (no value, more than
``max_bytes``, not strict bounded JSON, the wrong schema or schema version) becomes a dead
letter: the original key and bytes with the reason and the source position in headers. Whatever
the bytes, :func:`decode_request` returns: a request or the reason it is not one (an exception
raised while classifying is itself a reason, kind ``other``). Receipts and dead letters are
built as :class:`OutRecord` values, plain data that a checkpoint can hold until they are
published.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.kafka.safejson import UnsafeJSONError, parse_bounded
from simulator.errors import InputError
from simulator.stream import DeletionReceipt, DeletionRequest

#: Largest request value accepted (bytes); larger ones go to the dead-letter topic.
MAX_REQUEST_BYTES = 1 << 20
#: Dead letters keep at most this many bytes of the original value (header ``truncated``).
MAX_DEAD_LETTER_BYTES = 900 * 1024
#: Dead-letter reasons are cut to this many characters.
MAX_REASON_CHARS = 2000

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Incoming:
    """One record read from the requests topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: Headers = ()


@dataclass(frozen=True)
class OutRecord:
    """A record to publish: a receipt or a dead letter."""

    topic: str
    key: bytes | None
    value: bytes
    headers: Headers = ()


@dataclass(frozen=True)
class Malformed:
    """Why a record is not a request: ``kind`` is malformed, schema, oversized or other.

    ``exception``: the class name of the exception raised while classifying (kind ``other``).
    """

    kind: str
    reason: str
    exception: str | None = None


def decode_request(
    value: bytes | None, *, max_bytes: int = MAX_REQUEST_BYTES
) -> DeletionRequest | Malformed:
    """The request in ``value``, or why it is not one (a dead letter); never raises.

    Kinds: ``malformed`` (empty; not UTF-8; not JSON; nested too deep; ``NaN``, ``Infinity`` or
    an over-long number; a repeated key: see :mod:`server.kafka.safejson`), ``schema`` (JSON,
    but not a valid request of a known schema version), ``oversized`` (more than ``max_bytes``;
    not parsed), ``other`` (an exception while classifying; its class is kept).
    """
    try:
        return _decode(value, max_bytes)
    except Exception as exc:  # a record must never stop the consumer
        return Malformed("other", f"{type(exc).__name__} while decoding: {exc}", type(exc).__name__)


def _decode(value: bytes | None, max_bytes: int) -> DeletionRequest | Malformed:
    if value is None or not value:
        return Malformed("malformed", "empty record: no value")
    if len(value) > max_bytes:
        return Malformed("oversized", f"oversized record: {len(value)} bytes > {max_bytes}")
    try:
        parse_bounded(value)  # bounded: what passes here cannot trip the validator's parser
    except UnsafeJSONError as exc:
        return Malformed("malformed", f"malformed JSON: {exc}")
    try:
        return DeletionRequest.from_json(value)
    except InputError as exc:
        return Malformed("schema", str(exc))


def source_headers(record: Incoming) -> Headers:
    """Kafka headers locating the request record.

    Where and when the request was read: ``request-offset`` (``partition:offset``) and
    ``request-timestamp-ms`` (the request record's timestamp, for request-to-receipt latency).
    """
    return (
        ("request-offset", f"{record.partition}:{record.offset}".encode()),
        ("request-timestamp-ms", str(record.timestamp_ms).encode()),
    )


def dead_letter(
    record: Incoming,
    why: Malformed,
    *,
    source_topic: str,
    topic: str,
    max_bytes: int = MAX_DEAD_LETTER_BYTES,
) -> OutRecord:
    """The dead letter of a malformed record: its key and bytes, the reason in a header."""
    original = record.value or b""
    headers = (
        ("reason", why.reason[:MAX_REASON_CHARS].encode("utf-8", errors="replace")),
        ("reason-kind", why.kind.encode()),
        ("original-size", str(len(original)).encode()),
        ("source-topic", source_topic.encode()),
        *source_headers(record),
    )
    if why.exception is not None:
        headers += (("exception", why.exception.encode("utf-8", errors="replace")),)
    if len(original) > max_bytes:
        headers += (("truncated", b"true"),)
    return OutRecord(topic, record.key, original[:max_bytes], headers)


def receipt_record(receipt: DeletionReceipt, record: Incoming, *, topic: str) -> OutRecord:
    """The receipt of the request read from ``record``, keyed by request id."""
    return OutRecord(
        topic, receipt.request_id.encode("utf-8"), receipt.to_json(), source_headers(record)
    )


def header(headers: Headers | list[tuple[str, bytes]], name: str) -> bytes | None:
    """The value of the first header called ``name``."""
    for key, value in headers:
        if key == name:
            return value
    return None
