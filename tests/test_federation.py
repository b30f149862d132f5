"""The federated protocol: summed client statistics give the centralised head and removals."""

import numpy as np
import pytest
from helpers import planted_problem

from simulator.errors import InputError, UnknownSampleError
from simulator.federation import FederatedClient, FederatedHeadData
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData


def federation(X, y, k, parts):
    clients = {c: FederatedClient(c, ids, X[ids], y[ids], k) for c, ids in enumerate(parts)}
    owner = {int(i): c for c, ids in enumerate(parts) for i in ids}
    return FederatedHeadData(clients, owner, dim=X.shape[1], num_classes=k)


def test_federated_head_equals_centralised_head() -> None:
    X, y = planted_problem(300, 6, 3, seed=4)
    parts = np.array_split(np.random.default_rng(0).permutation(300), 4)
    cfg = HeadConfig(lam=0.01, bound="exact")
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
