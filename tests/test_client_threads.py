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
