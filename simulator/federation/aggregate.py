"""The server's view of the federation: the certified head's rows, summed over clients.

:class:`FederatedHeadData` implements :class:`simulator.head.data.HeadData` by asking every
client for its statistics and summing them (sums over disjoint shards equal the full-data
value), and routes each deletion only to the clients that own the samples. A
:class:`ClientChannel` is anything that answers the client protocol: an in-process
:class:`~simulator.federation.client.FederatedClient`, or a Flower adapter that encodes the
same calls as messages. A transport whose round trips are slow also supplies a
:class:`ClientFanout` that sends one call to several clients at once; the sums are taken in the
same client order either way, so the result does not depend on the transport.

A client that fails (:class:`~simulator.errors.ClientUnavailableError`) can be excluded: its
rows leave the federation, ids it owned count as unknown, and the caller retrains the head on
the clients that remain (see :mod:`simulator.runner.resilience`).

The clients compute with the arrays of ``rows_backend``: numpy on the host (every transport; a
Flower message carries numpy), or, for in-process clients whose rows live on the head's device
(``head.client_rows``), the head's own backend, so that a request, its answer and the sum never
leave that device.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import reduce
from operator import add
from typing import Protocol, cast

import numpy as np
from numpy.typing import NDArray

from simulator.errors import DeletionFailedError, InputError
from simulator.federation.client import FederatedClient
from simulator.head.backend import NUMPY, Array, Backend
from simulator.head.data import DeletionStatistics, HeadShape, RowSource
from simulator.head.logistic import ShardStatistics, StatisticsRequest

FloatArray = NDArray[np.float64]


#: The client side of the protocol as the server sees it: the same questions the head asks.
ClientChannel = RowSource


class ClientFanout(Protocol):
    """One protocol call sent to several clients at once; answers keyed by client id."""

    def statistics(
        self, clients: Sequence[int], request: StatisticsRequest
    ) -> dict[int, ShardStatistics]:
        """Each of ``clients``' answer to ``request`` (the clients' arrays), keyed by client id."""
        ...

    def delete(
        self, groups: Mapping[int, Sequence[int]], *, W: FloatArray, W_ref: FloatArray
    ) -> dict[int, DeletionStatistics]:
        """Delete ``groups[c]`` on each client ``c``; the removed rows' statistics by client id."""
        ...


class FederatedHeadData(HeadShape):
    """Aggregates client statistics; knows which client owns which global sample id.

    Parameters
    ----------
    clients : client id -> channel.
    owner : global sample id -> client id (all ids ever held by a client).
    dim, num_classes : d of the head and K (the head has :func:`head_columns` columns).
    fanout : parallel path for statistics and deletions (default: one client after another).
    rows_backend : the array backend the clients compute with (module docstring; numpy).
    """

    def __init__(
        self,
        clients: Mapping[int, ClientChannel],
        owner: Mapping[int, int],
        *,
        dim: int,
        num_classes: int,
        fanout: ClientFanout | None = None,
        rows_backend: Backend = NUMPY,
    ) -> None:
        super().__init__(dim, num_classes)
        self.rows_backend = rows_backend
        self.clients = dict(clients)
        self._owner = dict(owner)
        self._fanout = fanout
        self.last_routing: dict[int, int] = {}
        self.excluded: dict[int, str] = {}

    def exclude(self, client_id: int, reason: str) -> None:
        """Drop a failed client: its rows leave the federation, its ids become unknown."""
        self.clients.pop(client_id, None)
        self.excluded[client_id] = reason

    def owner_of(self, sample_id: int) -> int:
        """The client that holds (or held) ``sample_id``; -1 if none."""
        return self._owner.get(int(sample_id), -1)

    @property
    def retained_count(self) -> int:
        """Retained rows over every client."""
        return sum(c.retained_count for c in self.clients.values())

    def max_weight(self) -> float:
        """Largest weight of a retained row over every client."""
        return max((c.max_weight() for c in self.clients.values()), default=0.0)

    def route(self, ids: Sequence[int]) -> dict[int, list[int]]:
        """Group ids by owning client; ids with no owner are under key -1."""
        groups: dict[int, list[int]] = {}
        for i in ids:
            groups.setdefault(self._owner.get(int(i), -1), []).append(int(i))
        return groups

    def unknown_ids(self, ids: Sequence[int]) -> list[int]:
        """The ids of ``ids`` that no live client holds."""
        bad: list[int] = []
        for cid, group in self.route(ids).items():
            live = self.clients.get(cid)
            bad.extend(group if live is None else live.unknown_ids(group))
        return bad

    def statistics(self, request: StatisticsRequest) -> ShardStatistics:
        """Sum of the clients' answers to ``request`` (one fan-out when there is one).

        The data terms of the head's loss (Guo et al. ICML 2020, eq. 1;
        ``simulator/head/logistic.py``) are sums over rows, so over the clients' disjoint shards
        the sums of their statistics equal the full-data ones. The clients compute with the
        arrays of ``rows_backend``: the server's head (numpy or torch, ``head.device``) is
        converted here (nothing to convert where the clients' rows are on the head's device).
        """
        request = request.moved_to(self.rows_backend)
        parts: Iterable[ShardStatistics]
        if self._fanout is not None:
            answers = self._fanout.statistics(list(self.clients), request)
            parts = (answers[cid] for cid in self.clients)
        else:  # one client after another, summed as they answer
            parts = (client.statistics(request) for client in self.clients.values())
        empty = ShardStatistics.zeros(
            self._dim, request.column_count(), hessian=request.hessian, gram=request.gram
        )
        return reduce(add, parts, empty.moved_to(self.rows_backend))

    def delete(self, ids: Sequence[int], *, W: Array, W_ref: Array) -> DeletionStatistics:
        """Delete ``ids`` on their owning clients; the sum of the removed rows' statistics.

        The step's bounds multiply by the largest weight of *every* retained row, since their
        remainder sums over all clients' rows: ``max_weight`` covers the clients that were not
        asked as well (each reports its own, which a deletion elsewhere does not change).

        All or nothing: when a client's step fails (:class:`DeletionFailedError`), every
        in-process client of the batch is restored to its state before it, so nothing of the
        batch is applied anywhere. (Clients in other processes change their state only when
        their step succeeds; one that fails is reported as unavailable and left out of the
        federation by the caller.)

        Raises
        ------
        InputError
            When an id has no live owning client.
        DeletionFailedError
            A client's step failed; every in-process client is as before the call.
        """
        W, W_ref = self.rows_backend.asarray(W), self.rows_backend.asarray(W_ref)
        groups = self.route(ids)
        orphans = [i for cid, g in groups.items() if cid not in self.clients for i in g]
        if orphans:
            raise InputError(f"sample ids with no live owning client: {orphans[:10]}")
        self.last_routing = {cid: len(g) for cid, g in groups.items()}
        before = {
            cid: client.state_dict()
            for cid in groups
            if isinstance(client := self.clients[cid], FederatedClient)
        }
        try:
            if self._fanout is not None:
                answers = self._fanout.delete(groups, W=W, W_ref=W_ref)
                parts = [answers[cid] for cid in sorted(groups)]
            else:
                parts = [
                    self.clients[cid].delete(g, W=W, W_ref=W_ref)
                    for cid, g in sorted(groups.items())
                ]
        except DeletionFailedError:  # all or nothing: every client as before the batch
            for cid, state in before.items():
                cast(FederatedClient, self.clients[cid]).load_state_dict(state)
            raise
        combined = combine_deletions(parts, self.rows_backend)
        return replace(combined, max_weight=max(combined.max_weight, self.max_weight()))


def combine_deletions(
    parts: Sequence[DeletionStatistics], bk: Backend = NUMPY
) -> DeletionStatistics:
    """Sum the clients' answers to one deletion batch (``max_weight``: over these clients).

    ``bk``: the backend of the answers' arrays (the clients' ``rows_backend``).
    """
    if not parts:
        raise InputError("no client answered the deletion")
    reweighted = [p.reweighted for p in parts if p.reweighted is not None]
    total_rw = reduce(add, reweighted) if reweighted else None
    return DeletionStatistics(
        removed_gradient=reduce(add, [p.removed_gradient for p in parts]),
        removed_rows=bk.concat([p.removed_rows for p in parts]),
        removed_curvature=bk.concat([p.removed_curvature for p in parts]),
        reweighted=total_rw,
        weight_change_l1=float(sum(p.weight_change_l1 for p in parts)),
        max_weight=float(max(p.max_weight for p in parts)),
    )
