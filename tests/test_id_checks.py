"""Every id a request or a shard names is checked or refused, never looked up blindly.

Sample ids, client ids and subjects: an unknown one is an :class:`UnknownSampleError`, an
:class:`InputError` or a rejection with its reason, and nothing is deleted for it.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.compare.workload import expand_requests
from simulator.errors import InputError, UnknownSampleError
from simulator.federation.client import FederatedClient
from simulator.runner.requests import RowHoldings, expand
from simulator.stream import STREAM_EPOCH, DeletionRequest
from simulator.stream.subjects import subject_registry


def client() -> FederatedClient:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3))
    x /= 2 * np.linalg.norm(x, axis=1, keepdims=True)
    ids = np.arange(10, 16, dtype=np.int64)
    return FederatedClient(0, ids, x, np.array([0, 1, 0, 1, 0, 1], dtype=np.int64), 2)


def test_a_client_refuses_to_delete_a_row_it_does_not_retain() -> None:
    c = client()
    w = np.zeros((3, 1))
    for ids in ([999], [-1], [11, 999]):
        with pytest.raises(UnknownSampleError, match="retained rows of client 0"):
            c.delete(ids, W=w, W_ref=w)
        assert c.retained_count == 6  # nothing of a refused batch is deleted
    c.delete([10], W=w, W_ref=w)
    with pytest.raises(UnknownSampleError, match=r"1 sample id\(s\).*: 10"):
        c.delete([10], W=w, W_ref=w)  # already deleted: not a second subtraction
    with pytest.raises(InputError, match="twice"):
        c.delete([12, 12], W=w, W_ref=w)
    assert c.retained_count == 5


@pytest.mark.parametrize(
    ("shards", "match"),
    [
        ([np.array([0, -1])], "outside 0..2"),
        ([np.array([0, 3])], "outside 0..2"),
        ([np.array([0, 1]), np.array([1, 2])], "shares"),
        ([np.array([0, 0])], "repeats"),
    ],
)
def test_a_subject_registry_refuses_ids_outside_or_shared(
    shards: list[np.ndarray], match: str
) -> None:
    with pytest.raises(InputError, match=match):
        subject_registry(shards, 3, rows_per_subject=1)


def withdrawal(client_id: int) -> DeletionRequest:
    return DeletionRequest(
        request_id=f"w{client_id}",
        subject=f"client-{client_id}",
        client_id=client_id,
        requested_at=STREAM_EPOCH,
    )


def samples(*ids: int) -> DeletionRequest:
    return DeletionRequest(
        request_id=f"s{ids}", subject="s", sample_ids=list(ids), requested_at=STREAM_EPOCH
    )


def test_row_holdings_refuse_unknown_ids_and_clients() -> None:
    holdings = RowHoldings(np.array([0, 0, 1, 1, 2, 2]), [0, 1])  # group 2: a public pool
    with pytest.raises(UnknownSampleError):
        holdings.route([-1])
    with pytest.raises(UnknownSampleError):
        holdings.route([6])
    ids, rejected = expand(holdings, [withdrawal(2), samples(4), samples(0, 7), withdrawal(1)])
    assert ids == [2, 3]
    assert rejected == {
        "w2": "unknown client 2",
        "s(4,)": "unknown or already deleted sample ids: [4]",
        "s(0, 7)": "unknown or already deleted sample ids: [7]",
    }


def test_compare_never_deletes_the_public_pool() -> None:
    groups = np.array([0, 0, 1, 1, 2, 2])  # two clients and the public pool (group 2)
    batches = expand_requests([withdrawal(2), samples(5), samples(1)], 10, groups, num_clients=2)
    assert [b.tolist() for b in batches] == [[1]]
