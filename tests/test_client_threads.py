"""In-process clients on a thread pool (``client_threads``): the same run, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from support.kafka import apply_requests
from support.scenarios import TEN_CLIENTS, scenario

from simulator.errors import ConfigError
from simulator.federation.threads import ThreadFanout
from simulator.runner.federation import build_federation
from simulator.stream.ledger import Ledger


def streamed(threads: int) -> tuple[object, list[tuple[str, str, float]]]:
    """The federation after its whole stream, and every receipt (id, status, epsilon)."""
    fed = build_federation(
        scenario(TEN_CLIENTS, f"client_threads={threads}", "head.accounting=anchored")
    )
    ledger, receipts = Ledger(), []
    for i in range(0, len(fed.requests), 25):
        result = apply_requests(fed, ledger, fed.requests[i : i + 25])
        receipts += [(r.request_id, r.status, r.epsilon_spent) for r in result.receipts]
    return fed, receipts


def test_threaded_clients_give_the_sequential_run_bit_for_bit() -> None:
    one, receipts_one = streamed(1)
    two, receipts_two = streamed(2)
    assert receipts_two == receipts_one
    np.testing.assert_array_equal(two.head.W, one.head.W)
    assert two.head.retrains == one.head.retrains and two.head.removals == one.head.removals
    fanout = two.head_data._fanout
    assert isinstance(fanout, ThreadFanout) and fanout._pool is not None  # it did the asking
    assert one.head_data._fanout is None


def test_client_threads_are_refused_outside_the_in_process_transport() -> None:
    with pytest.raises(ConfigError, match="client_threads"):
        scenario(TEN_CLIENTS, "client_threads=2", "transport=flower-sim")


class _BlasProbe:
    """A client that answers with the BLAS thread count its products would run with."""

    def statistics(self, request: object) -> int:
        from threadpoolctl import threadpool_info

        return max(int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas")


def test_clients_side_by_side_share_the_cores_among_their_blas_threads() -> None:
    """Each of the clients computing at once gets its share of the cores for BLAS (each with
    BLAS's own threads on top would oversubscribe the cores); the count is restored after."""
    from threadpoolctl import threadpool_info

    from simulator.federation.threads import blas_threads_per_client
    from simulator.threads import blas_thread_count, thread_limits

    assert blas_threads_per_client(2, cores=2) == 1
    assert blas_threads_per_client(2, cores=8) == 4
    assert blas_threads_per_client(16, cores=2) == 1
    assert blas_threads_per_client(3, cores=8) == 2
    assert blas_threads_per_client(2, cores=16, current=1) == 1  # a process limit stays
    assert blas_threads_per_client(2, cores=16, current=4) == 4
    share = blas_threads_per_client(2)
    with thread_limits(blas=share + 1):  # a count other than the share, where BLAS allows it
        outside = blas_thread_count()
        fanout = ThreadFanout({c: _BlasProbe() for c in range(4)}, workers=2)
        seen = fanout.statistics([0, 1, 2, 3], request=None)  # type: ignore[arg-type]
        assert set(seen.values()) == {share}
        after = [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]
        assert max(after) == outside
