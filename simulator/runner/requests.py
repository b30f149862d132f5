"""Which rows a batch of deletion requests names, for every path (run, Kafka, Flower, compare).

:func:`expand` is the one validation of a batch: a client withdrawal names the client's retained
rows not already named earlier in the batch; a sample request naming an unknown, already
deleted or already named id is rejected whole (nothing of it is deleted), with the reason. It
reads who holds what through :class:`Holdings`: the federation's clients
(:class:`FederationHoldings`) or, for ``compare``, an owner per row and a retained mask
(:class:`RowHoldings`), so ``run`` and ``compare`` delete the same ids for the same stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.typing import NDArray

from simulator.errors import UnknownSampleError
from simulator.stream import DeletionRequest

if TYPE_CHECKING:
    from simulator.runner.federation import Federation

IntArray = NDArray[np.int64]


class Holdings(Protocol):
    """Who holds which retained rows."""

    def client_rows(self, client: int) -> list[int] | None:
        """The client's retained row ids, in order (None: no such client)."""

    def unknown_ids(self, ids: Sequence[int]) -> list[int]:
        """The ids of ``ids`` that are not retained (unknown or already deleted)."""

    def route(self, ids: Sequence[int]) -> dict[int, list[int]]:
        """``ids`` grouped by owning client."""


class FederationHoldings:
    """The federation's live clients and its head's retained rows."""

    def __init__(self, fed: Federation) -> None:
        self.fed = fed

    def client_rows(self, client: int) -> list[int] | None:
        """Retained ids of ``client``, or None when there is no such client."""
        found = self.fed.clients.get(client)
        return None if found is None else [int(i) for i in found.retained_ids]

    def unknown_ids(self, ids: Sequence[int]) -> list[int]:
        """The ids of ``ids`` that no client holds."""
        return list(self.fed.head_data.unknown_ids(list(ids)))

    def route(self, ids: Sequence[int]) -> dict[int, list[int]]:
        """Group ``ids`` by owning client (-1: no owner)."""
        return {int(c): [int(i) for i in g] for c, g in self.fed.head_data.route(ids).items()}


class RowHoldings:
    """An owner per row (``groups[i]``) and a retained mask; :meth:`delete` updates it."""

    def __init__(self, groups: IntArray, clients: Sequence[int]) -> None:
        self.groups = np.asarray(groups, dtype=np.int64)
        self.retained = np.ones(self.groups.size, dtype=bool)
        self.clients = {int(c) for c in clients}

    def client_rows(self, client: int) -> list[int] | None:
        """Retained rows of ``client``, or None when there is no such client."""
        if client not in self.clients:
            return None
        return [int(i) for i in np.flatnonzero((self.groups == client) & self.retained)]

    def unknown_ids(self, ids: Sequence[int]) -> list[int]:
        """The ids of ``ids`` out of range, already deleted or of a group no client is.

        A row of a group that is no client (``compare``'s public pool) is unknown, as no client
        of a federation holds it.
        """
        n = self.groups.size
        return [
            int(i)
            for i in ids
            if not 0 <= int(i) < n
            or not self.retained[int(i)]
            or int(self.groups[int(i)]) not in self.clients
        ]

    def route(self, ids: Sequence[int]) -> dict[int, list[int]]:
        """Group ``ids`` by owning client (an id outside the rows: UnknownSampleError)."""
        n = self.groups.size
        outside = [int(i) for i in ids if not 0 <= int(i) < n]
        if outside:
            raise UnknownSampleError(outside, f"rows 0..{n - 1}")
        out: dict[int, list[int]] = {}
        for i in ids:
            out.setdefault(int(self.groups[int(i)]), []).append(int(i))
        return out

    def delete(self, ids: Sequence[int]) -> None:
        """Mark ``ids`` deleted."""
        self.retained[np.asarray(ids, dtype=np.int64)] = False


def expand(
    holdings: Holdings, batch: Sequence[DeletionRequest]
) -> tuple[list[int], dict[str, str]]:
    """Sample ids a batch deletes, in request order, and the rejected requests' reasons.

    A client withdrawal deletes the client's retained rows not already named earlier in the
    batch; a sample request naming an unknown, already deleted or already named id is rejected
    whole (nothing of it is deleted).
    """
    ids: list[int] = []
    rejected: dict[str, str] = {}
    seen: set[int] = set()
    named = [int(i) for req in batch if req.client_id is None for i in req.sample_ids or []]
    unknown = set(holdings.unknown_ids(named))  # one look-up for the batch, not per request
    for req in batch:
        if req.client_id is not None:
            rows = holdings.client_rows(req.client_id)
            if rows is None:
                rejected[req.request_id] = f"unknown client {req.client_id}"
                continue
            wanted = [i for i in rows if i not in seen]
        else:
            wanted = [int(i) for i in req.sample_ids or []]
            bad = [i for i in wanted if i in unknown] or [i for i in wanted if i in seen]
            if bad:
                rejected[req.request_id] = f"unknown or already deleted sample ids: {bad[:5]}"
                continue
        seen.update(wanted)
        ids.extend(wanted)
    return ids, rejected


def hold_small(
    holdings: Holdings,
    fresh: Sequence[DeletionRequest],
    rejected: Mapping[str, str],
    min_rows: int,
) -> tuple[list[int], set[str]]:
    """Split the fresh requests into ids to remove now and requests held.

    The ids to remove now, and the request ids held: those of a client whose rows in this
    batch are fewer than ``min_rows`` (``--min-removal-batch``; a withdrawal releases its
    client, and is never held).
    """
    leaving = {r.client_id for r in fresh if r.client_id is not None}
    owners: dict[str, set[int]] = {}
    sizes: dict[str, dict[int, int]] = {}
    for req in fresh:
        if req.request_id in rejected:
            continue
        if req.client_id is not None:
            owners[req.request_id] = {req.client_id}
            sizes[req.request_id] = {}
            continue
        groups = holdings.route(req.sample_ids or [])
        owners[req.request_id] = set(groups)
        sizes[req.request_id] = {c: len(g) for c, g in groups.items()}
    held: set[str] = set()
    while True:  # holding a request can leave another client short: repeat until stable
        rows: dict[int, int] = {}
        for rid, per_client in sizes.items():
            if rid not in held:
                for client, n in per_client.items():
                    rows[client] = rows.get(client, 0) + n
        short = {c for c, n in rows.items() if n < min_rows and c not in leaving}
        now_held = held | {rid for rid, clients in owners.items() if clients & short}
        if now_held == held:
            break
        held = now_held
    kept = [r for r in fresh if r.request_id in owners and r.request_id not in held]
    ids, _ = expand(holdings, kept)
    return ids, held


def wanted_ids(holdings: Holdings, req: DeletionRequest) -> list[int]:
    """The rows ``req`` names now (a withdrawal: the client's retained rows)."""
    if req.client_id is not None:
        return holdings.client_rows(req.client_id) or []
    return [int(i) for i in req.sample_ids or []]
