"""In-process clients answering in parallel: a :class:`ClientFanout` on a thread pool.

Real clients compute on their own machines at the same time; in process they run one after
another unless ``client_threads`` (a scenario key) asks for more. The clients' passes over
their rows are numpy products, which release the GIL, so on a machine with free cores the
exact passes of the certified head (every client's gradient at the new head) run side by side.
The answers are gathered in client order and summed by :class:`FederatedHeadData` as
before, so the result is bit-identical to the sequential one (``tests/test_client_threads.py``).

While the clients compute side by side, BLAS gets the machine's cores shared among them
(:func:`blas_threads_per_client`): each client's products with BLAS's own threads on top would
put ``workers x cores`` threads on the cores. Measured on the 2-core VM (the benchmark
workload's exact pass, 10 clients of 6,000 x 1,024 rows, K = 10, 2 workers, 12 passes
interleaved): median 235 ms, worst 348 ms with BLAS at 2 threads per client; 178 ms and 192 ms
with 1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from simulator.arrays import FloatArray
from simulator.head.data import DeletionStatistics, RowSource
from simulator.head.logistic import ShardStatistics, StatisticsRequest
from simulator.threads import blas_thread_count, thread_limits

T = TypeVar("T")


def blas_threads_per_client(
    workers: int, cores: int | None = None, current: int | None = None
) -> int:
    """BLAS threads for each of ``workers`` clients computing at once on ``cores`` cores.

    The cores shared out, at least one each (``cores`` defaults to ``os.cpu_count()``), and
    never more than the ``current`` count (a limit the process set, e.g. ``--blas-threads``).
    """
    available = cores if cores is not None else (os.cpu_count() or 1)
    share = max(1, available // max(1, workers))
    return share if current is None else max(1, min(share, current))


class ThreadFanout:
    """Send one protocol call to several in-process clients at once, on ``workers`` threads.

    Parameters
    ----------
    clients : client id -> channel (the live mapping: a client excluded later is not asked).
    workers : threads (at least 2; with 1 the federation asks one client after another).
    """

    def __init__(self, clients: Mapping[int, RowSource], workers: int) -> None:
        if workers < 2:
            raise ValueError(f"a thread fan-out needs at least 2 workers, got {workers}")
        self._clients = clients
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the pool (rebuilt when next needed)."""
        return {**self.__dict__, "_pool": None}

    def _map(self, calls: Mapping[int, Callable[[], T]]) -> dict[int, T]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="client")
        # BLAS's thread count is the process's: set while this thread waits for the answers
        share = blas_threads_per_client(min(self.workers, len(calls)), current=blas_thread_count())
        with thread_limits(blas=share):
            futures: dict[int, Future[T]] = {c: self._pool.submit(f) for c, f in calls.items()}
            wait(futures.values())  # every client done before any failure is raised
            return {c: future.result() for c, future in futures.items()}  # the first raises

    def statistics(
        self, clients: Sequence[int], request: StatisticsRequest
    ) -> dict[int, ShardStatistics]:
        """Each of ``clients``' statistics at ``request``, keyed by client id."""
        return self._map({c: _bind(self._clients[c].statistics, request) for c in clients})

    def delete(
        self, groups: Mapping[int, Sequence[int]], *, W: FloatArray, W_ref: FloatArray
    ) -> dict[int, DeletionStatistics]:
        """Delete ``groups[c]`` on each client ``c``; the removed rows' statistics by id."""
        return self._map(
            {c: _bind_delete(self._clients[c], ids, W, W_ref) for c, ids in groups.items()}
        )


def _bind(call: Callable[[StatisticsRequest], T], request: StatisticsRequest) -> Callable[[], T]:
    return lambda: call(request)


def _bind_delete(
    client: RowSource, ids: Sequence[int], W: FloatArray, W_ref: FloatArray
) -> Callable[[], DeletionStatistics]:
    return lambda: client.delete(ids, W=W, W_ref=W_ref)
