"""The federated protocol: summed client statistics give the centralised head and removals."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.heads import planted_problem

from simulator.errors import InputError, UnknownSampleError
from simulator.features.decorrelation import DecorrelationConfig
from simulator.federation import FederatedClient, FederatedHeadData, WeightingPlan
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData
from simulator.head.logistic import StatisticsRequest, objective_gradient


def federation(X, y, k, parts):
    clients = {c: FederatedClient(c, ids, X[ids], y[ids], k) for c, ids in enumerate(parts)}
    owner = {int(i): c for c, ids in enumerate(parts) for i in ids}
    return FederatedHeadData(clients, owner, dim=X.shape[1], num_classes=k)


def test_federated_head_equals_centralised_head() -> None:
    X, y = planted_problem(300, 6, 3, seed=4)
    parts = np.array_split(np.random.default_rng(0).permutation(300), 4)
    cfg = HeadConfig(lam=0.01, accounting="exact")
    fed = CertifiedHead(federation(X, y, 3, parts), cfg, rng=np.random.default_rng(9))
    central = CertifiedHead(LocalHeadData(X, y, 3), cfg, rng=np.random.default_rng(9))
    np.testing.assert_allclose(fed.W, central.W, rtol=1e-9, atol=1e-12)
    ids = [int(parts[1][0]), int(parts[1][1]), int(parts[3][5])]
    r_fed, r_central = fed.remove(ids), central.remove(ids)
    np.testing.assert_allclose(fed.W, central.W, rtol=1e-8, atol=1e-12)
    assert r_fed.charged == pytest.approx(r_central.charged, rel=1e-6)
    # the deletion reached only the owners, with their share of the ids
    assert fed.data.last_routing == {1: 2, 3: 1}
    assert fed.data.retained_count == 297
    assert fed.data.clients[0].retained_count == len(parts[0])


def test_the_federation_answers_some_columns_as_the_rows_do() -> None:
    """The clients' sum of a request for some columns (a rebuild of the classes that moved)
    is those columns of the whole rows' answer."""
    X, y = planted_problem(300, 6, 3, seed=4)
    parts = np.array_split(np.random.default_rng(0).permutation(300), 4)
    W = np.random.default_rng(1).normal(size=(6, 3))
    request = StatisticsRequest(W, hessian=True, hessian_at=0.5 * W, columns=(1,))
    part = federation(X, y, 3, parts).statistics(request)
    whole = LocalHeadData(X, y, 3).statistics(
        StatisticsRequest(W, hessian=True, hessian_at=0.5 * W)
    )
    np.testing.assert_allclose(part.gradient, whole.gradient[:, [1]], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(part.hessian, whole.hessian[[1]], rtol=1e-10, atol=1e-12)
    assert part.count == whole.count == 300


def test_unknown_and_unowned_ids_are_rejected_without_change() -> None:
    X, y = planted_problem(60, 4, 2, seed=1)
    parts = [np.arange(0, 30), np.arange(30, 50)]  # rows 50..59 belong to nobody
    head = CertifiedHead(
        federation(X, y, 2, parts), HeadConfig(lam=0.1), rng=np.random.default_rng(0)
    )
    W = head.W
    with pytest.raises(UnknownSampleError):
        head.remove([55])
    head.remove([3])
    with pytest.raises(UnknownSampleError):
        head.remove([3, 4])
    assert head.data.retained_count == 49
    with pytest.raises(InputError):
        head.data.delete([55], W=W, W_ref=W)


@settings(max_examples=8, deadline=None)
@given(
    batches=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    objective=st.sampled_from(["paper", "stablenet", "class_conditional"]),
    seed=st.integers(0, 1000),
)
def test_weights_after_deletions_are_a_cold_fit_and_the_certificate_holds_against_it(
    batches, objective, seed
) -> None:
    """After any sequence of deletions every client's weights are exactly a from-scratch fit on
    its retained rows (``A(D')``'s weights), and the released head's residual on ``A(D')``'s
    objective is covered by the charge (guo accounting), hence within the budget."""
    X, y = planted_problem(240, 6, 3, seed=seed)
    parts = np.array_split(np.random.default_rng(seed).permutation(240), 3)
    config = DecorrelationConfig(objective=objective, features=None, steps=25)
    clients = {
        c: FederatedClient(c, ids, X[ids], y[ids], 3, weighting=WeightingPlan(config, seed + c))
        for c, ids in enumerate(parts)
    }
    owner = {int(i): c for c, ids in enumerate(parts) for i in ids}
    data = FederatedHeadData(clients, owner, dim=6, num_classes=3)
    head = CertifiedHead(
        data, HeadConfig(lam=1e-2, sigma=1.0, epsilon=1e3), rng=np.random.default_rng(seed)
    )
    order = np.random.default_rng(seed + 1).permutation(240)
    start = 0
    for size in batches:
        r = head.remove([int(i) for i in order[start : start + size]])
        start += size
        ids, cold, current = [], [], []
        for client in clients.values():
            kept, weights = client.retained_weights()
            _, fresh = client.cold_weights()
            np.testing.assert_allclose(weights, fresh, rtol=1e-9, atol=1e-12)
            ids.append(kept)
            cold.append(fresh)
            current.append(weights)
        keep = np.concatenate(ids)
        a_prime = LocalHeadData(X[keep], y[keep], 3, weights=np.concatenate(cold))
        stats = a_prime.statistics(StatisticsRequest(head.W))
        residual = float(np.linalg.norm(objective_gradient(stats, head.W, head.b, lam=1e-2)))
        assert residual <= r.cumulative * (1 + 1e-9) + 1e-12 and r.cumulative <= head.budget
        assert not r.retrained  # the budget is large: every step is a certified Newton step
