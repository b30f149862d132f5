"""Every schema-valid request gets an answer, whatever its fields say (issue 28).

The hostile corpus (``test_kafka_hostile.py``) covers bytes that are not a request. Here every
record *is* a valid request of the schema, with values the consumer may not be able to apply:
a tick past the scenario's stream (which stopped the consumer with ``IndexError`` on every
restart), unknown or huge sample and client ids, ids named twice in a batch, repeated request
ids, any subject, any time zone. A hypothesis fuzz drives the consumer's own steps in process
(decode the record, the gate, :func:`apply_batch` with the ledger and held requests, the
checkpoint's plain-data round trip) and checks that each record is answered exactly once and
the federation, ledger and held requests stay consistent; one test sends the tick case through
the real broker, followed by good requests.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support.kafka import broker, config, headers, read_topic
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker
from server.kafka.checkpoint import ConsumerState
from server.kafka.consumer import DeletionConsumer
from server.kafka.gate import Gate, GateConfig, registry_of
from server.kafka.producer import replay
from server.kafka.topics import Topics, ensure_topics
from server.kafka.wire import Incoming, decode_request
from simulator.runner.federation import Federation, build_federation
from simulator.runner.pipeline import apply_batch
from simulator.runner.run_state import RunState
from simulator.stream import DeletionReceipt, DeletionRequest
from simulator.stream.events import MAX_INDEX
from simulator.stream.ledger import Ledger

__all__ = ["broker"]


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


def _offsets() -> st.SearchStrategy[timezone]:
    minutes = st.integers(-(24 * 60 - 1), 24 * 60 - 1)
    return st.builds(lambda m: timezone(timedelta(minutes=m)), minutes)


def _times() -> st.SearchStrategy[str]:
    """``requested_at`` as RFC 3339 text: any year, any zone, with or without fractions."""
    moments = st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=_offsets()
    )
    return st.one_of(
        moments.map(lambda t: t.isoformat()),
        moments.map(lambda t: t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")),
    )


@st.composite
def requests(draw: st.DrawFn, fed: Federation) -> dict[str, Any]:
    """The JSON object of a schema-valid request; ids and fields from the whole valid range."""
    n = int(fed.dataset.y_train.shape[0])
    known = [r for r in fed.requests if r.sample_ids]
    model = draw(st.sampled_from(known))
    ticks = fed.scenario.stream.total_ticks
    index = st.one_of(st.integers(0, n + 5), st.integers(0, MAX_INDEX))
    body: dict[str, Any] = {
        "schema_version": 1,
        "request_id": draw(
            st.one_of(
                st.sampled_from(["r-a", "r-b", "r-c", model.request_id]),
                st.text(min_size=1, max_size=12),
            )
        ),
        "subject": draw(st.one_of(st.just(model.subject), st.text(min_size=1, max_size=12))),
        "requested_at": draw(_times()),
    }
    if draw(st.booleans()):
        body["tick"] = draw(st.one_of(st.integers(0, ticks + 2), st.integers(0, MAX_INDEX)))
    if draw(st.integers(0, 4)) == 0:
        client = draw(st.one_of(st.integers(0, fed.scenario.partition.num_clients), index))
        body["client_id"] = client
        if draw(st.booleans()):
            body["subject"] = f"client-{client}"
    else:
        ids = st.one_of(index, st.sampled_from(model.sample_ids or [0]))
        body["sample_ids"] = draw(st.lists(ids, min_size=1, max_size=5, unique=True))
    return body


def _record(i: int, value: bytes) -> Incoming:
    return Incoming(0, i, None, value, 1_700_000_000_000 + i, ())


class Stream:
    """The consumer's steps for each batch (``DeletionConsumer._handle``) without Kafka."""

    def __init__(self, fed: Federation, gate: Gate, min_rows: int) -> None:
        self.fed, self.gate, self.min_rows = fed, gate, min_rows
        self.state = ConsumerState(run=RunState(evaluate=False))
        self.ledger = Ledger(self.state.ledger)
        self.answers: dict[int, list[DeletionReceipt]] = {}
        self.removed: list[int] = []

    def batch(self, records: list[Incoming]) -> None:
        sources = [src for src, _ in self.state.pending]
        batch = [req for _, req in self.state.pending]
        denied: dict[int, str] = {}
        for rec in records:
            decoded = decode_request(rec.value)
            assert isinstance(decoded, DeletionRequest), decoded  # schema-valid by construction
            why = self.gate.refuse(decoded, rec)
            if why is not None:
                denied[len(batch)] = why
            batch.append(decoded)
            sources.append(rec)
        result = apply_batch(
            self.fed, self.state.run, batch, ledger=self.ledger, denied=denied,
            min_rows=self.min_rows,
        )  # fmt: skip
        assert len(result.receipts) == len(batch)
        for i, (receipt, req, src) in enumerate(zip(result.receipts, batch, sources, strict=True)):
            assert (receipt is None) == (i in result.held)
            if receipt is not None:
                assert receipt.request_id == req.request_id
                assert receipt.status != "rejected" or receipt.reason
                self.answers.setdefault(src.offset, []).append(receipt)
        self.removed.extend(result.removed)
        self.state.pending = [(sources[i], batch[i]) for i in result.held]
        # the checkpoint's plain data (JSON) gives the same state back: a restart can load it
        saved = ConsumerState.from_dict(json.loads(json.dumps(self.state.to_dict())))
        assert saved.pending == self.state.pending
        assert saved.ledger == self.state.ledger
        assert saved.run.state_dict() == self.state.run.state_dict()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_every_schema_valid_request_is_answered_once_and_the_state_stays_consistent(
    built: Federation, data: st.DataObject
) -> None:
    fed = copy.deepcopy(built)
    before = fed.head_data.retained_count
    bodies = data.draw(st.lists(requests(fed), min_size=1, max_size=14), label="requests")
    values = [json.dumps(b).encode() for b in bodies]
    assume(all(isinstance(decode_request(v), DeletionRequest) for v in values))
    policy = GateConfig(
        ownership=data.draw(st.booleans(), label="ownership"),
        rate_limit=data.draw(st.sampled_from([0, 3]), label="rate limit"),
    )
    gate = Gate(policy, registry_of(fed) if policy.ownership else None, {})
    stream = Stream(fed, gate, min_rows=data.draw(st.sampled_from([1, 3]), label="min rows"))
    records = [_record(i, v) for i, v in enumerate(values)]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), max_size=3), label="cuts"))
    for lo, hi in zip([0, *cuts], [*cuts, len(records)], strict=True):
        if hi > lo:
            stream.batch(records[lo:hi])

    held = {src.offset for src, _ in stream.state.pending}
    for rec in records:  # exactly one answer each, or still held for a later removal
        assert len(stream.answers.get(rec.offset, [])) == (0 if rec.offset in held else 1)
    removed = stream.removed
    assert len(set(removed)) == len(removed)  # nothing deleted twice
    assert fed.head_data.retained_count == before - len(removed)
    assert sorted(fed.head_data.unknown_ids(removed)) == sorted(removed)  # removed: gone
    for rec in records:
        for receipt in stream.answers.get(rec.offset, []):
            assert receipt.request_id in stream.ledger or receipt.reason  # recorded, or refused
    assert 0 <= stream.state.run.last_tick < fed.scenario.stream.total_ticks
    fed.scenario.stream.phase_at(stream.state.run.last_tick)


def test_a_tick_past_the_stream_is_rejected_and_the_batch_goes_on(built: Federation) -> None:
    fed = copy.deepcopy(built)
    good = fed.requests[:3]
    late = good[0].model_copy(update={"request_id": "late", "tick": 1000})
    result = apply_batch(fed, RunState(evaluate=False), [late, *good], ledger=Ledger())
    assert [r.status for r in result.answered] == ["rejected", "applied", "applied", "applied"]
    why = result.answered[0].reason or ""
    last = fed.scenario.stream.total_ticks - 1
    assert why.startswith(f"tick 1000 outside the scenario's stream (ticks 0..{last}")
    assert result.event["tick"] == max(r.tick for r in good)


def test_a_tick_past_the_stream_through_the_broker_does_not_stall_the_stream(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    fed = copy.deepcopy(built)
    topics = Topics("ticks-req", "ticks-rec", "ticks-dlq")
    ensure_topics(broker.bootstrap, topics)
    good = fed.requests[:40]
    late = good[0].model_copy(update={"request_id": "tick-1000", "tick": 1000})
    sent = [late, *good]
    replay([(r.request_id.encode(), r.to_json()) for r in sent], bootstrap=broker.bootstrap,
           topic=topics.requests)  # fmt: skip

    summary = DeletionConsumer(fed, config(broker.bootstrap, tmp_path, topics=topics)).run()

    receipts = read_topic(broker.bootstrap, topics.receipts)
    answered = sorted(headers(m)["request-offset"] for m in receipts)
    assert answered == sorted(f"0:{i}".encode() for i in range(len(sent)))  # one each, none lost
    bodies = {b["request_id"]: b for b in (json.loads(m.value) for m in receipts)}
    assert bodies["tick-1000"]["status"] == "rejected"
    assert "tick 1000 outside the scenario's stream" in bodies["tick-1000"]["reason"]
    assert all(bodies[r.request_id]["status"] == "applied" for r in good)
    assert summary["records"] == len(sent) and summary["applied"] == len(good)
    # a restart reads nothing again and answers what comes next
    more = fed.requests[40:45]
    replay([(r.request_id.encode(), r.to_json()) for r in more], bootstrap=broker.bootstrap,
           topic=topics.requests)  # fmt: skip
    again = DeletionConsumer(fed, config(broker.bootstrap, tmp_path, topics=topics)).run()
    assert again["session"]["records"] == len(more) and again["session"]["applied"] == len(more)
