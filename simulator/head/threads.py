"""BLAS thread control for the small, memory-bound kernels of sequential removal.

On these 2-core machines OpenBLAS's threaded level-2 kernels (matrix-vector products,
triangular solves) run up to 20x *slower* than single-threaded ones (measured: a 1024 x 1024
float64 matvec takes 3.9 ms with 2 threads and 0.19 ms with 1). Large level-3 work (Hessian
sums, Cholesky factorisations) still gains from threads, so the limit is applied only around
the per-removal kernels, never globally.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import numpy as np  # noqa: F401  (threadpoolctl must see numpy's BLAS already loaded)


@cache
def _controller() -> Any:
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        return None
    return ThreadpoolController()


@cache
def _initial_threads() -> int | None:
    """BLAS threads before any limit of ours (read once, when the controller is created)."""
    controller = _controller()
    if controller is None:  # pragma: no cover
        return None
    counts = [int(info["num_threads"]) for info in controller.info() if info["user_api"] == "blas"]
    return max(counts) if counts else None


@contextmanager
def single_threaded_blas(enabled: bool = True) -> Iterator[None]:
    """Run the body with BLAS limited to one thread (a no-op when ``enabled`` is False)."""
    controller = _controller()
    if not enabled or controller is None:
        yield
        return
    _initial_threads()  # record the unlimited count before limiting
    with controller.limit(limits=1, user_api="blas"):
        yield


@contextmanager
def all_blas_threads() -> Iterator[None]:
    """Run the body with BLAS's initial thread count, also inside :func:`single_threaded_blas`
    (a retrain triggered by a single removal is level-3 work: Hessian builds)."""
    controller = _controller()
    threads = _initial_threads()
    if controller is None or threads is None:
        yield
        return
    with controller.limit(limits=threads, user_api="blas"):
        yield
