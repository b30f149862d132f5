"""Requests compressed with every codec Kafka defines are read, applied and answered (issue 28).

Producers other than ours (librdkafka's ``compression.type``, the Java client's
``compression.type``) often compress: gzip, snappy, lz4 or zstd. kafka-python reads the last
three only with their packages installed (``python-snappy``, ``lz4``, ``zstandard``: dependencies
of unlearnsim). Without them the consumer backed off on ``UnsupportedCodecError`` and then spun
in kafka-python's ``poll`` at full CPU, answering nothing. Here each codec's records go through
the real broker, the consumer decompresses each (kafka-python's decoders are counted) and
answers every request.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kafka.codec
import pytest
from kafka import KafkaProducer
from kafka.record import default_records
from support.kafka import broker, config, read_topic
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker
from server.kafka.consumer import DeletionConsumer
from server.kafka.topics import Topics, ensure_topics
from simulator.runner.federation import Federation, build_federation
from simulator.stream import DeletionRequest

__all__ = ["broker"]

CODECS = ("gzip", "snappy", "lz4", "zstd")
PER_CODEC = 8


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


def produce(bootstrap: str, topic: str, requests: list[DeletionRequest], codec: str) -> None:
    """Send ``requests`` in one compressed record batch (kafka-python's producer)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=500)
    try:
        for r in requests:
            producer.send(topic, key=r.request_id.encode(), value=r.to_json())
        producer.flush(timeout=30)
    finally:
        producer.close()


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the record batches kafka-python decompresses, per codec (the real decoders run)."""
    calls = dict.fromkeys(CODECS, 0)
    for codec in CODECS:
        name = f"{codec}_decode"
        real = getattr(default_records, name)

        def counted(data: bytes, _real: Any = real, _codec: str = codec) -> bytes:
            calls[_codec] += 1
            return bytes(_real(data))

        monkeypatch.setattr(default_records, name, counted)
    return calls


def test_every_kafka_codec_is_read_and_answered(
    broker: LocalBroker, built: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for codec in CODECS:
        assert getattr(kafka.codec, f"has_{codec}")(), f"{codec}: its package is not installed"
    fed = copy.deepcopy(built)
    topics = Topics("codec-req", "codec-rec", "codec-dlq")
    ensure_topics(broker.bootstrap, topics)
    sent: list[DeletionRequest] = []
    for i, codec in enumerate(CODECS):
        part = fed.requests[i * PER_CODEC : (i + 1) * PER_CODEC]
        produce(broker.bootstrap, topics.requests, part, codec)
        sent.extend(part)
    decoded = count_decodes(monkeypatch)

    summary = DeletionConsumer(fed, config(broker.bootstrap, tmp_path, topics=topics)).run()

    assert all(decoded[c] >= 1 for c in CODECS), decoded  # each codec's batch was decompressed

    receipts = [json.loads(m.value) for m in read_topic(broker.bootstrap, topics.receipts)]
    assert sorted(r["request_id"] for r in receipts) == sorted(r.request_id for r in sent)
    assert {r["status"] for r in receipts} == {"applied"}
    assert summary["records"] == len(sent) and summary["dead_letters"] == 0
    assert read_topic(broker.bootstrap, topics.dead_letters) == []


def test_record_checksums_use_the_c_extension() -> None:
    """Every record batch's CRC-32C (written by the publisher, checked by the consumer's fetch)
    is computed by the ``crc32c`` C extension, a dependency: kafka-python falls back to pure
    Python (4 MB/s) without it, which doubled the publication of a 1,000-receipt batch and
    raised the stream's p99 by a second (``docs/benchmarks.md``). It agrees with the pure
    Python reference on data of every residue of length."""
    from kafka.record import util
    from kafka.record._crc32c import crc as crc32c_python

    assert util.crc32c_c is not None, "install crc32c (a dependency of unlearnsim)"
    assert util.calc_crc32c.__defaults__ == (util.crc32c_c,)  # what the records call
    payload = bytes(range(256)) * 5
    for end in (0, 1, 7, 64, 1000, len(payload)):
        assert util.calc_crc32c(payload[:end]) == crc32c_python(payload[:end])
    assert util.calc_crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720)
