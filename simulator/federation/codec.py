"""Protocol messages as flat dicts of numpy arrays, for transports that carry arrays by name.

:class:`~simulator.head.logistic.ShardStatistics` and
:class:`~simulator.head.data.DeletionStatistics` become ``{name: ndarray}`` and back, exactly
(float64 arrays, scalars as 0-d arrays, optional parts absent); a
:class:`~simulator.head.logistic.StatisticsRequest` becomes flags (scalars) and heads (arrays).
A transport maps these dicts to its own records (Flower's ``ConfigRecord`` and ``ArrayRecord``)
without knowing what they mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError
from simulator.head.data import DeletionStatistics
from simulator.head.logistic import ShardStatistics, StatisticsRequest

Arrays = dict[str, NDArray[Any]]


def _scalar(value: NDArray[Any]) -> float:
    """The single value of a 0-d (or one-element) array; transports may add a dimension."""
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise InputError(f"expected one value, got shape {np.shape(value)}")
    return float(flat[0])


def encode_request(request: StatisticsRequest) -> tuple[dict[str, bool], Arrays]:
    """A statistics request as flags ``hessian``, ``gram`` and heads ``W`` (and more).

    The optional heads are ``hessian_at`` and ``columns`` (the int64 column indices).

    The heads must already be numpy (:meth:`StatisticsRequest.moved_to` numpy).
    """
    flags = {"hessian": request.hessian, "gram": request.gram}
    heads: Arrays = {"W": request.W}
    if request.hessian_at is not None:
        heads["hessian_at"] = request.hessian_at
    if request.columns is not None:
        heads["columns"] = np.asarray(request.columns, dtype=np.int64)
    return flags, heads


def decode_request(
    flags: Mapping[str, Any], heads: Mapping[str, NDArray[Any]]
) -> StatisticsRequest:
    """Inverse of :func:`encode_request` (extra heads, such as ``W_ref``, are ignored)."""
    columns = heads.get("columns")
    if columns is not None and (columns.ndim != 1 or columns.dtype.kind not in "iu"):
        raise InputError(f"columns must be a row of integers, got {columns.dtype} {columns.shape}")
    return StatisticsRequest(
        heads["W"],
        hessian=bool(flags["hessian"]),
        gram=bool(flags["gram"]),
        hessian_at=heads.get("hessian_at"),
        columns=None if columns is None else tuple(int(c) for c in columns),
    )


def encode_statistics(stats: ShardStatistics, prefix: str = "") -> Arrays:
    """``ShardStatistics`` as arrays named ``prefix + field``."""
    out: Arrays = {
        f"{prefix}loss": np.asarray(stats.loss, dtype=np.float64),
        f"{prefix}gradient": np.asarray(stats.gradient, dtype=np.float64),
        f"{prefix}count": np.asarray(stats.count, dtype=np.int64),
    }
    if stats.hessian is not None:
        out[f"{prefix}hessian"] = np.asarray(stats.hessian, dtype=np.float64)
    if stats.gram is not None:
        out[f"{prefix}gram"] = np.asarray(stats.gram, dtype=np.float64)
    return out


def decode_statistics(arrays: Mapping[str, NDArray[Any]], prefix: str = "") -> ShardStatistics:
    """Inverse of :func:`encode_statistics`."""
    try:
        loss, grad, count = (arrays[f"{prefix}{k}"] for k in ("loss", "gradient", "count"))
    except KeyError as exc:
        raise InputError(f"statistics lack array {exc.args[0]!r}") from None
    hess = arrays.get(f"{prefix}hessian")
    gram = arrays.get(f"{prefix}gram")
    return ShardStatistics(
        loss=np.asarray(loss, dtype=np.float64),
        gradient=np.asarray(grad, dtype=np.float64),
        hessian=None if hess is None else np.asarray(hess, dtype=np.float64),
        gram=None if gram is None else np.asarray(gram, dtype=np.float64),
        count=int(_scalar(count)),
    )


def encode_deletion(stats: DeletionStatistics) -> Arrays:
    """``DeletionStatistics`` as arrays (the re-weighted part under ``rw_``)."""
    out: Arrays = {
        "removed_gradient": np.asarray(stats.removed_gradient, dtype=np.float64),
        "removed_rows": np.asarray(stats.removed_rows, dtype=np.float64),
        "removed_curvature": np.asarray(stats.removed_curvature, dtype=np.float64),
        "weight_change_l1": np.asarray(stats.weight_change_l1, dtype=np.float64),
        "max_weight": np.asarray(stats.max_weight, dtype=np.float64),
    }
    if stats.reweighted is not None:
        out.update(encode_statistics(stats.reweighted, prefix="rw_"))
    return out


def decode_deletion(arrays: Mapping[str, NDArray[Any]]) -> DeletionStatistics:
    """Inverse of :func:`encode_deletion`."""
    names = ("removed_gradient", "removed_rows", "removed_curvature", "weight_change_l1")
    missing = [k for k in (*names, "max_weight") if k not in arrays]
    if missing:
        raise InputError(f"deletion statistics lack arrays {missing}")
    reweighted = decode_statistics(arrays, prefix="rw_") if "rw_loss" in arrays else None
    curvature = np.asarray(arrays["removed_curvature"], dtype=np.float64)
    if not np.all(np.isfinite(curvature)) or np.any(curvature < 0):
        # a_j p (1 - p) >= 0: the head downdates with sqrt(curvature) (solver.downdate_rows)
        raise InputError("removed_curvature must be finite and non-negative")
    return DeletionStatistics(
        removed_gradient=np.asarray(arrays["removed_gradient"], dtype=np.float64),
        removed_rows=np.asarray(arrays["removed_rows"], dtype=np.float64),
        removed_curvature=curvature,
        reweighted=reweighted,
        weight_change_l1=_scalar(arrays["weight_change_l1"]),
        max_weight=_scalar(arrays["max_weight"]),
    )
