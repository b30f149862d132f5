"""The ledger of answered request ids: what makes every request's effect happen once.

A request id is recorded with its outcome (``applied`` or ``rejected``) and the model version
it produced, in the same checkpoint as the model it changed. A request whose id is already in
the ledger changes nothing and is answered ``duplicate``, whether the first copy was applied or
rejected, in an earlier batch or earlier in the same one.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from simulator.stream import DeletionReceipt

#: (status, model version after the request) of an answered request.
Entry = tuple[str, int]


class Ledger:
    """Request id -> (status, model version) of every request answered so far.

    ``entries`` is used in place (not copied): the checkpointed state holds the same dict.
    """

    def __init__(self, entries: dict[str, Entry] | None = None) -> None:
        self._entries: dict[str, Entry] = {} if entries is None else entries

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def get(self, request_id: str) -> Entry | None:
        """The ledger entry of ``request_id``, or None if it was never answered."""
        return self._entries.get(request_id)

    def record(self, request_id: str, status: str, model_version: int) -> None:
        """Remember the outcome of a request answered for the first time."""
        if status not in ("applied", "rejected"):
            raise ValueError(f"only applied or rejected requests enter the ledger, got {status}")
        if request_id in self._entries:
            raise ValueError(f"request {request_id!r} is already in the ledger")
        self._entries[request_id] = (status, model_version)

    def entries(self) -> dict[str, Entry]:
        """The entries, for a checkpoint (the dict itself, not a copy)."""
        return self._entries

    def duplicate_receipt(
        self, request_id: str, *, model_version: int, now: datetime
    ) -> DeletionReceipt:
        """The ``duplicate`` receipt of a request id seen before; the model is unchanged."""
        status, version = self._entries[request_id]
        return DeletionReceipt(
            request_id=request_id,
            status="duplicate",
            reason=f"request id already {status} at model version {version}",
            model_version=model_version,
            applied_at=now,
        )
