"""A batch is described by the requests it applied (issue 29): its tick, its phase and its marks.

A Kafka batch may mix requests from several phases, re-sent duplicates and rejected requests;
only the applied ones place it on the scenario's clock, and a batch that applied nothing (only
duplicates) is neither evaluated nor marked on the plots.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from support.kafka import broker, config
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker
from server.kafka.consumer import DeletionConsumer
from server.kafka.producer import replay_requests
from server.kafka.topics import Topics
from simulator.reporting.plot_marks import stream_marks
from simulator.runner.federation import Federation, build_federation
from simulator.runner.pipeline import apply_batch
from simulator.runner.run_state import RunState
from simulator.stream import DeletionRequest
from simulator.stream.ledger import Ledger

__all__ = ["broker"]  # the fixture, imported for pytest


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


def _phase(fed: Federation, request: DeletionRequest) -> str:
    return fed.scenario.stream.phase_at(request.tick).name


def test_a_mixed_batch_takes_its_phase_and_tick_from_the_requests_it_applied(
    built: Federation,
) -> None:
    fed = copy.deepcopy(built)
    (withdrawal,) = [r for r in fed.requests if r.client_id is not None]
    assert withdrawal.tick == 8 and _phase(fed, withdrawal) == "client-2-cleanup"
    rows = [  # requests whose rows the withdrawal leaves in place
        r
        for r in fed.requests
        if r.client_id is None
        and all(fed.head_data.owner_of(i) != withdrawal.client_id for i in r.sample_ids or [])
    ]
    warmup = [r for r in rows if _phase(fed, r) == "warmup"][:6]
    purge = [r for r in rows if _phase(fed, r) == "class-1-purge"][:2]
    last_phase = [r for r in rows if _phase(fed, r) == "client-2-cleanup"]
    ledger, run = Ledger(), RunState(evaluate=False)

    first = apply_batch(fed, run, [withdrawal], ledger=ledger)
    assert first.event["withdrawn_clients"] == [withdrawal.client_id]
    assert (first.event["tick"], first.event["phase"]) == (8, "client-2-cleanup")

    # named twice in the batch: rejected, whatever its (late) tick
    again = purge[0].model_copy(update={"request_id": "again", "tick": last_phase[0].tick})
    batch = [*warmup, *purge, again, withdrawal]  # the withdrawal is a re-sent duplicate
    mixed = apply_batch(fed, run, batch, ledger=ledger)
    statuses = [r.status for r in mixed.answered]
    assert statuses == ["applied"] * 8 + ["rejected", "duplicate"]
    event = mixed.event
    assert event["phases"] == {"warmup": 6, "class-1-purge": 2}
    assert event["phase"] == "warmup"  # where most of its applied requests come from
    assert event["tick"] == max(r.tick for r in purge) < 8  # not the duplicate's nor the rejected
    assert event["withdrawn_clients"] == []  # the duplicate withdrawal is not a withdrawal
    assert run.last_tick == 8  # the run's clock never goes back
    marks = stream_marks([first.event, event])
    assert [label for kind, _, label in marks.lines if kind == "withdrawal"] == [
        f"withdrawal c{withdrawal.client_id}"
    ]


def test_a_duplicate_only_kafka_batch_is_not_evaluated_nor_marked(
    broker: LocalBroker, built: Federation, tmp_path: Path
) -> None:
    fed = copy.deepcopy(built)
    (withdrawal,) = [r for r in fed.requests if r.client_id is not None]
    requests = [*fed.requests[:10], withdrawal]
    topics = Topics()
    replay_requests(requests, bootstrap=broker.bootstrap, topics=topics)
    DeletionConsumer(fed, config(broker.bootstrap, tmp_path)).run()
    replay_requests(requests, bootstrap=broker.bootstrap, topics=topics)  # re-sent: duplicates
    DeletionConsumer(fed, config(broker.bootstrap, tmp_path)).run()  # resumes its checkpoint

    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    applied, resent = [e for e in events if e["event"] == "deletion_batch"]
    assert applied["applied"] > 0 and "metrics" in applied  # evaluated
    assert applied["applied"] + applied["rejected"] == len(requests)
    assert applied["withdrawn_clients"] == [withdrawal.client_id]
    assert resent["duplicates"] == len(requests) and resent["applied"] == 0
    assert resent["samples"] == 0 and resent["phases"] == {}
    for key in ("metrics", "privacy", "drift", "checkpoints"):
        assert key not in resent, key  # nothing changed: nothing evaluated
    assert resent["tick"] == applied["tick"] == withdrawal.tick  # not moved back to tick 0
    assert resent["withdrawn_clients"] == []
    marks = stream_marks([applied, resent])
    assert [kind for kind, _, _ in marks.lines].count("withdrawal") == 1
