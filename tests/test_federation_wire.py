"""What a transport carries: statistics codecs and client snapshots round-trip exactly."""

from __future__ import annotations

import numpy as np
import pytest
from support.heads import planted_problem

from simulator.errors import InputError
from simulator.features.decorrelation import DecorrelationConfig
from simulator.federation import ClientReport, ClientSnapshot, FederatedClient, WeightingPlan
from simulator.federation.codec import (
    decode_deletion,
    decode_request,
    decode_statistics,
    encode_deletion,
    encode_request,
    encode_statistics,
)
from simulator.head.logistic import StatisticsRequest

PLAN = WeightingPlan(DecorrelationConfig(features=4, steps=15), seed=5)


def client(weighting: WeightingPlan | None = PLAN) -> tuple[FederatedClient, np.ndarray]:
    X, y = planted_problem(80, 6, 3, seed=2)
    ids = np.arange(100, 180, dtype=np.int64)
    return FederatedClient(4, ids, X, y, 3, weighting=weighting), ids


def assert_same_statistics(a, b) -> None:
    np.testing.assert_array_equal(a.loss, b.loss)
    np.testing.assert_array_equal(a.gradient, b.gradient)
    assert (a.hessian is None) == (b.hessian is None) and (a.gram is None) == (b.gram is None)
    if a.hessian is not None:
        np.testing.assert_array_equal(a.hessian, b.hessian)
    if a.gram is not None:
        np.testing.assert_array_equal(a.gram, b.gram)
    assert a.count == b.count


@pytest.mark.parametrize(("hessian", "gram"), [(False, False), (True, False), (True, True)])
def test_statistics_round_trip(hessian: bool, gram: bool) -> None:
    c, _ = client()
    W = np.random.default_rng(0).normal(size=(6, 3))
    stats = c.statistics(StatisticsRequest(W, hessian=hessian, gram=gram))
    assert_same_statistics(decode_statistics(encode_statistics(stats)), stats)


@pytest.mark.parametrize("hessian_at", [False, True])
def test_request_round_trip(hessian_at: bool) -> None:
    rng = np.random.default_rng(1)
    W, ref = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    request = StatisticsRequest(W, hessian=True, gram=False, hessian_at=ref if hessian_at else None)
    flags, heads = encode_request(request)
    back = decode_request(flags, heads)
    assert (back.hessian, back.gram) == (True, False)
    np.testing.assert_array_equal(back.W, W)
    assert (back.hessian_at is None) != hessian_at
    if hessian_at:
        np.testing.assert_array_equal(back.hessian_at, ref)


@pytest.mark.parametrize("hessian_at", [False, True])
def test_some_columns_are_those_columns_of_the_whole_answer(hessian_at: bool) -> None:
    """A request for some columns (a rebuild of the classes that moved) crosses the wire, and
    the client's answer is exactly those columns of its answer for all of them."""
    c, _ = client()
    rng = np.random.default_rng(3)
    W, ref = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    at = ref if hessian_at else None
    request = StatisticsRequest(W, hessian=True, hessian_at=at, columns=(2, 0))
    back = decode_request(*encode_request(request))
    assert back.columns == (2, 0)
    part, whole = (
        c.statistics(back),
        c.statistics(StatisticsRequest(W, hessian=True, hessian_at=at)),
    )
    np.testing.assert_allclose(part.loss, whole.loss[[2, 0]], rtol=1e-12)
    np.testing.assert_allclose(part.gradient, whole.gradient[:, [2, 0]], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(part.hessian, whole.hessian[[2, 0]], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("columns", [(), (0, 0), (3,), (-1,)])
def test_columns_that_are_not_the_heads_are_refused(columns: tuple[int, ...]) -> None:
    with pytest.raises(InputError, match="columns"):
        StatisticsRequest(np.zeros((6, 3)), hessian=True, columns=columns)


def test_garbage_columns_on_the_wire_are_refused() -> None:
    flags, heads = encode_request(StatisticsRequest(np.zeros((6, 3)), hessian=True))
    for bad in (np.array([[0, 1]]), np.array([0.5]), np.array([7])):
        with pytest.raises(InputError, match="columns"):
            decode_request(flags, {**heads, "columns": bad})


def test_scalars_survive_an_added_dimension() -> None:
    c, _ = client()
    arrays = encode_statistics(c.statistics(StatisticsRequest(np.zeros((6, 3)))))
    arrays["count"] = arrays["count"].reshape(1)  # what some transports do to 0-d arrays
    assert decode_statistics(arrays).count == 80
    with pytest.raises(InputError):
        decode_statistics({"loss": arrays["loss"]})


def test_deletion_round_trip_with_reweighting() -> None:
    c, ids = client()
    W = np.random.default_rng(1).normal(size=(6, 3))
    change = c.delete([int(ids[3]), int(ids[40])], W=W, W_ref=W)
    assert change.reweighted is not None
    back = decode_deletion(encode_deletion(change))
    np.testing.assert_array_equal(back.removed_gradient, change.removed_gradient)
    np.testing.assert_array_equal(back.removed_rows, change.removed_rows)
    np.testing.assert_array_equal(back.removed_curvature, change.removed_curvature)
    assert_same_statistics(back.reweighted, change.reweighted)
    assert back.weight_change_l1 == change.weight_change_l1
    assert back.max_weight == change.max_weight


@pytest.mark.parametrize("weighting", [PLAN, None])
def test_restored_client_answers_bit_identically(weighting: WeightingPlan | None) -> None:
    """A snapshot between messages (Flower's ``context.state``) changes nothing."""
    live, ids = client(weighting)
    W = np.random.default_rng(2).normal(size=(6, 3))
    live.delete([int(ids[0]), int(ids[7])], W=W, W_ref=W)
    arrays, scalars = live.snapshot().to_arrays()
    copy = FederatedClient.restore(ClientSnapshot.from_arrays(arrays, scalars))
    assert copy.retained_count == live.retained_count == 78
    assert copy.deletion_batches == live.deletion_batches == 1
    assert copy.last_weights == live.last_weights
    assert_same_statistics(
        copy.statistics(StatisticsRequest(W, hessian=True)),
        live.statistics(StatisticsRequest(W, hessian=True)),
    )
    # the next deletion refits the weights the same way on both
    a = live.delete([int(ids[9])], W=W, W_ref=W)
    b = copy.delete([int(ids[9])], W=W, W_ref=W)
    np.testing.assert_array_equal(a.removed_gradient, b.removed_gradient)
    assert a.weight_change_l1 == b.weight_change_l1
    np.testing.assert_array_equal(live.data.weights, copy.data.weights)
    assert copy.unknown_ids([int(ids[0]), int(ids[1]), 5]) == [int(ids[0]), 5]


def test_client_report_round_trip() -> None:
    live, _ = client()
    report = live.report(np.random.default_rng(3).normal(size=(6, 3)))
    assert ClientReport.from_dict(report.to_dict()) == report
    assert report.rows == report.retained == 80 and report.deletion_batches == 0
