"""Flower-backed clients for the runner: proxies with a mirror, and the parallel fan-out.

:class:`FlowerClientChannel` answers the client protocol for one partition by sending
messages through the :class:`~server.flower.fleet.Fleet`. Which of its rows are still retained
is mirrored on the server (every deletion goes through the server, and the mirror changes only
on the client's confirmation), so validation (``unknown_ids``), routing and counts need no
round trip. :class:`FlowerFanout` sends head statistics and deletions to all the clients of
one call in a single round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
from flwr.app import ConfigRecord, RecordDict
from numpy.typing import NDArray

from clients import protocol as rec
from server.flower.fleet import Exchange, Request
from server.flower.stats_cache import StatisticsCache, head_key
from simulator.errors import ClientUnavailableError
from simulator.federation import WeightReport
from simulator.federation.codec import decode_deletion, decode_statistics, encode_request
from simulator.head.data import DeletionStatistics
from simulator.head.logistic import ShardStatistics, StatisticsRequest


class ClientLink(Protocol):
    """The transport as its channels see it.

    What the channels need from the transport that owns them (it implements this; the
    channels never import it, so the two modules do not depend on each other).
    """

    wants_weights: bool

    @property
    def fanout(self) -> FlowerFanout:
        """The fan-out that sends one question to many clients."""
        ...

    def channel(self, client_id: int) -> FlowerClientChannel:
        """The channel of client ``client_id``."""
        ...

    def send(
        self, requests: Mapping[int, Request], *, repeatable: bool, train: bool = False
    ) -> Exchange:
        """Send one message per client and wait for the replies."""
        ...

    def refresh_weights(self) -> None:
        """Fetch the current weights of every stale client in one round trip."""
        ...


FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class WeightsView:
    """A client's row weights (0 when deleted) and its retained local row indices."""

    weights: FloatArray
    retained_ids: IntArray


def row_weights(arrays: Mapping[str, Mapping[str, NDArray[Any]]]) -> FloatArray | None:
    """The row weights a reply carried, if any."""
    group = arrays.get(rec.ROW_WEIGHTS)
    return None if group is None else np.asarray(group["weights"], dtype=np.float64)


def weight_report(reply: ConfigRecord) -> WeightReport | None:
    """The weight spread a client reported (``w_*`` entries), if any."""
    spread = {k[2:]: rec.get_number(reply, k) for k in reply if k.startswith("w_")}
    return WeightReport.from_flat(spread) if spread else None


class FlowerClientChannel:
    """One remote client, as :class:`~simulator.runner.transport.RunnerClient`.

    Parameters
    ----------
    transport : the Flower transport that sends the messages.
    client_id : partition id.
    rows : global ids of the client's rows (the server's ``split_clients``).
    status : the client's ``train.setup`` reply (retained count, max weight, weight spread).
    weights : its row weights, when the setup reply carried them.
    """

    def __init__(
        self,
        transport: ClientLink,
        client_id: int,
        rows: IntArray,
        status: ConfigRecord,
        weights: FloatArray | None = None,
    ) -> None:
        self._transport = transport
        self.client_id = client_id
        self._rows = np.asarray(rows, dtype=np.int64)
        self._local = {int(g): i for i, g in enumerate(self._rows)}
        self._active = np.ones(self._rows.size, dtype=bool)
        self._max_weight = rec.get_number(status, "max-weight", 0.0)
        self.last_weights = weight_report(status)
        self._view: WeightsView | None = None
        if weights is not None:
            self.set_weights(weights)

    # ------------------------------------------------------------ mirror
    @property
    def retained_ids(self) -> IntArray:
        """Global ids of the client's retained rows."""
        return self._rows[self._active]

    @property
    def retained_count(self) -> int:
        """Number of retained rows."""
        return int(self._active.sum())

    def max_weight(self) -> float:
        """Largest weight of a retained row, as last reported."""
        return self._max_weight

    def unknown_ids(self, ids: Sequence[int]) -> list[int]:
        """The ids of ``ids`` that this client does not hold (unknown or already deleted)."""
        out = []
        for i in ids:
            local = self._local.get(int(i))
            if local is None or not self._active[local]:
                out.append(int(i))
        return out

    def confirm_deletion(
        self, ids: Sequence[int], status: ConfigRecord, weights: FloatArray | None = None
    ) -> str | None:
        """The client deleted ``ids``: update the mirror; returns a disagreement, if any.

        ``weights``: its new row weights, when the reply carried them (else they are stale).
        """
        self._active[[self._local[int(i)] for i in ids]] = False
        self._max_weight = rec.get_number(status, "max-weight", self._max_weight)
        self.last_weights = weight_report(status) or self.last_weights
        self._view = None
        if weights is not None:
            self.set_weights(weights)
        reported = rec.get_int(status, "retained")
        if reported != self.retained_count:
            return f"reports {reported} retained rows, the server expects {self.retained_count}"
        return None

    # ------------------------------------------------------------ round trips
    def statistics(self, request: StatisticsRequest) -> ShardStatistics:
        """Head statistics of this client's rows (one round trip, cached).

        See :meth:`FlowerFanout.statistics`.
        """
        return self._transport.fanout.statistics([self.client_id], request)[self.client_id]

    def delete(self, ids: Sequence[int], *, W: FloatArray, W_ref: FloatArray) -> DeletionStatistics:
        """Delete ``ids`` on the client and return the statistics of the removed rows."""
        return self._transport.fanout.delete({self.client_id: ids}, W=W, W_ref=W_ref)[
            self.client_id
        ]

    @property
    def data(self) -> WeightsView:
        """Current weights (one ``query.weights`` round trip for every stale client)."""
        if self._view is None:
            self._transport.refresh_weights()
        assert self._view is not None
        return self._view

    def set_weights(self, weights: FloatArray) -> None:
        """Cache the client's reported ``weights`` (one per local row, 0 when deleted)."""
        self._view = WeightsView(weights, np.flatnonzero(self._active).astype(np.int64))

    @property
    def stale(self) -> bool:
        """Whether the cached weights must be fetched again."""
        return self._view is None

    def retained_weights(self) -> tuple[IntArray, FloatArray]:
        """Global ids of the retained rows and their current weights."""
        view = self.data
        return self._rows[view.retained_ids], view.weights[view.retained_ids]


class FlowerFanout:
    """Head statistics and deletions for many clients in one round trip (with a cache)."""

    def __init__(self, transport: ClientLink) -> None:
        self._transport = transport
        self.cache = StatisticsCache.empty()

    def statistics(
        self, clients: Sequence[int], request: StatisticsRequest
    ) -> dict[int, ShardStatistics]:
        """Head statistics of several clients in one round trip.

        Clients whose answer at the same ``W`` / ``hessian_at`` is cached are not asked again.
        The caller sums the answers: the data terms of the head's loss (Guo et al. ICML 2020,
        eq. 1) are sums over rows, hence over the clients' disjoint shards.

        Parameters
        ----------
        clients : client ids to ask.
        request : the head (numpy) and the optional terms to return.

        Returns
        -------
        dict
            Client id -> its :class:`ShardStatistics`.
        """
        key = head_key(request.W, request.hessian_at, request.columns)
        # the cache may ask for more than the caller did (the Hessian, to serve a later call)
        asked = replace(request, hessian=self.cache.ask_hessian(request.hessian))
        out: dict[int, ShardStatistics] = {}
        for c in clients:
            hit = self.cache.get(c, key, hessian=request.hessian, gram=request.gram)
            if hit is not None:
                out[c] = hit
        missing = [c for c in clients if c not in out]
        if not missing:
            return out
        flags, heads = encode_request(asked)

        def content() -> RecordDict:
            return rec.content(flags, {rec.HEAD: heads})

        ex = self._transport.send({c: (rec.STATISTICS, content) for c in missing}, repeatable=True)
        if ex.failures:
            raise ClientUnavailableError(ex.failures, "head statistics")
        for c, reply in ex.replies.items():
            stats = decode_statistics(rec.arrays_of(reply)[rec.RESULT])
            self.cache.put(c, key, stats)
            answer = self.cache.get(c, key, hessian=request.hessian, gram=request.gram)
            assert answer is not None
            out[c] = answer
        return out

    def seed(self, client: int, W: FloatArray, stats: ShardStatistics) -> None:
        """An answer the client sent unasked (``train.setup`` prefetches the first one)."""
        self.cache.put(client, head_key(W, None), stats)

    def delete(
        self, groups: Mapping[int, Sequence[int]], *, W: FloatArray, W_ref: FloatArray
    ) -> dict[int, DeletionStatistics]:
        """Delete rows on several clients in one round trip.

        Parameters
        ----------
        groups : client id -> the global ids to delete there.
        W, W_ref : head weights before the deletion and the reference head.

        Returns
        -------
        dict
            Client id -> the statistics of the rows it removed.
        """
        want = {"weights": self._transport.wants_weights}

        def content(ids: Sequence[int]) -> Callable[[], RecordDict]:
            arrays: dict[str, dict[str, NDArray[Any]]] = {
                rec.IDS: {"ids": np.asarray(ids, dtype=np.int64)},
                rec.HEAD: {"W": W, "W_ref": W_ref},
            }
            return lambda: rec.content(want, arrays)

        requests = {c: (rec.UNLEARN, content(ids)) for c, ids in groups.items()}
        self.cache.last_had_hessian = False
        for c in groups:
            self.cache.drop(c)
        ex = self._transport.send(requests, repeatable=False)
        out: dict[int, DeletionStatistics] = {}
        failures = dict(ex.failures)
        for c, reply in sorted(ex.replies.items()):
            arrays = rec.arrays_of(reply)
            problem = self._transport.channel(c).confirm_deletion(
                groups[c], rec.config_of(reply), row_weights(arrays)
            )
            if problem is not None:
                failures[c] = problem
            out[c] = decode_deletion(arrays[rec.RESULT])
        if failures:
            raise ClientUnavailableError(failures, "deletion")
        return out
