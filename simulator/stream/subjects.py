"""Who owns which rows: the ownership registry behind authorised deletions.

Every training row of a client belongs to one data subject. The registry is derived from the
scenario's data alone (no randomness): each client's rows, in increasing global id, are cut into
consecutive groups of ``rows_per_subject``; group ``k`` of client ``c`` is the subject
``subject-<c>-<k>`` (the last group of a client may be smaller). A client acts for itself as
``client-<c>``: only it may withdraw its whole shard.

A request is authorised when its ``subject`` owns every sample id it names (or, for a client
withdrawal, when the subject is that client). :meth:`SubjectRegistry.check` returns the reason
otherwise, starting with ``not_owner``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError
from simulator.stream.events import DeletionRequest

IntArray = NDArray[np.int64]

#: Prefix of every ownership refusal (receipts say ``not_owner: ...``).
NOT_OWNER = "not_owner"


def client_subject(client: int) -> str:
    """The subject a client acts as (the only one allowed to withdraw it)."""
    return f"client-{client}"


@dataclass(frozen=True)
class SubjectRegistry:
    """Sample id -> subject, for every row held by a client.

    Attributes
    ----------
    subject_of : (n,) subject index of every global sample id; -1 for rows no client holds
        (the public pool of a public extractor).
    names : name of every subject index.
    clients : client of every subject index.
    """

    subject_of: IntArray
    names: tuple[str, ...]
    clients: IntArray
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {name: i for i, name in enumerate(self.names)})

    def index(self, subject: str) -> int:
        """Index of a subject name; -1 when no such subject exists."""
        return self._index.get(subject, -1)

    def owner(self, sample_id: int) -> str | None:
        """Name of the subject that owns ``sample_id`` (None: nobody)."""
        if not 0 <= sample_id < self.subject_of.shape[0]:
            return None
        s = int(self.subject_of[sample_id])
        return self.names[s] if s >= 0 else None

    def rows(self, subject: str) -> IntArray:
        """Global ids of the rows ``subject`` owns (empty for an unknown subject)."""
        s = self.index(subject)
        if s < 0:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.subject_of == s).astype(np.int64)

    def check(self, request: DeletionRequest) -> str | None:
        """Why ``request`` is not authorised (``not_owner: ...``), or None when it is."""
        if request.client_id is not None:
            if request.subject != client_subject(request.client_id):
                return (
                    f"{NOT_OWNER}: only {client_subject(request.client_id)} may withdraw "
                    f"client {request.client_id}"
                )
            return None
        ids = np.asarray(request.sample_ids or [], dtype=np.int64)
        s = self.index(request.subject)
        inside = (ids >= 0) & (ids < self.subject_of.shape[0])
        owned = np.zeros(ids.shape, dtype=bool)
        owned[inside] = self.subject_of[ids[inside]] == s
        if s >= 0 and owned.all():
            return None
        foreign = ids[~owned][:10].tolist()
        return f"{NOT_OWNER}: subject does not own sample ids {foreign}"


def subject_registry(
    client_indices: Sequence[IntArray], num_rows: int, *, rows_per_subject: int
) -> SubjectRegistry:
    """The registry of a federation (see the module docstring).

    Parameters
    ----------
    client_indices : global row ids of every client's shard (disjoint).
    num_rows : number of global row ids (training rows, clients' or not).
    rows_per_subject : rows of one subject (>= 1); a client's last subject may hold fewer.

    Raises
    ------
    InputError
        A shard holds an id outside ``0..num_rows - 1``, repeats one or shares one with another.
    """
    if rows_per_subject < 1:
        raise InputError(f"rows_per_subject should be >= 1, got {rows_per_subject}")
    subject_of = np.full(num_rows, -1, dtype=np.int64)
    names: list[str] = []
    clients: list[int] = []
    for client, ids in enumerate(client_indices):
        order = np.sort(np.asarray(ids, dtype=np.int64))
        if order.size and (order[0] < 0 or order[-1] >= num_rows):
            raise InputError(f"client {client} holds row ids outside 0..{num_rows - 1}")
        if np.any(subject_of[order] >= 0) or np.unique(order).size != order.size:
            raise InputError(f"client {client} shares row ids with another client (or repeats)")
        groups = -(-order.size // rows_per_subject)
        local = np.arange(order.size, dtype=np.int64) // rows_per_subject
        subject_of[order] = len(names) + local
        names.extend(f"subject-{client}-{k}" for k in range(groups))
        clients.extend([client] * groups)
    return SubjectRegistry(subject_of, tuple(names), np.asarray(clients, dtype=np.int64))
