"""The extractor's limit: retrain the whole model when a DP extractor's group charge passes it.

Under ``extractor_data: dp`` the whole model's certificate is the head's plus the extractor's
group charge over the ``k`` rows removed since the extractor was trained
(:mod:`simulator.head.scope`)::

    part(k) = (k * epsilon_x,  k * exp((k - 1) * epsilon_x) * delta_x)

``model.dp.extractor_epsilon_limit`` bounds ``k * epsilon_x``; a group delta that makes the
bound vacuous (``delta_head + k e^((k-1) epsilon_x) delta_x >= 1``) passes every limit. A
batch of ``m`` rows whose ``part(rows_since + m)`` would pass it is not removed by a Newton
step: its rows leave the clients and the whole model is trained again from scratch on the
retained rows ``D'`` (:meth:`~simulator.runner.federation.Federation.retrain_extractor`:
DP-FedAvg with fresh accountants, the RFF map, every client's head rows; then the head, cold,
with a fresh perturbation), retrain reason :data:`EXTRACTOR_LIMIT`. The new extractor never
read a removed row, so ``k`` restarts at 0 and its ``epsilon_x`` is its own accountants'.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from simulator.arrays import IntArray
from simulator.head import CertifiedHead, RemovalReport
from simulator.methods import streaming_method
from simulator.runner.federation import Federation
from simulator.runner.run_state import RunState

#: The retrain reason of a whole-model retrain at the extractor's limit.
EXTRACTOR_LIMIT = "extractor_limit"


def passes_limit(fed: Federation, rows: int) -> bool:
    """Whether removing ``rows`` more rows would pass ``model.dp.extractor_epsilon_limit``.

    The extractor's part over every row removed since it was trained and the ``rows`` new
    ones (module docstring); False without a limit or without a DP extractor.
    """
    limit = fed.scenario.model.dp.extractor_epsilon_limit
    if limit is None or fed.extractor_guarantee is None:
        return False
    part = fed.certificate_scope(0.0, rows=fed.extractor.rows_since + rows)
    return part.total_epsilon is None or part.total_epsilon > limit


def remove_batch(fed: Federation, run: RunState, ids: Sequence[int]) -> RemovalReport:
    """Remove ``ids`` as the scenario's method does, or retrain the whole model at the limit.

    Raises
    ------
    ClientUnavailableError
        A client failed the removal (the caller recovers; nothing is counted here).
    """
    if passes_limit(fed, len(ids)):
        report = retrain_whole_model(fed, ids)
        if run.monitor is not None:
            run.monitor.rebase(run.batches + 1)
        return report
    report = streaming_method(fed.scenario.method).remove(fed.head, ids)
    fed.extractor.rows_since += len(ids)
    return report


def without(rows: IntArray, ids: Sequence[int]) -> IntArray:
    """``rows`` less ``ids``, in their order."""
    rows = np.asarray(rows, dtype=np.int64)
    return rows[~np.isin(rows, np.asarray(ids, dtype=np.int64))]


def retrain_whole_model(fed: Federation, ids: Sequence[int]) -> RemovalReport:
    """Delete ``ids`` by training extractor, RFF map, head rows and head from scratch on D'."""
    t0 = time.perf_counter()
    trained_on = {c: without(client.retained_ids, ids) for c, client in sorted(fed.clients.items())}
    fed.retrain_extractor(trained_on, fed.extractor.generation + 1)
    extractor_seconds = time.perf_counter() - t0
    head = fed.head
    head_seconds = cold_retrain(head, EXTRACTOR_LIMIT)
    head.removals += 1
    cumulative = head.cumulative_residual
    return RemovalReport(
        sample_ids=tuple(int(i) for i in ids),
        accounting=head.config.accounting,
        residual_worst=0.0,
        residual_data=0.0,
        residual_tight=0.0,
        residual_exact=cumulative,
        charged=0.0,
        cumulative=cumulative,
        budget=head.budget,
        budget_used_ratio=cumulative / head.budget,
        epsilon_spent=head.epsilon_spent,
        delta=head.config.delta,
        retrained=True,
        retrain_reason=EXTRACTOR_LIMIT,
        model_version=head.model_version,
        retained=head.data.retained_count,
        solver_iterations=0,
        retrain_iterations=head.last_fit_iterations,
        retrain_newton_iterations=head.last_fit_newton_iterations,
        timings={
            "extractor_retrain": extractor_seconds,
            "retrain": head_seconds,
            "total": time.perf_counter() - t0,
        },
    )


def cold_retrain(head: CertifiedHead, reason: str) -> float:
    """Train ``head`` from scratch (Newton from zero, fresh ``b``) on its data's rows; seconds.

    After the features changed, a warm start would precondition with the Hessian and keep
    the Gram matrix of the old features: the retrain is cold whatever ``head.retrain`` says.
    """
    warm = head.config
    head.config = replace(warm, retrain="cold")
    try:
        return head.retrain(reason)
    finally:
        head.config = warm
