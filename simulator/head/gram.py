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

    def _folded(self) -> Array:
        """The current Gram matrix as a new array; nothing of this object is written.

        Pickling and ``state_dict`` run outside the head's methods (a checkpoint, a copy of
        the federation), where a torch head's inference tensors may not be written in place
        (``backend.TorchBackend.kernels_only``).
        """
        if self._rows.shape[0]:
            return self._base - self._rows.T @ self._rows
        return self._bk.copy(self._base)

    def __getstate__(self) -> dict[str, object]:
        """Pickle the folded matrix (checkpoints stay d x d, whatever is pending)."""
        d = self._base.shape[0]
        return {**self.__dict__, "_base": self._folded(), "_rows": self._bk.zeros((0, d))}

    def state_dict(self, *, host: bool = True) -> dict[str, Any]:
        """The folded matrix, as numpy (``host=False``: a copy on the backend's device)."""
        matrix = self._folded()
        return {"matrix": self._bk.to_numpy(matrix) if host else matrix}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Install :meth:`state_dict`'s matrix."""
        self._base = self._bk.asarray(np.asarray(state["matrix"], dtype=np.float64))
        self._rows = self._bk.zeros((0, self._base.shape[0]))

    def quadratic(self, U: Array) -> Array:
        """``u_k^T G u_k`` for every column ``u_k`` of U (d x K)."""
        out = (U * (self._base @ U)).sum(0)
        if self._rows.shape[0]:
            RU = self._rows @ U
            out = out - (RU * RU).sum(0)
        return out
