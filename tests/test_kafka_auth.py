"""Only the data subject can delete: ownership, signed requests, rate limits, held removals.

Ownership and signatures run through the real broker and consumer; the rate limiter, the key
sources, the TLS/SASL options and the holding of small removals are checked directly.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.kafka import apply_requests, broker, config, read_receipts
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker
from server.kafka.consumer import DeletionConsumer
from server.kafka.gate import Gate, GateConfig, registry_of
from server.kafka.producer import replay, replay_requests
from server.kafka.security import client_options
from server.kafka.signing import HEADER, load_key, sign, verify
from server.kafka.topics import Topics, ensure_topics
from server.kafka.wire import Incoming
from simulator.errors import ConfigError
from simulator.runner.federation import Federation, build_federation
from simulator.stream import DeletionRequest
from simulator.stream.ledger import Ledger

__all__ = ["broker"]

KEY = b"k" * 32
NOW = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


def statuses(bootstrap: str, topics: Topics) -> list[tuple[str, str, str]]:
    return [(r.request_id, r.status, r.reason or "") for r in read_receipts(bootstrap, topics)]


def test_only_the_owner_can_delete_and_a_forgery_does_not_block_the_owner(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    fed = copy.deepcopy(built)
    genuine = fed.requests[0]
    registry = registry_of(fed)
    assert registry.check(genuine) is None
    victim = registry.rows(genuine.subject)
    intruder = next(s for s in registry.names if s != genuine.subject)
    forged = genuine.model_copy(update={"subject": intruder})  # someone else's rows, same id
    withdrawal = DeletionRequest(
        request_id="leave-3", subject=intruder, client_id=3, requested_at=NOW
    )
    own = DeletionRequest(request_id="self-3", subject="client-3", client_id=3, requested_at=NOW)
    topics = Topics("own-req", "own-rec", "own-dlq")
    replay_requests([forged, withdrawal, genuine, own], bootstrap=broker.bootstrap, topics=topics)
    summary = DeletionConsumer(fed, config(broker.bootstrap, tmp_path, topics=topics)).run()

    got = statuses(broker.bootstrap, topics)
    assert [(rid, status) for rid, status, _ in got] == [
        (genuine.request_id, "rejected"),
        ("leave-3", "rejected"),
        (genuine.request_id, "applied"),  # not a duplicate: the forgery never entered the ledger
        ("self-3", "applied"),
    ]
    assert got[0][2].startswith("not_owner") and got[1][2].startswith("not_owner")
    assert summary["unauthorised"] == 2
    retained = set(fed.head_data_retained().tolist())
    assert not set(genuine.sample_ids or []) & retained  # the owner's rows went
    assert set(victim.tolist()) - set(genuine.sample_ids or []) <= retained  # only those
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    batches = [e for e in events if e["event"] == "deletion_batch"]
    assert sum(e["unauthorised"].get("not_owner", 0) for e in batches) == 2


def test_signed_requests_are_required_when_a_key_is_set(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    fed = copy.deepcopy(built)
    topics = Topics("sig-req", "sig-rec", "sig-dlq")
    ensure_topics(broker.bootstrap, topics)
    a, b, c = fed.requests[:3]
    replay([(b"a", a.to_json())], bootstrap=broker.bootstrap, topic=topics.requests)
    replay([(b"b", b.to_json())], bootstrap=broker.bootstrap, topic=topics.requests,
           signing_key=b"w" * 32)  # fmt: skip
    replay_requests([c], bootstrap=broker.bootstrap, topics=topics, signing_key=KEY)
    settings = config(broker.bootstrap, tmp_path, topics=topics, gate=GateConfig(signing_key=KEY))
    DeletionConsumer(fed, settings).run()

    got = statuses(broker.bootstrap, topics)
    assert [s for _, s, _ in got] == ["rejected", "rejected", "applied"]
    assert "no unlearnsim-signature header" in got[0][2]
    assert got[1][2] == "bad_signature: the signature does not match the record"


def test_signatures_bind_the_exact_bytes() -> None:
    value = b'{"request_id": "x"}'
    good = [(HEADER, sign(value, KEY))]
    assert verify(value, good, KEY) is None
    assert verify(value + b" ", good, KEY) is not None
    assert verify(value, [*good, *good], KEY) is not None
    assert "GateConfig(ownership=True, signing_key=set" in repr(GateConfig(signing_key=KEY))


def test_signing_keys_come_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert load_key(environ={}) is None
    assert load_key(environ={"UNLEARNSIM_SIGNING_KEY": "s" * 20}) == b"s" * 20
    assert load_key(env_var="MINE", environ={"MINE": "m" * 16}) == b"m" * 16
    path = tmp_path / "key"
    path.write_bytes(KEY + b"\n")
    assert load_key(path=path, environ={}) == KEY
    assert load_key(environ={"UNLEARNSIM_SIGNING_KEY_FILE": str(path)}) == KEY
    with pytest.raises(ConfigError, match="not set"):
        load_key(env_var="MISSING", environ={})
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        load_key(environ={"UNLEARNSIM_SIGNING_KEY": "short"})


def test_tls_and_sasl_options_come_from_the_environment(tmp_path: Path) -> None:
    assert client_options({}) == {}
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    secret = tmp_path / "password"
    secret.write_text("hunter2\n")
    env = {
        "UNLEARNSIM_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "UNLEARNSIM_KAFKA_SSL_CAFILE": str(ca),
        "UNLEARNSIM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "UNLEARNSIM_KAFKA_SASL_USERNAME": "unlearnsim",
        "UNLEARNSIM_KAFKA_SASL_PASSWORD_FILE": str(secret),
    }
    assert client_options(env) == {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "unlearnsim",
        "sasl_plain_password": "hunter2",
    }
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient

    for client in (KafkaConsumer, KafkaProducer, KafkaAdminClient):  # options it knows
        assert set(client_options(env)) <= set(client.DEFAULT_CONFIG)
    with pytest.raises(ConfigError, match="needs a SASL mechanism"):
        client_options({"UNLEARNSIM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    with pytest.raises(ConfigError, match="no such file"):
        client_options({"UNLEARNSIM_KAFKA_SSL_CAFILE": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="should be one of"):
        client_options({"UNLEARNSIM_KAFKA_SECURITY_PROTOCOL": "TLS"})


def _record(ts: int) -> Incoming:
    return Incoming(partition=0, offset=0, key=None, value=b"{}", timestamp_ms=ts)


def test_the_rate_limit_counts_per_subject_on_a_clock_that_cannot_be_rewound(
    built: Federation,
) -> None:
    requests = [r for r in built.requests if r.sample_ids][:2]
    windows: dict[str, list[int]] = {}
    clock = [1_000_000.0]
    gate = Gate(
        GateConfig(rate_limit=2, rate_window=60.0),
        registry_of(built),
        windows,
        clock=lambda: clock[0],
    )
    first, other = requests
    assert gate.refuse(first, _record(1_000_000)) is None
    assert gate.refuse(first, _record(1_000_000)) is None
    why = gate.refuse(first, _record(1_000_000))
    assert why is not None and why.startswith("rate_limited")
    assert gate.refuse(other, _record(1_000_000)) is None  # another subject has its own budget
    assert (gate.refuse(first, _record(0)) or "").startswith("rate_limited")  # old timestamp
    future = 1_000_000 + 3_600_000
    assert (gate.refuse(first, _record(future)) or "").startswith("rate_limited")  # not yet
    clock[0] = future
    assert gate.refuse(first, _record(future)) is None  # the window has passed
    gate.prune(now_ms=future + 120_000)
    assert windows == {}


def test_small_removals_are_held_until_a_client_has_enough_rows(built: Federation) -> None:
    fed = copy.deepcopy(built)
    registry = registry_of(fed)
    client = 1
    subjects = [s for s, c in zip(registry.names, registry.clients, strict=True) if c == client]
    asks = []
    for i, subject in enumerate(subjects[:3]):
        rows = registry.rows(subject)[:2].tolist()
        asks.append(
            DeletionRequest(request_id=f"r{i}", subject=subject, sample_ids=rows, requested_at=NOW)
        )
    ledger = Ledger()
    first = apply_requests(fed, ledger, asks[:1], now=NOW, min_rows=4)
    assert first.held == (0,) and first.receipts == (None,) and "r0" not in ledger
    assert fed.head.model_version == built.head.model_version  # nothing left the client yet
    again = apply_requests(fed, ledger, [asks[0], asks[0], asks[1]], now=NOW, min_rows=4)
    assert again.held == ()
    assert [r.status if r else None for r in again.receipts] == ["applied", "duplicate", "applied"]
    assert fed.head_data.last_routing == {client: 4}  # one removal message of four rows
    leave = DeletionRequest(
        request_id="leave", subject=f"client-{client}", client_id=client, requested_at=NOW
    )
    last = apply_requests(fed, ledger, [asks[2], leave], now=NOW, min_rows=100)
    assert last.held == () and [r.status for r in last.receipts if r] == ["applied", "applied"]
