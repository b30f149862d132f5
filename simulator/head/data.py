"""Where the head's rows live: the protocol the certified head talks to, and a local version.

The certified head never touches rows directly. It asks a :class:`HeadData` for sufficient
statistics (:mod:`simulator.head.logistic`) of all retained rows, of rows about to be removed,
and of the change in sample weights. :class:`LocalHeadData` keeps the rows in memory (one
party, tests, benchmarks); the federated server implements the same protocol by summing the
clients' answers, so the removal logic is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from simulator.arrays import FloatArray, IntArray
from simulator.errors import InputError
from simulator.head.backend import NUMPY, Array, Backend
from simulator.head.logistic import (
    ShardStatistics,
    StatisticsRequest,
    class_labels,
    head_columns,
    shard_statistics,
    sigmoid,
    signed_labels,
)


@dataclass(frozen=True)
class DeletionStatistics:
    """What a deletion changes in the objective, evaluated at the current head ``W``.

    The removed rows' Hessian contribution is sent in factored form (rows and per-class
    curvatures ``a_j p_jk (1 - p_jk)`` at the reference head) so the server can apply it as a
    low-rank downdate; it reveals nothing beyond the dense ``sum_j c_j x_j x_j^T`` of the very
    rows being deleted.

    Attributes
    ----------
    removed_gradient : (d, K) ``sum_j a_j l'_jk y_jk x_j`` of the removed rows at ``W``.
    removed_rows : (m, d) the removed rows.
    removed_curvature : (m, K) their curvature coefficients at the reference head.
    reweighted : statistics of the retained rows with weights ``a_new - a_old`` (gradient at
        ``W``, dense Hessian at the reference head), or None when the weights are fixed.
    weight_change_l1 : ``sum_i |a_new,i - a_old,i|`` over retained rows.
    max_weight : largest weight among removed and retained rows, old and new.
    """

    removed_gradient: FloatArray
    removed_rows: FloatArray
    removed_curvature: FloatArray
    reweighted: ShardStatistics | None
    weight_change_l1: float
    max_weight: float


class RowSource(Protocol):
    """Retained rows that answer with statistics: one client, or all of them summed."""

    @property
    def retained_count(self) -> int:
        """Number of retained rows."""
        ...

    def max_weight(self) -> float:
        """Largest sample weight of a retained row (``a_max`` of the bounds)."""
        ...

    def unknown_ids(self, ids: Sequence[int]) -> list[int]:
        """The ids of ``ids`` that are not retained rows (unknown or already deleted)."""
        ...

    def statistics(self, request: StatisticsRequest) -> ShardStatistics:
        """The statistics ``request`` asks for, summed over the retained rows."""
        ...

    def delete(self, ids: Sequence[int], *, W: FloatArray, W_ref: FloatArray) -> DeletionStatistics:
        """Delete the rows ``ids``; what that changes in the objective at ``W`` and ``W_ref``."""
        ...


class HeadData(RowSource, Protocol):
    """Access to the retained rows of the head's training set, with the head's shape."""

    @property
    def dim(self) -> int:
        """Feature dimension d."""
        ...

    @property
    def num_classes(self) -> int:
        """Number of classes K."""
        ...

    @property
    def columns(self) -> int:
        """Columns of the head (:func:`head_columns`: 1 when K = 2, else K)."""
        ...


class HeadShape:
    """The shape of the head a row source serves: ``dim`` d and ``num_classes`` K.

    Parameters
    ----------
    dim : feature dimension d.
    num_classes : K (the head has :func:`head_columns` columns).
    """

    def __init__(self, dim: int, num_classes: int) -> None:
        self._dim = int(dim)
        self._num_classes = int(num_classes)

    @property
    def dim(self) -> int:
        """Feature dimension d."""
        return self._dim

    @property
    def num_classes(self) -> int:
        """Number of classes K."""
        return self._num_classes

    @property
    def columns(self) -> int:
        """Columns of the head (:func:`head_columns`: 1 when K = 2, else K)."""
        return head_columns(self._num_classes)


class LocalHeadData(HeadShape):
    """Rows held in memory; deleted rows keep their place with weight 0 (no copies per removal).

    Parameters
    ----------
    X : (n, d) features, rows of norm <= 1 (see ``features.rff.clip_to_unit_ball``).
    y : (n,) integer labels in [0, K).
    num_classes : K.
    weights : (n,) positive sample weights (default all ones).
    reweigh : optional callback ``(retained_ids, retained_features, retained_labels) ->
        new_weights`` run after every deletion (DecoRemoval refits its decorrelation weights on
        the retained rows here; it is never shown the old weights).
    active : (n,) bool, rows still retained (default all); restores a saved state together
        with ``weights`` (see :attr:`base_weights`).
    backend : where the statistics are computed (:mod:`simulator.head.backend`; numpy by
        default). The rows are copied there once; statistics come back as that backend's
        arrays, and heads ``W`` of any backend are accepted.
    """

    def __init__(  # noqa: PLR0913 (constructor: the rows, then keyword-only options)
        self,
        X: FloatArray,
        y: IntArray,
        num_classes: int,
        *,
        weights: FloatArray | None = None,
        reweigh: Reweigher | None = None,
        active: NDArray[np.bool_] | None = None,
        backend: Backend = NUMPY,
    ) -> None:
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise InputError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
        if not np.all(np.isfinite(X)):
            raise InputError("features contain non-finite values")
        norms = np.linalg.norm(X, axis=1)
        if norms.size and norms.max() > 1.0 + 1e-9:
            raise InputError(f"rows must have norm <= 1 for the certificate, max is {norms.max()}")
        super().__init__(X.shape[1], num_classes)
        self._X = X
        self._Y = signed_labels(np.asarray(y, dtype=np.int64), num_classes)
        a = np.ones(X.shape[0]) if weights is None else np.array(weights, dtype=np.float64)
        if a.shape != (X.shape[0],) or not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise InputError("weights must be positive, finite and one per row")
        self._a = a
        if active is not None and np.shape(active) != (X.shape[0],):
            raise InputError(f"active must be one flag per row, got shape {np.shape(active)}")
        self._active = np.ones(X.shape[0], bool) if active is None else np.array(active, bool)
        self._retained = int(np.count_nonzero(self._active))  # read several times a removal
        self._reweigh = reweigh
        self.backend = backend
        self._Xb = backend.asarray(X)  # the same array for numpy
        self._Yb = backend.asarray(self._Y)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the rows once: a device copy is made again on unpickling."""
        return {**self.__dict__, "_Xb": None, "_Yb": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._retained = int(np.count_nonzero(self._active))  # absent from older pickles
        self._Xb = self.backend.asarray(self._X)
        self._Yb = self.backend.asarray(self._Y)

    @property
    def retained_count(self) -> int:
        """Number of retained rows."""
        return self._retained

    @property
    def retained_ids(self) -> IntArray:
        """Row indices of the retained rows."""
        return np.flatnonzero(self._active).astype(np.int64)

    @property
    def features(self) -> FloatArray:
        """All rows (retained and deleted), read-only view."""
        view = self._X.view()
        view.setflags(write=False)
        return view

    @property
    def labels(self) -> IntArray:
        """Class index of every row."""
        return class_labels(self._Y)

    @property
    def active(self) -> NDArray[np.bool_]:
        """Retained-row flags; a copy."""
        return self._active.copy()

    def state_dict(self) -> dict[str, Any]:
        """What deletions and re-weighting change: every row's weight and retained flag."""
        return {"weights": self._a.copy(), "active": self._active.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Install :meth:`state_dict`'s weights and flags (same rows).

        Raises
        ------
        InputError
            The arrays do not have one entry per row.
        """
        weights = np.asarray(state["weights"], dtype=np.float64)
        active = np.asarray(state["active"], dtype=bool)
        if weights.shape != self._a.shape or active.shape != self._active.shape:
            raise InputError(f"saved rows {weights.shape} != held rows {self._a.shape}")
        self._a = weights.copy()
        self._active = active.copy()
        self._retained = int(np.count_nonzero(self._active))

    @property
    def reweigh(self) -> Reweigher | None:
        """The re-weighting run after every deletion (None: the weights never change)."""
        return self._reweigh

    @property
    def base_weights(self) -> FloatArray:
        """Weights of every row, deleted rows keeping their last value; a copy."""
        return self._a.copy()

    @property
    def weights(self) -> FloatArray:
        """Current weights (0 for deleted rows); a copy."""
        return np.where(self._active, self._a, 0.0)

    def max_weight(self) -> float:
        """Largest weight of a retained row (0 when none is left)."""
        return float(self._a[self._active].max(initial=0.0))

    def unknown_ids(self, ids: Sequence[int]) -> list[int]:
        """The row indices of ``ids`` out of range or already deleted."""
        arr = np.asarray(ids, dtype=np.int64)
        bad = (arr < 0) | (arr >= self._X.shape[0])
        ok = ~bad
        bad[ok] = ~self._active[arr[ok]]
        return [int(i) for i in arr[bad]]

    def statistics(self, request: StatisticsRequest) -> ShardStatistics:
        """The statistics ``request`` asks for over the retained rows (the backend's arrays).

        Deleted rows count with weight 0; the Gram matrix is taken over the retained rows only.
        """
        bk = self.backend
        a = bk.asarray(self.weights)
        stats = shard_statistics(self._Xb, self._Yb, a, replace(request, gram=False))
        g = None
        if request.gram:
            Xa = bk.take_rows(self._Xb, self._active)
            g = bk.transposed_product(Xa, Xa)
        return ShardStatistics(stats.loss, stats.gradient, stats.hessian, g, self.retained_count)

    def delete(self, ids: Sequence[int], *, W: Array, W_ref: Array) -> DeletionStatistics:
        """Delete rows ``ids``, re-weigh the rest (when a callback is set); what that changes.

        The removed rows' gradient is taken at ``W``, their curvatures at ``W_ref``; the
        re-weighted rows' gradient at ``W`` and Hessian at ``W_ref``
        (:class:`DeletionStatistics`).
        """
        bk = self.backend
        work = bk.small_work  # numpy on the rows' memory where torch runs on the CPU
        idx = np.asarray(ids, dtype=np.int64)
        if work is bk:
            on_device = bk.index(idx)  # one upload for both (a synchronising copy on a GPU)
            Xr, Yr = bk.take_rows(self._Xb, on_device), bk.take_rows(self._Yb, on_device)
        else:
            Xr, Yr = self._X[idx], self._Y[idx]
        ar = work.asarray(self._a[idx])
        removed = shard_statistics(Xr, Yr, ar, StatisticsRequest(W))
        p = sigmoid(Yr * (Xr @ work.asarray(W_ref)))
        curvature = ar[:, None] * p * (1.0 - p)
        max_a = float(self._a[idx].max(initial=0.0))
        max_w = max(max_a, self.max_weight())
        self._active[idx] = False
        self._retained = int(np.count_nonzero(self._active))
        reweighted, l1 = None, 0.0
        if self._reweigh is not None:
            keep = self.retained_ids
            old = self._a[keep]
            new = np.asarray(
                self._reweigh(keep, self._X[keep], class_labels(self._Y[keep])), dtype=np.float64
            )
            if new.shape != old.shape or not np.all(np.isfinite(new)) or np.any(new <= 0):
                raise InputError("re-weighting returned invalid weights")
            diff = new - old
            changed = np.flatnonzero(diff != 0.0)
            rows = keep[changed]
            reweighted = shard_statistics(
                bk.take_rows(self._Xb, rows),
                bk.take_rows(self._Yb, rows),
                bk.asarray(diff[changed]),
                StatisticsRequest(W, hessian=True, hessian_at=W_ref),
            )
            l1 = float(np.abs(diff).sum())
            self._a[keep] = new
            max_w = max(max_w, float(new.max(initial=0.0)))
        gradient, Xr, curvature = (bk.asarray(x) for x in (removed.gradient, Xr, curvature))
        return DeletionStatistics(gradient, Xr, curvature, reweighted, l1, max_w)


class Reweigher(Protocol):
    """Recomputes sample weights of the retained rows after a deletion, from them alone.

    The weights must be a function of the retained rows (ids, features, labels) and fixed
    seeds: a from-scratch fit on ``D'`` is what the certificate compares with
    (``method.md`` section 2), so the callback is never shown the previous weights.
    """

    def __call__(
        self, retained_ids: IntArray, features: FloatArray, labels: IntArray
    ) -> FloatArray:
        """New weights (one per retained row, positive) from the retained rows alone."""
        ...
