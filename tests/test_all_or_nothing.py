"""A removal is applied on every client and the head, or on none.

A client whose step fails (an exception in its refit) must leave every client of the batch as
it was, the head untouched, the batch's requests answered (``rejected`` with the reason, kept
out of the ledger so that a resend is handled afresh) and the stream going. A head whose solve
fails is retrained from scratch on what the clients hold. A refit with no dependence left to
remove (``class_conditional`` once a client's classes have fewer than two rows each) is not
a failure at all: it used to divide by zero after the client had deleted its rows.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import numpy as np
import pytest
from support.flower_loopback import LoopbackGrid
from support.scenarios import TEN_CLIENTS, scenario
from test_flower_adapters import LONGER, lines, loopback
from test_restore_exact import state_digest

from simulator.features.decorrelation import DecorrelationConfig
from simulator.federation import FederatedClient
from simulator.federation.snapshot import WeightingPlan
from simulator.runner.federation import Federation, build_federation
from simulator.runner.pipeline import apply_batch
from simulator.runner.run_state import RunState
from simulator.stream.ledger import Ledger


def test_a_refit_with_no_dependence_left_is_not_a_failure() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 6))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    plan = WeightingPlan(DecorrelationConfig(objective="class_conditional", steps=5), 1)
    client = FederatedClient(0, np.arange(4), X, np.array([0, 0, 1, 1]), 2, weighting=plan)
    client.delete([0, 2], W=np.zeros((6, 1)), W_ref=np.zeros((6, 1)))  # one row per class
    assert client.retained_count == 2
    assert client.last_weights is not None and client.last_weights.objective_ratio == 1.0


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


@pytest.fixture(scope="module")
def threaded() -> Federation:
    return build_federation(scenario(TEN_CLIENTS, "client_threads=2"))


def failing_refit(*_: Any) -> Any:
    raise RuntimeError("refit failed")


def batch_on_several_clients(fed: Federation) -> list[Any]:
    """The first requests of the stream, covering at least three clients."""
    requests = fed.requests[:12]
    owners = {fed.head_data.owner_of(i) for r in requests for i in r.sample_ids or []}
    assert len(owners) >= 3
    return requests


@pytest.mark.parametrize("fixture", ["built", "threaded"])
def test_a_client_failing_mid_batch_leaves_every_client_and_the_head_as_before(
    fixture: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    fed = copy.deepcopy(request.getfixturevalue(fixture))
    requests = batch_on_several_clients(fed)
    owners = sorted({fed.head_data.owner_of(i) for r in requests for i in r.sample_ids or []})
    broken = owners[len(owners) // 2]  # clients before it (in order) delete first
    before = state_digest(fed)
    monkeypatch.setattr(fed.clients[broken].data, "_reweigh", failing_refit)
    ledger: dict[str, Any] = {}
    run = RunState(evaluate=False)
    outcome = apply_batch(fed, run, requests, ledger=Ledger(ledger))
    assert state_digest(fed) == before  # every client, the head, bit for bit
    assert outcome.removed == () and outcome.report is None
    answered = outcome.answered
    assert len(answered) == len(requests) and {r.status for r in answered} == {"rejected"}
    assert all(
        f"client {broken} failed while deleting (RuntimeError: refit failed)" in (r.reason or "")
        for r in answered
    )
    assert ledger == {}  # a resend is handled afresh
    assert outcome.event["removal_failed"]["client"] == broken

    monkeypatch.undo()  # the client works again: the same requests, sent again, are applied
    again = apply_batch(fed, run, requests, ledger=Ledger(ledger))
    assert {r.status for r in again.answered} == {"applied"}
    reference = copy.deepcopy(request.getfixturevalue(fixture))
    apply_batch(reference, RunState(evaluate=False), requests, ledger=Ledger({}))
    assert state_digest(fed) == state_digest(reference)


def test_a_head_whose_solve_fails_is_retrained_on_what_the_clients_hold(
    built: Federation, monkeypatch: pytest.MonkeyPatch
) -> None:
    fed = copy.deepcopy(built)
    requests = batch_on_several_clients(fed)
    client = fed.clients[fed.head_data.owner_of(requests[0].sample_ids[0])]  # type: ignore[index]
    real = client.data.delete

    def poisoned(*args: Any, **kwargs: Any) -> Any:  # a client answering NaN statistics
        out = real(*args, **kwargs)
        return dataclasses.replace(out, removed_gradient=out.removed_gradient * np.nan)

    monkeypatch.setattr(client.data, "delete", poisoned)
    retrains = fed.head.retrains
    outcome = apply_batch(fed, RunState(evaluate=False), requests, ledger=Ledger({}))
    assert {r.status for r in outcome.answered} == {"applied"}
    assert outcome.event["retrain_reason"] == "numerical"
    assert "the rows were deleted" in outcome.event["removal_failed"]["reason"]
    assert fed.head.retrains == retrains + 1
    ids = [i for r in requests for i in r.sample_ids or []]
    assert sorted(fed.head_data.unknown_ids(ids)) == sorted(ids)  # gone from every client
    assert np.isfinite(fed.head.W).all()
    assert fed.head.cumulative_residual >= fed.head.exact_residual()


def test_on_flower_a_client_failing_its_deletion_leaves_and_the_head_agrees(
    tmp_path: Any,
) -> None:
    """Over the Flower adapters a client's state changes only when its step succeeds (it is
    saved after the step); one that keeps failing leaves the federation and the head is
    retrained on the others, which hold exactly what their receipts say."""
    grid = LoopbackGrid(3, broken={1: "train.unlearn"})
    out = loopback(tmp_path, LONGER, grid)
    events = lines(out / "events.jsonl")
    failed = [e for e in events if e.get("client_failures")]
    assert len(failed) == 1 and failed[0]["retrain_reason"] == "client_failed"
    receipts = lines(out / "receipts.jsonl")
    assert len(receipts) == sum(e["requests"] for e in events if e["event"] == "deletion_batch")
    end = events[-1]
    clients = json.loads((out / "clients.json").read_text())
    assert set(clients["clients"]) == {"0", "2"}
    assert end["retained"] == sum(clients["clients"][c]["retained"] for c in ("0", "2"))
