"""The Kafka adapter without a broker: decoding, ledger, micro-batch application, checkpoints."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import pickle
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from support.kafka import apply_requests
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.checkpoint import CheckpointStore, ConsumerState, static_objects
from server.kafka.errors import CheckpointError
from server.kafka.wire import (
    Incoming,
    Malformed,
    OutRecord,
    dead_letter,
    decode_request,
    header,
)
from simulator.runner.federation import Federation, build_federation
from simulator.runner.run_state import RunState
from simulator.state_files import read_state
from simulator.stream import DeletionRequest
from simulator.stream.ledger import Ledger

NOW = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


@pytest.fixture
def fed(built: Federation) -> Federation:
    return copy.deepcopy(built)


def request(rid: str, ids: list[int] | None = None, client: int | None = None) -> DeletionRequest:
    return DeletionRequest(
        request_id=rid, subject="s", sample_ids=ids, client_id=client, requested_at=NOW
    )


# ------------------------------------------------------------------ records
@pytest.mark.parametrize(
    ("value", "kind", "words"),
    [
        (None, "malformed", "empty"),
        (b"", "malformed", "empty"),
        (b"\xff\xfe not json", "malformed", "JSON"),
        (b"{not json", "malformed", "JSON"),
        (b'{"request_id": "a"}', "schema", "subject"),
        (b"[1, 2]", "schema", "DeletionRequest"),
        (b"x" * 2000, "oversized", "2000 bytes"),
    ],
)
def test_malformed_records_say_why(value: bytes | None, kind: str, words: str) -> None:
    got = decode_request(value, max_bytes=1000)
    assert isinstance(got, Malformed)
    assert got.kind == kind and words in got.reason


def test_unknown_schema_version_and_two_targets_are_schema_errors() -> None:
    good = json.loads(request("r", [1]).to_json())
    for change in ({"schema_version": 2}, {"client_id": 3}, {"sample_ids": []}, {"extra": 1}):
        got = decode_request(json.dumps({**good, **change}).encode())
        assert isinstance(got, Malformed) and got.kind == "schema", change


def test_a_valid_request_round_trips() -> None:
    req = request("r-1", [5, 3])
    assert decode_request(req.to_json()) == req


def test_dead_letter_keeps_the_original_bytes_and_truncates_huge_ones() -> None:
    rec = Incoming(partition=0, offset=7, key=b"k", value=b"garbage", timestamp_ms=1)
    why = Malformed("malformed", "not UTF-8 JSON")
    out = dead_letter(rec, why, source_topic="in", topic="dlq")
    assert (out.topic, out.key, out.value) == ("dlq", b"k", b"garbage")
    assert header(out.headers, "reason") == b"not UTF-8 JSON"
    assert header(out.headers, "reason-kind") == b"malformed"
    assert header(out.headers, "request-offset") == b"0:7"
    assert header(out.headers, "source-topic") == b"in"
    assert header(out.headers, "truncated") is None
    huge = Incoming(0, 8, None, b"y" * 100, 1)
    cut = dead_letter(huge, why, source_topic="in", topic="dlq", max_bytes=10)
    assert cut.value == b"y" * 10
    assert header(cut.headers, "truncated") == b"true"
    assert header(cut.headers, "original-size") == b"100"


# ------------------------------------------------------------------- ledger
def test_ledger_records_once() -> None:
    ledger = Ledger()
    ledger.record("a", "applied", 3)
    assert "a" in ledger and len(ledger) == 1
    with pytest.raises(ValueError, match="already"):
        ledger.record("a", "rejected", 4)
    with pytest.raises(ValueError, match="only applied or rejected"):
        ledger.record("b", "duplicate", 4)
    receipt = ledger.duplicate_receipt("a", model_version=9, now=NOW)
    assert receipt.status == "duplicate" and receipt.model_version == 9
    assert "applied at model version 3" in (receipt.reason or "")


# -------------------------------------------------------------------- apply
def test_batch_is_one_removal_with_rejections_and_duplicates(fed: Federation) -> None:
    c0, c1 = fed.clients[0].retained_ids, fed.clients[1].retained_ids
    ledger = Ledger()
    first = apply_requests(fed, ledger, [request("a", [int(c0[0])])], now=NOW)
    assert [r.status for r in first.receipts] == ["applied"]
    version = fed.head.model_version
    batch = [
        request("b", [int(c0[1]), int(c1[0])]),
        request("a", [int(c0[2])]),  # seen in an earlier batch
        request("c", [int(c0[0])]),  # already deleted
        request("d", client=99),  # no such client
        request("b", [int(c1[5])]),  # repeated within the batch
        request("e", [10**9]),  # unknown id
    ]
    twin = copy.deepcopy(fed)
    result = apply_requests(fed, ledger, batch, now=NOW)
    statuses = [r.status for r in result.receipts]
    assert statuses == ["applied", "duplicate", "rejected", "rejected", "duplicate", "rejected"]
    assert fed.head.model_version == version + 1  # one certified update for the batch
    assert list(result.removed) == [int(c0[1]), int(c1[0])]
    assert "unknown client 99" in (result.receipts[3].reason or "")
    twin.head.remove([int(c0[1]), int(c1[0])])
    np.testing.assert_array_equal(fed.head.W, twin.head.W)
    assert len(ledger) == 5  # a, b, c, d, e


def test_a_withdrawal_takes_what_the_client_still_holds(fed: Federation) -> None:
    held = [int(i) for i in fed.clients[4].retained_ids]
    batch = [
        request("before", [held[0]]),  # an earlier tick's request in the same micro-batch
        request("leave", client=4),
        request("after", [held[1]]),  # already gone with the client
    ]
    result = apply_requests(fed, Ledger(), batch, now=NOW)
    assert [r.status for r in result.receipts] == ["applied", "applied", "rejected"]
    assert sorted(result.removed) == sorted(held)
    assert fed.clients[4].retained_count == 0


def test_a_batch_of_only_duplicates_changes_nothing(fed: Federation) -> None:
    ledger = Ledger()
    ids = [int(fed.clients[2].retained_ids[0])]
    apply_requests(fed, ledger, [request("x", ids)], now=NOW)
    W, version = fed.head.W, fed.head.model_version
    result = apply_requests(fed, ledger, [request("x", ids), request("x", [1])], now=NOW)
    assert [r.status for r in result.receipts] == ["duplicate", "duplicate"]
    assert fed.head.model_version == version
    np.testing.assert_array_equal(fed.head.W, W)


# --------------------------------------------------------------- checkpoint
def _batches(fed: Federation, n: int) -> list[list[DeletionRequest]]:
    size = max(1, len(fed.requests) // n)
    return [fed.requests[i : i + size] for i in range(0, len(fed.requests), size)][:n]


def test_checkpoint_restores_the_head_bit_for_bit(fed: Federation, tmp_path: Path) -> None:
    batches = _batches(fed, 4)
    ledger = Ledger()
    for batch in batches[:2]:
        apply_requests(fed, ledger, batch, now=NOW)
    state = ConsumerState(ledger=ledger.entries(), offsets={0: 42}, batch=2)
    with CheckpointStore(tmp_path, fed) as store:
        store.save(state)
    size = (tmp_path / "checkpoint.npz").stat().st_size
    features = sum(c.data._X.nbytes for c in fed.clients.values())
    assert size < features / 2, "feature rows should not be written to every checkpoint"

    fresh = build_federation(fed.scenario)
    with CheckpointStore(tmp_path, fresh) as store:
        restored = store.load()
    assert restored is not None and restored.offsets == {0: 42} and restored.batch == 2
    assert fresh.head is not fed.head
    np.testing.assert_array_equal(fresh.head.W, fed.head.W)
    for cid in fed.clients:
        np.testing.assert_array_equal(
            fresh.clients[cid].data.weights, fed.clients[cid].data.weights
        )
    assert fresh.head_data.clients[0] is fresh.clients[0]
    # the rest of the stream gives the same model: solver, budget and generator came back too
    ledger2 = Ledger(restored.ledger)
    for batch in batches[2:]:
        a = apply_requests(fed, ledger, batch, now=NOW)
        b = apply_requests(fresh, ledger2, batch, now=NOW)
        assert a.receipts == b.receipts
    np.testing.assert_array_equal(fresh.head.W, fed.head.W)
    assert fresh.head.cumulative_residual == fed.head.cumulative_residual


def test_static_objects_cover_the_feature_rows(fed: Federation) -> None:
    static = static_objects(fed)
    for cid in fed.clients:
        assert f"client{cid}.data._X" in static, "rename? update server/kafka/checkpoint.py"
    assert not fed.clients[0].data._X.flags.writeable


def test_checkpoint_is_locked_and_tied_to_its_scenario(fed: Federation, tmp_path: Path) -> None:
    with CheckpointStore(tmp_path, fed) as store:
        store.save(ConsumerState())
        with pytest.raises(CheckpointError, match="another consumer"):
            CheckpointStore(tmp_path, fed)
    other = copy.deepcopy(fed)
    other.data = dataclasses.replace(
        other.data, scenario=other.scenario.model_copy(update={"seed": 8})
    )
    with (
        CheckpointStore(tmp_path, other) as store,
        pytest.raises(CheckpointError, match="scenario"),
    ):
        store.load()


def test_checkpoint_write_is_atomic(fed: Federation, tmp_path: Path) -> None:
    with CheckpointStore(tmp_path, fed) as store:
        store.save(ConsumerState(batch=1))
        (tmp_path / "checkpoint.npz.tmp").write_bytes(b"half written")  # a crash mid-write
        loaded = store.load()
    assert loaded is not None and loaded.batch == 1
    assert read_state(tmp_path / "checkpoint.npz")["format"] == 2


def test_consumer_state_is_plain_data_that_round_trips() -> None:
    """Everything the consumer persists survives the JSON form (bytes, tuples, requests)."""
    req = request("r", [1, 2])
    incoming = Incoming(0, 7, b"k", req.to_json(), 123, (("sig", b"\x00\xff"),))
    state = ConsumerState(
        ledger={"a": ("applied", 3)},
        offsets={0: 8},
        outbox=[OutRecord("receipts", b"k", b"v", (("h", b"1"),))],
        batch=4,
        published_until={("receipts", 0): 5},
        counters={"records": 8},
        run=RunState(forgotten=[1, 2], batches=4, last_tick=2, answered={"applied": 1}),
        last_records={0: (7, 123, "abc")},
        pending=[(incoming, req)],
        rate={"subject": [1, 2]},
        gaps=[{"event": "offset_gap", "skipped": 0}],
        sessions=2,
    )
    again = ConsumerState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.to_dict() == state.to_dict()
    assert again.pending == state.pending and again.outbox == state.outbox


def test_a_checkpoint_of_the_previous_format_is_read_and_converted(
    fed: Federation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format 1 pickled the head and a ``StreamState`` (with ``forgotten`` and ``last_tick``);
    it loads into the new federation state and is replaced by the new file at the next save."""
    from server.kafka import checkpoint as ck

    batches = _batches(fed, 2)
    ledger = Ledger()
    for batch in batches[:1]:
        apply_requests(fed, ledger, batch, now=NOW)
    static = ck.static_objects(fed)
    ids = {id(obj): key for key, obj in static.items()}

    class FormatOnePickler(pickle.Pickler):
        def persistent_id(self, obj: object) -> str | None:
            return ids.get(id(obj))

    class StreamState:  # the format-1 class, under its old module and name
        pass

    StreamState.__module__, StreamState.__qualname__ = ck.__name__, "StreamState"
    monkeypatch.setattr(ck, "StreamState", StreamState, raising=False)
    old = StreamState()
    old.__dict__.update(
        ledger=dict(ledger.entries()), offsets={0: 9}, outbox=[], batch=1, published_until={},
        counters={"records": 9}, forgotten=[1, 2, 3], last_tick=4, last_records={},
        pending=[], rate={}, gaps=[], sessions=1,
    )  # fmt: skip
    with (tmp_path / "checkpoint.pkl").open("wb") as f:
        digest = hashlib.sha256(fed.scenario.model_dump_json().encode()).hexdigest()
        pickle.dump({"format": 1, "scenario": digest, "static": ck.digest_static(static)}, f)
        FormatOnePickler(f, protocol=5).dump(fed.head)
        pickle.dump(old, f, protocol=5)
    monkeypatch.delattr(ck, "StreamState")

    fresh = build_federation(fed.scenario)
    with CheckpointStore(tmp_path, fresh) as store:
        assert CheckpointStore.exists(tmp_path)
        restored = store.load()
        assert restored is not None
        assert restored.run.forgotten == [1, 2, 3] and restored.run.last_tick == 4
        assert restored.offsets == {0: 9} and restored.ledger == ledger.entries()
        np.testing.assert_array_equal(fresh.head.W, fed.head.W)
        assert fresh.head.model_version == fed.head.model_version
        for cid in fed.clients:
            np.testing.assert_array_equal(
                fresh.clients[cid].data.weights, fed.clients[cid].data.weights
            )
        store.save(restored)
    assert (tmp_path / "checkpoint.npz").exists() and not (tmp_path / "checkpoint.pkl").exists()
