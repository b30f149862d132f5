"""The one way to limit threads: BLAS (numpy, through threadpoolctl) and torch's intra-op pool.

:func:`thread_limits` runs its body with the given counts and restores the previous ones.

* BLAS around the small, memory-bound kernels of sequential removal: on these 2-core machines
  OpenBLAS's threaded level-2 kernels (matrix-vector products, triangular solves) run up to 20x
  *slower* than single-threaded ones (measured: a 1024 x 1024 float64 matvec takes 3.9 ms with
  2 threads and 0.19 ms with 1). Large level-3 work (Hessian sums, Cholesky factorisations)
  still gains from threads, so :func:`single_threaded_blas` is applied only around the
  per-removal kernels, never globally, and :func:`all_blas_threads` restores the initial count
  inside it (a retrain triggered by a single removal is level-3 work).
* torch's intra-op pool around the same kernels when the head runs on torch (``head.backend:
  torch``): torch's CPU kernels do not go through threadpoolctl, so :func:`single_threaded_blas`
  also sets torch to one thread when torch is loaded, and :func:`all_blas_threads` gives back the
  count it had outside. Measured (1024 x 1024 float64, idle): ``cholesky_solve`` 2.2 ms with 2
  threads, 0.83 ms with 1. The full-size single removal on torch took 1.02 s against numpy's
  0.16 s under load before this limit; idle with it, 0.022 s on both (docs/benchmarks.md).
* torch for a comparison: the networks are small, and on the shared 2-core machines torch's
  default of two intra-op threads made a tiny MLP's Hessian-vector product about 20x slower
  than one thread (measured: 89 ms vs 4.3 ms under load), skewing the removal-time comparison
  towards whichever method ran while the other core was free (``compare --torch-threads``).
* BLAS for a whole Kafka consumer (``run --stream kafka --blas-threads N``).
* BLAS while in-process clients compute side by side (``client_threads``): each gets its share
  of the cores, never more than the count in force (``simulator/federation/threads.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
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


@cache
def _blas_libraries() -> tuple[Any, ...]:
    """The loaded BLAS libraries' threadpoolctl controllers (found once)."""
    controller = _controller()
    if controller is None:  # pragma: no cover
        return ()
    return tuple(lib for lib in controller.lib_controllers if lib.user_api == "blas")


@contextmanager
def _blas_threads(count: int) -> Iterator[None]:
    """Every BLAS library at ``count`` threads for the body, then as it was.

    Set directly on the libraries found once: threadpoolctl's ``limit`` looks them up on
    every call (85 us against 10 us here, per single removal).
    """
    libraries = _blas_libraries()
    previous = [lib.get_num_threads() for lib in libraries]
    for lib in libraries:
        lib.set_num_threads(count)
    try:
        yield
    finally:
        for lib, threads in zip(libraries, previous, strict=True):
            lib.set_num_threads(threads)


def blas_thread_count() -> int | None:
    """The BLAS thread count in force now (the largest over the loaded libraries; None: none)."""
    counts = [int(lib.get_num_threads()) for lib in _blas_libraries()]
    return max(counts) if counts else None


@contextmanager
def thread_limits(*, blas: int | None = None, torch: int | None = None) -> Iterator[None]:
    """Limit the BLAS and torch thread pools inside the block.

    Run the body with ``blas`` BLAS threads and ``torch`` intra-op threads (None: leave
    that pool as it is); both are restored afterwards.
    """
    with ExitStack() as stack:
        if blas is not None and _blas_libraries():
            _initial_threads()  # record the unlimited count before any limit
            stack.enter_context(_blas_threads(max(1, blas)))
        if torch is not None:
            import torch as torch_module  # only when asked: the head never needs torch

            previous = torch_module.get_num_threads()
            torch_module.set_num_threads(max(1, torch))
            stack.callback(torch_module.set_num_threads, previous)
        yield


#: torch's intra-op thread count outside each enclosing :func:`single_threaded_blas` (a stack)
_torch_outside: list[int] = []


def _loaded_torch() -> Any:
    """Torch if this process has imported it (the head's torch backend), else None."""
    return sys.modules.get("torch")


@contextmanager
def single_threaded_blas(enabled: bool = True) -> Iterator[None]:
    """BLAS, and torch's intra-op pool if torch is loaded, limited to one thread for the body.

    A no-op when ``enabled`` is False.
    """
    torch_module = _loaded_torch() if enabled else None
    if torch_module is not None:
        _torch_outside.append(int(torch_module.get_num_threads()))
    try:
        with thread_limits(blas=1 if enabled else None, torch=1 if torch_module else None):
            yield
    finally:
        if torch_module is not None:
            _torch_outside.pop()


def all_blas_threads() -> AbstractContextManager[None]:
    """BLAS's initial thread count for the body, also inside :func:`single_threaded_blas`.

    torch gets back the count it had outside the innermost :func:`single_threaded_blas` (left as
    it is outside any).
    """
    return thread_limits(
        blas=_initial_threads(), torch=_torch_outside[-1] if _torch_outside else None
    )
