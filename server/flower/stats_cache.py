"""Fewer round trips for head statistics: per-client answers cached by the head they were for.

On the Deployment Engine a round trip costs seconds, whatever it carries. Training the head
asks, per Newton iteration, for the loss at a trial head and then for the Hessian at the same
head once the trial is accepted (``simulator/head/training.py``); after training, the removal
machinery asks for the gradient at the final head again. So:

* answers are cached per client, keyed by the exact bytes of ``W`` (and ``hessian_at``, and
  the columns asked for); a question is served from the cache when an answer for the same head
  has every part it needs (parts it did not ask for are dropped, so callers get exactly what
  they asked for);
* after a question with the Hessian, a question without it is sent *with* it (speculation):
  the accepted trial's Hessian then needs no second round trip;
* a client's entry is dropped when it deletes rows (its statistics changed).

Client answers are deterministic, so a cached answer is bit-identical to a fresh one: the head
does not depend on the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from simulator.head.logistic import ShardStatistics

FloatArray = NDArray[np.float64]


def head_key(
    W: FloatArray, hessian_at: FloatArray | None, columns: tuple[int, ...] | None = None
) -> bytes:
    """Exact identity of a question's head(s) and the columns it asks for."""
    parts = [(b"", np.asarray(W, dtype=np.float64))]
    if hessian_at is not None:
        parts.append((b"at", np.asarray(hessian_at, dtype=np.float64)))
    if columns is not None:
        parts.append((b"columns", np.asarray(columns, dtype=np.int64)))
    return b"|".join(
        tag + repr(p.shape).encode() + np.ascontiguousarray(p).tobytes() for tag, p in parts
    )


@dataclass
class StatisticsCache:
    """The last answer of every client, and whether to speculate on the Hessian."""

    entries: dict[int, tuple[bytes, ShardStatistics]]
    last_had_hessian: bool = False

    @classmethod
    def empty(cls) -> StatisticsCache:
        """A cache with no entries."""
        return cls({})

    def get(self, client: int, key: bytes, *, hessian: bool, gram: bool) -> ShardStatistics | None:
        """The cached statistics of ``client`` at ``key``, if they hold what is asked."""
        entry = self.entries.get(client)
        if entry is None or entry[0] != key:
            return None
        stats = entry[1]
        if (hessian and stats.hessian is None) or (gram and stats.gram is None):
            return None
        return replace(
            stats,
            hessian=stats.hessian if hessian else None,
            gram=stats.gram if gram else None,
        )

    def put(self, client: int, key: bytes, stats: ShardStatistics) -> None:
        """Cache the statistics ``stats`` of ``client`` at ``key``."""
        self.entries[client] = (key, stats)

    def drop(self, client: int) -> None:
        """Forget the cached statistics of ``client``."""
        self.entries.pop(client, None)

    def ask_hessian(self, hessian: bool) -> bool:
        """Whether to request the Hessian for a question that asked ``hessian``."""
        ask = hessian or self.last_had_hessian
        self.last_had_hessian = hessian
        return ask
