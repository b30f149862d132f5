"""The Gram matrix ``X'^T X'`` of the retained rows, downdated lazily.

The data-dependent bound (Guo et al. 2020, Thm. 2; ``docs/certified-head.md``) needs
``||X' u_k||^2 = u_k^T (X'^T X') u_k`` for each class's Newton step ``u_k``. Subtracting each
removed row's outer product from a d x d matrix costs a full pass over it per removal (3.7 ms at
d = 1,024 here, 7% of a single removal), so removed rows are kept aside and subtracted inside
the quadratic form, ``u^T G u - ||R u||^2``, until ``max_pending`` of them have piled up.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.head.backend import Array, Backend, backend_of


class GramMatrix:
    """``G = base - R^T R``, the retained rows' ``X^T X``, with removed rows ``R`` pending.

    The rows stay pending until folded, in the backend of ``base`` unless ``backend`` is given
    (:mod:`simulator.head.backend`).
    """

    def __init__(self, base: Array, *, max_pending: int = 256, backend: Backend | None = None):
        self._bk = backend_of(base) if backend is None else backend
        self._base = self._bk.copy(base)
        self._rows = self._bk.zeros((0, self._base.shape[0]))
        self.max_pending = max_pending

    def downdate(self, rows: Array) -> None:
        """Remove rows (m x d) from the Gram matrix."""
        self._rows = self._bk.concat([self._rows, self._bk.asarray(rows)])
        if self._rows.shape[0] > self.max_pending:
            self.matrix()

    def matrix(self) -> Array:
        """The current Gram matrix (folds the pending rows in)."""
        if self._rows.shape[0]:
            self._base -= self._rows.T @ self._rows
            self._rows = self._bk.zeros((0, self._base.shape[0]))
        return self._base

    def state_dict(self, *, host: bool = True) -> dict[str, Any]:
        """The base and the pending rows as they are (``host=False``: copies on the device).

        Not the folded matrix: ``u^T base u - ||R u||^2`` and ``u^T (base - R^T R) u`` differ in
        their last bits, and so would every bound computed after a restore (a replayed batch
        must charge what the original charged, bit for bit: ``server/kafka/checkpoint.py``).
        """
        bk = self._bk
        base = bk.copy(self._base)  # folds write into the base
        if not host:
            return {"base": base, "rows": self._rows}  # the rows are replaced, never written
        return {"base": bk.to_numpy(base), "rows": bk.to_numpy(self._rows)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Install :meth:`state_dict`'s base and pending rows (or a folded ``matrix``)."""
        bk = self._bk
        if "matrix" in state:  # written before the pending rows were kept
            self._base = bk.asarray(np.asarray(state["matrix"], dtype=np.float64))
            self._rows = bk.zeros((0, self._base.shape[0]))
            return
        self._base = bk.copy(np.asarray(state["base"], dtype=np.float64))
        d = int(self._base.shape[0])
        self._rows = bk.asarray(np.asarray(state["rows"], dtype=np.float64).reshape(-1, d))

    def quadratic(self, U: Array) -> Array:
        """``u_k^T G u_k`` for every column ``u_k`` of U (d x K)."""
        out = (U * (self._base @ U)).sum(0)
        if self._rows.shape[0]:
            RU = self._rows @ U
            out = out - (RU * RU).sum(0)
        return out
