"""The deletion-stream generator and the wire events it produces."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from simulator.errors import ConfigError, InputError
from simulator.scenario import StreamSpec
from simulator.stream import (
    STREAM_EPOCH,
    DeletionReceipt,
    DeletionRequest,
    batches,
    generate_stream,
)
from simulator.stream.subjects import subject_registry


def spec(phases: list[dict[str, Any]], **extra: Any) -> StreamSpec:
    return StreamSpec.model_validate({"phases": phases, **extra})


def shards(
    n: int, clients: int, classes: int, seed: int = 0
) -> tuple[list[NDArray[np.int64]], NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n).astype(np.int64)
    parts = np.array_split(rng.permutation(n).astype(np.int64), clients)
    return list(parts), labels


def run(
    stream: StreamSpec,
    n: int = 600,
    clients: int = 4,
    classes: int = 3,
    seed: int = 1,
    class_labels: tuple[int, ...] | None = None,
):
    client_indices, labels = shards(n, clients, classes)
    requests = generate_stream(
        stream,
        client_indices=client_indices,
        labels=labels,
        class_labels=tuple(range(classes)) if class_labels is None else class_labels,
        scenario_name="demo",
        rng=np.random.default_rng(seed),
    )
    return requests, client_indices, labels


def owner_of(client_indices: list[NDArray[np.int64]]) -> dict[int, int]:
    return {int(i): c for c, ids in enumerate(client_indices) for i in ids}


MIXED = [
    {"name": "random", "ticks": 5, "rate": 3, "samples_per_request": 2},
    {"name": "class", "ticks": 5, "rate": 2, "target": {"kind": "class", "class_id": 1}},
    {"name": "client", "ticks": 5, "rate": 2, "target": {"kind": "client", "client": 2}},
]


def test_same_seed_same_stream_and_other_seed_other_stream() -> None:
    stream = spec(MIXED, withdrawals=[{"client": 3, "at": 7}])
    a, _, _ = run(stream, seed=5)
    b, _, _ = run(stream, seed=5)
    c, _, _ = run(stream, seed=6)
    assert [r.to_json() for r in a] == [r.to_json() for r in b]
    assert [r.to_json() for r in a] != [r.to_json() for r in c]


def test_ids_exist_and_are_named_once() -> None:
    requests, client_indices, _ = run(spec(MIXED))
    named = [i for r in requests for i in (r.sample_ids or [])]
    assert len(named) == len(set(named)) > 0
    assert set(named) <= set(owner_of(client_indices))


def test_targets_are_respected() -> None:
    requests, client_indices, labels = run(spec(MIXED))
    owner = owner_of(client_indices)
    for r in requests:
        assert r.sample_ids is not None
        if 5 <= r.tick < 10:
            assert all(labels[i] == 1 for i in r.sample_ids)
        if 10 <= r.tick < 15:
            assert all(owner[i] == 2 for i in r.sample_ids)
        if r.tick < 5:
            assert len(r.sample_ids) == 2


def test_request_fields() -> None:
    requests, _, _ = run(spec(MIXED, tick_seconds=2.5))
    assert [r.request_id for r in requests] == [f"demo-{k:07d}" for k in range(len(requests))]
    for r in requests:
        assert r.requested_at == STREAM_EPOCH + timedelta(seconds=2.5 * r.tick)
        assert r.sample_ids == sorted(r.sample_ids or [])
    assert datetime(2026, 1, 1, tzinfo=UTC) == STREAM_EPOCH
    ticks = [r.tick for r in requests]
    assert ticks == sorted(ticks)


def test_every_request_comes_from_the_subject_that_owns_its_rows() -> None:
    requests, client_indices, labels = run(spec(MIXED))
    registry = subject_registry(client_indices, labels.shape[0], rows_per_subject=16)
    assert requests and all(registry.check(r) is None for r in requests)
    assert len({r.subject for r in requests}) > len(requests) // 3  # many subjects ask
    # a subject's rows: one client's, 16 of them (a client's last group may hold fewer)
    owner = owner_of(client_indices)
    for r in requests[:10]:
        rows = registry.rows(r.subject)
        assert 1 <= rows.size <= 16 and len({owner[int(i)] for i in rows}) == 1
    other = next(s for s in registry.names if s != requests[0].subject)
    forged = requests[0].model_copy(update={"subject": other})
    assert (registry.check(forged) or "").startswith("not_owner")
    withdrawal = DeletionRequest(
        request_id="w", subject="client-1", client_id=2, requested_at=STREAM_EPOCH
    )
    assert (registry.check(withdrawal) or "").startswith("not_owner")
    assert registry.check(withdrawal.model_copy(update={"subject": "client-2"})) is None


def test_a_request_is_never_larger_than_a_subject() -> None:
    with pytest.raises(ValueError, match="rows_per_subject"):
        spec([{"name": "p", "ticks": 1, "rate": 1, "samples_per_request": 17}])
    phases = [{"name": "p", "ticks": 1, "rate": 1, "samples_per_request": 17}]
    assert spec(phases, rows_per_subject=17).rows_per_subject == 17


def test_withdrawal_removes_the_client_from_then_on() -> None:
    phases = [{"name": "p", "ticks": 20, "rate": 8}]
    requests, client_indices, _ = run(spec(phases, withdrawals=[{"client": 1, "at": 6}]))
    owner = owner_of(client_indices)
    withdrawals = [r for r in requests if r.is_client_removal]
    assert len(withdrawals) == 1
    w = withdrawals[0]
    assert (w.client_id, w.tick, w.sample_ids, w.subject) == (1, 6, None, "client-1")
    position = requests.index(w)
    assert all(r.tick < 6 for r in requests[:position])
    after = [i for r in requests[position + 1 :] for i in (r.sample_ids or [])]
    before = [i for r in requests[:position] for i in (r.sample_ids or [])]
    assert after and all(owner[i] != 1 for i in after)
    assert any(owner[i] == 1 for i in before)


def test_a_client_target_after_its_withdrawal_emits_nothing() -> None:
    phases = [{"name": "p", "ticks": 10, "rate": 5, "target": {"kind": "client", "client": 0}}]
    requests, _, _ = run(spec(phases, withdrawals=[{"client": 0, "at": 3}]))
    assert all(r.tick <= 3 for r in requests)
    assert requests[-1].client_id == 0


def test_poisson_mean_is_the_rate() -> None:
    ticks, rate = 3000, 2.0
    requests, _, _ = run(spec([{"name": "p", "ticks": ticks, "rate": rate}]), n=20000)
    mean = len(requests) / ticks
    assert abs(mean - rate) < 5 * (rate / ticks) ** 0.5
    counts = np.bincount([r.tick for r in requests], minlength=ticks)
    assert counts.var() == pytest.approx(rate, rel=0.15)  # Poisson: variance = mean


def test_bursts_fall_on_every_nth_tick_of_the_phase() -> None:
    phases = [
        {"name": "quiet", "ticks": 2, "rate": 0},
        {"name": "bursty", "ticks": 7, "rate": 0, "burst": {"every": 3, "size": 4}},
    ]
    requests, _, _ = run(spec(phases))
    counts = np.bincount([r.tick for r in requests], minlength=9)
    assert counts.tolist() == [0, 0, 4, 0, 0, 4, 0, 0, 4]


def test_a_dry_pool_gives_fewer_but_full_requests() -> None:
    labels = np.array([0, 1, 1, 1, 1, 1, 0, 0], dtype=np.int64)
    client_indices = [np.arange(8, dtype=np.int64)]
    target = {"kind": "class", "class_id": 1}
    stream = spec(
        [{"name": "p", "ticks": 4, "rate": 50, "samples_per_request": 2, "target": target}]
    )
    requests = generate_stream(
        stream,
        client_indices=client_indices,
        labels=labels,
        class_labels=(0, 1),
        scenario_name="dry",
        rng=np.random.default_rng(0),
    )
    assert len(requests) == 2
    named = sorted(i for r in requests for i in (r.sample_ids or []))
    assert len(named) == 4 and set(named) < {1, 2, 3, 4, 5}


def test_a_class_target_names_a_source_label_not_an_index() -> None:
    # task classes in the order [7, 0, 6, 2]: index 2 is source label 6
    labels = np.array([0, 1, 2, 3, 2, 2, 0, 1], dtype=np.int64)
    target = {"kind": "class", "class_id": 6}
    stream = spec([{"name": "shirts", "ticks": 1, "rate": 0, "burst": {"every": 1, "size": 3},
                    "target": target}])  # fmt: skip
    requests = generate_stream(
        stream,
        client_indices=[np.arange(8, dtype=np.int64)],
        labels=labels,
        class_labels=(7, 0, 6, 2),
        scenario_name="shirts",
        rng=np.random.default_rng(0),
        subjects=subject_registry([np.arange(8, dtype=np.int64)], 8, rows_per_subject=1),
    )
    assert sorted(i for r in requests for i in r.sample_ids or []) == [2, 4, 5]


def test_an_unknown_class_id_is_refused_naming_the_key() -> None:
    target = {"kind": "class", "class_id": 9}
    stream = spec([{"name": "p", "ticks": 1, "rate": 1}, {"name": "q", "ticks": 1, "rate": 1,
                   "target": target}])  # fmt: skip
    with pytest.raises(ConfigError, match=r"stream\.phases\.1\.target\.class_id: class id 9"):
        generate_stream(
            stream,
            client_indices=[np.arange(4, dtype=np.int64)],
            labels=np.array([0, 1, 0, 1], dtype=np.int64),
            class_labels=(3, 8),
            scenario_name="x",
            rng=np.random.default_rng(0),
        )


def test_a_phase_that_generates_no_request_is_an_error_naming_it() -> None:
    # class 8 (index 1) lives only on client 1, which withdrew at tick 0
    stream = spec(
        [
            {"name": "warmup", "ticks": 1, "rate": 0},
            {"name": "eights", "ticks": 3, "rate": 2, "target": {"kind": "class", "class_id": 8}},
        ],
        withdrawals=[{"client": 1, "at": 0}],
    )
    with pytest.raises(ConfigError, match=r"stream\.phases\.1: phase 'eights' generated no"):
        generate_stream(
            stream,
            client_indices=[np.array([0, 1], dtype=np.int64), np.array([2, 3], dtype=np.int64)],
            labels=np.array([0, 0, 1, 1], dtype=np.int64),
            class_labels=(3, 8),
            scenario_name="x",
            rng=np.random.default_rng(0),
        )
    # a quiet phase (rate 0, no burst) asks for nothing and is no error
    quiet = spec([{"name": "quiet", "ticks": 3, "rate": 0}])
    assert (
        generate_stream(
            quiet,
            client_indices=[np.array([0, 1], dtype=np.int64)],
            labels=np.array([0, 1], dtype=np.int64),
            class_labels=(3, 8),
            scenario_name="x",
            rng=np.random.default_rng(0),
        )
        == []
    )


def test_batches_group_by_tick_then_chunk() -> None:
    requests, _, _ = run(spec([{"name": "p", "ticks": 30, "rate": 4}]))
    grouped = batches(requests, 3)
    assert [r for batch in grouped for r in batch] == requests
    for batch in grouped:
        assert 1 <= len(batch) <= 3
        assert len({r.tick for r in batch}) == 1
    per_tick = np.bincount([r.tick for r in requests])
    assert len(grouped) == sum(-(-int(c) // 3) for c in per_tick)
    assert batches([], 5) == []
    with pytest.raises(InputError):
        batches(requests, 0)


def test_bad_shards_are_input_errors() -> None:
    stream = spec([{"name": "p", "ticks": 1, "rate": 1}])
    labels = np.zeros(5, dtype=np.int64)
    kwargs: dict[str, Any] = {"labels": labels, "class_labels": (0,), "scenario_name": "x"}
    rng = np.random.default_rng(0)
    overlapping = [np.array([0, 1]), np.array([1, 2])]
    with pytest.raises(InputError, match="shares"):
        generate_stream(stream, client_indices=overlapping, rng=rng, **kwargs)
    floats = [np.array([0.0, 1.0])]
    with pytest.raises(InputError, match="integers"):
        generate_stream(stream, client_indices=floats, rng=rng, **kwargs)  # type: ignore[arg-type]
    outside = [np.array([0, 7])]
    with pytest.raises(InputError, match="outside"):
        generate_stream(stream, client_indices=outside, rng=rng, **kwargs)
    client_stream = spec(
        [{"name": "p", "ticks": 1, "rate": 1, "target": {"kind": "client", "client": 3}}]
    )
    with pytest.raises(InputError, match="client 3"):
        generate_stream(client_stream, client_indices=[np.array([0])], rng=rng, **kwargs)
    with pytest.raises(InputError, match="labels"):
        generate_stream(
            stream,
            client_indices=[np.array([0])],
            labels=np.zeros((2, 2)),  # type: ignore[arg-type]
            class_labels=(0,),
            scenario_name="x",
            rng=rng,
        )


@st.composite
def stream_cases(draw: st.DrawFn) -> tuple[StreamSpec, int, int, int]:
    clients = draw(st.integers(1, 4))
    classes = draw(st.integers(1, 3))
    n = draw(st.integers(0, 60))
    phases = []
    for k in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["random", "class", "client"]))
        target: dict[str, Any] = {"kind": kind}
        if kind == "class":
            target["class_id"] = draw(st.integers(0, classes - 1))
        if kind == "client":
            target["client"] = draw(st.integers(0, clients - 1))
        phase: dict[str, Any] = {
            "name": f"p{k}",
            "ticks": draw(st.integers(1, 6)),
            "rate": draw(st.floats(0, 6)),
            "samples_per_request": draw(st.integers(1, 4)),
            "target": target,
        }
        if draw(st.booleans()):
            phase["burst"] = {"every": draw(st.integers(1, 3)), "size": draw(st.integers(1, 3))}
        phases.append(phase)
    total = sum(p["ticks"] for p in phases)
    leaving = draw(st.lists(st.integers(0, clients - 1), unique=True, max_size=clients))
    withdrawals = [{"client": c, "at": draw(st.integers(0, total - 1))} for c in leaving]
    return spec(phases, withdrawals=withdrawals), n, clients, classes


@settings(max_examples=60, deadline=None)
@given(case=stream_cases(), seed=st.integers(0, 2**32 - 1), order=st.randoms())
def test_stream_invariants_hold_for_random_specs(
    case: tuple[StreamSpec, int, int, int], seed: int, order: Any
) -> None:
    stream, n, clients, classes = case
    # class ids are source labels: index k of the task is source label class_labels[k]
    class_labels = list(range(classes))
    order.shuffle(class_labels)
    try:
        requests, client_indices, labels = run(
            stream, n=n, clients=clients, classes=classes, seed=seed,
            class_labels=tuple(class_labels),
        )  # fmt: skip
    except ConfigError as exc:
        # only a phase that asked for requests and generated none; the phases before it run
        assert exc.location is not None and exc.location.startswith("stream.phases.")
        k = int(exc.location.split(".")[2])
        assert f"phase {stream.phases[k].name!r} generated no deletion request" in str(exc)
        return
    owner = owner_of(client_indices)
    gone_at = {w.client: w.at for w in stream.withdrawals}
    seen: set[int] = set()
    assert [r.tick for r in requests] == sorted(r.tick for r in requests)
    assert sorted(r.client_id for r in requests if r.is_client_removal) == sorted(gone_at)
    for r in requests:
        if r.client_id is not None:
            assert gone_at[r.client_id] == r.tick
            continue
        phase = stream.phase_at(r.tick)
        ids = r.sample_ids or []
        assert len(ids) == phase.samples_per_request
        assert not seen & set(ids)
        seen |= set(ids)
        for i in ids:
            assert i in owner
            assert owner[i] not in gone_at or gone_at[owner[i]] > r.tick
            if phase.target.kind == "class":
                assert class_labels[labels[i]] == phase.target.class_id
            if phase.target.kind == "client":
                assert owner[i] == phase.target.client


# --- events -----------------------------------------------------------------------------


def request(**fields: Any) -> DeletionRequest:
    base: dict[str, Any] = {
        "request_id": "r-1",
        "subject": "subject-1",
        "sample_ids": [3, 1, 2],
        "requested_at": STREAM_EPOCH,
    }
    base.update(fields)
    return DeletionRequest(**base)


def test_events_round_trip_through_json() -> None:
    r = request(tick=4)
    assert DeletionRequest.from_json(r.to_json()) == r
    assert DeletionRequest.from_json(r.to_json().decode()) == r
    wire = json.loads(r.to_json())
    assert wire["schema_version"] == 1 and wire["requested_at"] == "2026-01-01T00:00:00Z"
    client = request(sample_ids=None, client_id=2)
    assert DeletionRequest.from_json(client.to_json()) == client
    receipt = DeletionReceipt(
        request_id="r-1",
        status="applied",
        model_version=3,
        residual=0.25,
        epsilon_spent=0.5,
        applied_at=STREAM_EPOCH + timedelta(seconds=1),
    )
    assert DeletionReceipt.from_json(receipt.to_json()) == receipt


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        (b"not json", "malformed DeletionRequest"),
        (b"[1, 2]", "malformed"),
        ({"sample_ids": [1], "client_id": 1}, "exactly one of sample_ids and client_id"),
        ({"sample_ids": None}, "exactly one"),
        ({"sample_ids": []}, "should not be empty"),
        ({"sample_ids": [1, 1]}, "repeat"),
        ({"sample_ids": [-1]}, "greater than or equal to 0"),
        ({"sample_ids": ["1"]}, "sample_ids.0"),
        ({"schema_version": 2}, "schema_version"),
        ({"priority": "high"}, "priority"),
        ({"requested_at": "2026-01-01T00:00:00"}, "requested_at"),
        ({"request_id": ""}, "request_id"),
    ],
)
def test_malformed_requests_are_input_errors(payload: Any, text: str) -> None:
    if isinstance(payload, dict):
        wire = json.loads(request().to_json())
        wire.update(payload)
        payload = json.dumps(wire)
    with pytest.raises(InputError, match=text) as info:
        DeletionRequest.from_json(payload)
    assert isinstance(info.value, ValueError)


def test_a_rejected_receipt_says_why() -> None:
    wire = {
        "request_id": "r",
        "status": "rejected",
        "model_version": 0,
        "applied_at": "2026-01-01T00:00:00Z",
    }
    with pytest.raises(InputError, match="needs a reason"):
        DeletionReceipt.from_json(json.dumps(wire))
    ok = DeletionReceipt.from_json(json.dumps({**wire, "reason": "unknown sample ids"}))
    assert ok.reason == "unknown sample ids"
    with pytest.raises(InputError, match="status"):
        DeletionReceipt.from_json(json.dumps({**wire, "status": "maybe"}))
