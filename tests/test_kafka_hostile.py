"""Every record gets an answer, whatever its bytes: a hostile corpus through the real broker.

The corpus holds the poison pill of issue 19 (a 6 KB record of 3,000 nested ``[``, which crashed
the consumer at the same offset on every restart), deep nesting, huge numbers, 1 MiB strings,
invalid UTF-8, NaN and Infinity, duplicate keys, wrong types, both or neither of
``sample_ids``/``client_id``, and seeded random mutations of a valid request, interleaved with
valid requests. The consumer must answer each record exactly once (a receipt or a dead letter,
matched by the ``request-offset`` header), keep going, and apply the valid requests.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.kafka import broker, config, headers, read_topic
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker
from server.kafka.consumer import DeletionConsumer
from server.kafka.producer import replay
from server.kafka.topics import Topics, ensure_topics
from server.kafka.wire import Malformed, decode_request
from simulator.runner.federation import Federation, build_federation
from simulator.stream import DeletionRequest

__all__ = ["broker"]

POISON_PILL = b'{"request_id":' + b"[" * 3000 + b"]" * 3000 + b"}"


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


def _valid(fed: Federation) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(fed.requests[0].to_json())
    return loaded


def hostile_corpus(fed: Federation) -> list[tuple[str, bytes]]:
    """(name, value) of records a consumer must survive; each gets one answer."""
    good = _valid(fed)

    def variant(**change: Any) -> bytes:
        return json.dumps({**good, **change}).encode()

    text = json.dumps(good)
    mib = 1 << 20
    cases = [
        ("poison pill: 3,000 nested arrays", POISON_PILL),
        ("nesting 100,000 deep", b"[" * 100_000),
        ("nested objects in a field", variant(subject={"a": {"b": {"c": [[[[[[[[1]]]]]]]]}}})),
        (
            "huge integer id",
            text.replace('"sample_ids": [', '"sample_ids": [' + "9" * 5000 + ", ").encode(),
        ),
        ("integer id over 2**62", variant(sample_ids=[2**70])),
        ("huge exponent", variant(tick=0).replace(b'"tick": 0', b'"tick": 1e999')),
        ("NaN id", text.replace('"sample_ids": [', '"sample_ids": [NaN, ').encode()),
        ("Infinity tick", variant().replace(b'"tick": ', b'"tick": Infinity, "x": ')),
        ("-Infinity", b'{"request_id": -Infinity}'),
        ("1 MiB string request id (over the size limit)", variant(request_id="x" * mib)),
        ("string just under the size limit", variant(request_id="y" * (mib - 400))),
        ("1 MiB of spaces", b" " * (mib - 1)),
        ("invalid UTF-8", b'{"request_id": "\xff\xfe", "subject": "s"}'),
        (
            "invalid UTF-8 inside a valid request",
            variant(subject="S").replace(b'"S"', b'"\xc3\x28"'),
        ),
        ("lone surrogate escape", variant(subject="\ud800")),
        ("duplicate keys", text.replace("{", '{"request_id": "dup-a", ', 1).encode()),
        ("duplicate sample_ids key", text.replace("}", ', "sample_ids": [1]}').encode()),
        ("sample ids as strings", variant(sample_ids=["1", "2"])),
        ("sample ids as floats", variant(sample_ids=[1.0])),
        ("boolean client id", variant(sample_ids=None, client_id=True)),
        ("negative client id", variant(sample_ids=None, client_id=-1)),
        ("request id as number", variant(request_id=42)),
        ("both sample_ids and client_id", variant(client_id=1)),
        ("neither sample_ids nor client_id", variant(sample_ids=None)),
        ("empty sample_ids", variant(sample_ids=[])),
        ("100,001 sample ids", variant(sample_ids=list(range(100_001)))),
        ("unknown field", variant(priority="high")),
        ("schema version 2", variant(schema_version=2)),
        ("no time zone", variant(requested_at="2026-01-01T00:00:00")),
        ("JSON null", b"null"),
        ("JSON array", b"[1, 2, 3]"),
        ("JSON string", b'"request"'),
        ("truncated JSON", text[: len(text) // 2].encode()),
        ("trailing garbage", text.encode() + b"}}"),
        ("NUL bytes", b"\x00" * 64),
        ("empty value", b""),
        ("BOM then JSON", b"\xef\xbb\xbf" + text.encode()),
        ("unknown sample id", variant(request_id="hostile-unknown", sample_ids=[10**12])),
        ("unknown client", variant(request_id="hostile-client", sample_ids=None, client_id=10**6)),
    ]
    rng = np.random.default_rng(19)
    raw = text.encode()
    for i in range(40):  # seeded mutations: flipped bytes, cut and spliced values
        data = bytearray(raw)
        for pos in rng.integers(0, len(data), size=int(rng.integers(1, 6))):
            data[pos] = int(rng.integers(0, 256))
        cases.append((f"mutation {i}", bytes(data)))
    for i in range(10):
        cases.append((f"random bytes {i}", rng.bytes(int(rng.integers(1, 300)))))
    return cases


def test_every_hostile_record_gets_one_answer_and_the_stream_goes_on(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    fed = copy.deepcopy(built)
    topics = Topics("hostile-req", "hostile-rec", "hostile-dlq")
    ensure_topics(broker.bootstrap, topics)
    corpus = hostile_corpus(fed)
    valid = fed.requests[:30]
    records: list[tuple[bytes | None, bytes]] = []
    for i, (name, value) in enumerate(corpus):
        records.append((name.encode(), value))
        if i < len(valid):
            records.append((valid[i].request_id.encode(), valid[i].to_json()))
    replay(records, bootstrap=broker.bootstrap, topic=topics.requests)

    settings_ = config(broker.bootstrap, tmp_path, topics=topics)
    summary = DeletionConsumer(fed, settings_).run()

    receipts = read_topic(broker.bootstrap, topics.receipts)
    dead = read_topic(broker.bootstrap, topics.dead_letters)
    answers = [headers(m)["request-offset"] for m in receipts + dead]
    assert sorted(answers) == sorted(f"0:{i}".encode() for i in range(len(records)))
    assert len(set(answers)) == len(records)  # one answer each
    assert summary["records"] == len(records)
    statuses: dict[str, str] = {}
    for m in receipts:  # the first answer to each id (a mutation may repeat a valid id)
        body = json.loads(m.value)
        statuses.setdefault(body["request_id"], body["status"])
    for req in valid:
        assert statuses[req.request_id] in ("applied", "rejected")
    assert statuses["hostile-unknown"] == statuses["hostile-client"] == "rejected"
    kinds = {m.key.decode(): headers(m)["reason-kind"].decode() for m in dead}
    assert kinds["poison pill: 3,000 nested arrays"] == "malformed"
    assert kinds["nesting 100,000 deep"] == "malformed"
    for name in ("NaN id", "Infinity tick", "-Infinity", "huge integer id", "huge exponent"):
        assert kinds[name] == "malformed", name
    for name in ("invalid UTF-8", "lone surrogate escape", "duplicate keys", "BOM then JSON"):
        assert kinds[name] == "malformed", name
    assert kinds["1 MiB string request id (over the size limit)"] == "oversized"
    for name in (
        "both sample_ids and client_id",
        "neither sample_ids nor client_id",
        "boolean client id",
        "sample ids as strings",
        "integer id over 2**62",
        "string just under the size limit",
        "100,001 sample ids",
    ):
        assert kinds[name] == "schema", name
    assert set(kinds.values()) <= {"malformed", "schema", "oversized"}


def test_the_poison_pill_alone_is_a_malformed_dead_letter() -> None:
    got = decode_request(POISON_PILL)
    assert isinstance(got, Malformed) and got.kind == "malformed"
    assert "nested 3001 levels" in got.reason


def test_an_exception_while_classifying_is_a_dead_letter_of_kind_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def explode(data: bytes | str) -> DeletionRequest:
        raise MemoryError("simulated")

    monkeypatch.setattr(DeletionRequest, "from_json", explode)
    got = decode_request(b'{"request_id": "x"}')
    assert isinstance(got, Malformed) and got.kind == "other"
    assert got.exception == "MemoryError" and "simulated" in got.reason


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_decoding_never_raises(value: bytes) -> None:
    got = decode_request(value)
    assert isinstance(got, DeletionRequest | Malformed)
    if isinstance(got, Malformed):
        assert got.kind in ("malformed", "schema", "oversized")
