"""What the server learns from a client's removal message (docs/security.md), measured.

A removal message (:class:`simulator.head.data.DeletionStatistics`) carries the removed rows'
gradient and, in factored form, their Hessian contribution. The tests reconstruct a removed
sample's head features from one message, show that dense sums over several rows hide the rows
of a binary head but give them away with three classes or more, and check the mitigation: with a
minimum removal batch the rows leave in an order that does not say which id they belong to.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from scipy.linalg import eigh
from support.scenarios import TEN_CLIENTS, scenario

from simulator.federation import FederatedClient
from simulator.head.data import DeletionStatistics
from simulator.runner.federation import Federation, build_federation


@pytest.fixture(scope="module")
def built() -> Federation:
    return build_federation(scenario(TEN_CLIENTS))


def removal_message(fed: Federation, client: int, ids: list[int]) -> DeletionStatistics:
    """What ``client`` sends the server to remove ``ids`` (on a copy of the federation)."""
    fed = copy.deepcopy(fed)
    c = fed.clients[client]
    assert isinstance(c, FederatedClient)
    return c.delete(ids, W=fed.head.W, W_ref=fed.head.W)


def features_of(fed: Federation, client: int, sample_id: int) -> np.ndarray:
    c = fed.clients[client]
    assert isinstance(c, FederatedClient)
    return np.asarray(c.data.features[c._local[sample_id]])


def test_one_removal_message_gives_the_removed_sample_away(built: Federation) -> None:
    client, sample = 2, int(built.clients[2].retained_ids[5])
    x = features_of(built, client, sample)
    msg = removal_message(built, client, [sample])
    # 1. the factored Hessian carries the row itself: exact reconstruction
    assert np.array_equal(msg.removed_rows[0], x)
    # 2. the gradient alone: each class column is a multiple of the row
    g = msg.removed_gradient
    column = g[:, int(np.argmax(np.linalg.norm(g, axis=0)))]
    cosine = abs(column @ x) / (np.linalg.norm(column) * np.linalg.norm(x))
    assert cosine > 1 - 1e-12
    # 3. so does the dense Hessian downdate (rank one)
    H = (msg.removed_rows * msg.removed_curvature[:, [0]]).T @ msg.removed_rows
    top = np.linalg.eigh(H)[1][:, -1]
    assert abs(top @ x) / np.linalg.norm(x) > 1 - 1e-9


def recover_rows(rows: np.ndarray, curvature: np.ndarray) -> np.ndarray:
    """The best a server can do with only the dense per-class sums ``sum_j c_jk x_j x_j^T``:
    one class: the eigenvectors of the sum; several: a generalized eigendecomposition of two
    classes' sums, restricted to the rows' span (columns: recovered rows, unit norm)."""
    H = [(rows * curvature[:, [k]]).T @ rows for k in range(curvature.shape[1])]
    values, vectors = np.linalg.eigh(sum(H))
    U = vectors[:, values > 1e-12 * values.max()]  # the span of the removed rows
    if len(H) == 1:
        return U
    _, V = eigh(U.T @ H[0] @ U, U.T @ H[1] @ U)
    recovered = U @ np.linalg.inv(V).T
    return recovered / np.linalg.norm(recovered, axis=0)


def best_cosines(fed: Federation, client: int, count: int) -> np.ndarray:
    """For each of ``count`` removed rows, the best |cosine| of a recovered row with it."""
    ids = [int(i) for i in fed.clients[client].retained_ids[:count]]
    X = np.stack([features_of(fed, client, i) for i in ids])
    msg = removal_message(fed, client, ids)
    recovered = recover_rows(msg.removed_rows, msg.removed_curvature)
    return np.asarray(np.abs(X @ recovered).max(axis=1) / np.linalg.norm(X, axis=1))


def test_dense_sums_hide_the_rows_of_a_binary_head_but_not_of_several_classes(
    built: Federation,
) -> None:
    """Sending only dense sums over a batch (what a sum-only protocol would carry): with one
    logistic column (two classes) the sum reveals the rows' span, not the rows; with one column
    per class the per-class sums share the rows with different weights, and a generalized
    eigendecomposition separates them."""
    assert built.head.W.shape[1] == 1
    assert best_cosines(built, 1, 8).min() < 0.9
    three = build_federation(scenario(TEN_CLIENTS, "data.synthetic.n_classes=3"))
    assert three.head.W.shape[1] == 3
    assert best_cosines(three, 1, 8).min() > 0.99


def test_with_a_minimum_batch_the_message_does_not_say_which_row_is_whose(
    built: Federation,
) -> None:
    client = 3
    ids = [int(i) for i in built.clients[client].retained_ids[10:14]]
    forward = removal_message(built, client, ids)
    backward = removal_message(built, client, ids[::-1])
    for name in ("removed_gradient", "removed_rows", "removed_curvature"):
        assert np.array_equal(getattr(forward, name), getattr(backward, name)), name
    X = np.stack([features_of(built, client, i) for i in ids])
    order = sorted(range(len(ids)), key=lambda j: X[j].tobytes())  # bytes, as memcmp
    assert np.array_equal(forward.removed_rows, X[order])  # value order, not the order asked
