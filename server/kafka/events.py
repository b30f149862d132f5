"""The consumer's additions to the pipeline's batch events, and its running totals.

A batch's event is the one every path writes (:func:`simulator.runner.pipeline.apply_batch`:
requests, rejected, samples, the residuals, ``certificate``, ``metrics``, ``privacy``,
``drift``...); Kafka adds ``records``, ``dead_letters`` (per kind), ``unauthorised`` (per
reason: bad_signature, not_owner, rate_limited), ``committed``, ``lag_requests`` and
``latency_seconds`` measured from each record's broker timestamp to its receipt.
"""

from __future__ import annotations

from typing import Any

from server.kafka.checkpoint import ConsumerState
from simulator.runner.federation import Federation
from simulator.runner.pipeline import BatchOutcome

COUNTERS = (
    "records",
    "applied",
    "rejected",
    "duplicates",
    "dead_letters",
    "unauthorised",
    "samples",
    "batches",
    "offset_gaps",
    "skipped_records",
    "replayed_records",
)


def count_batch(counters: dict[str, int], records: int, result: BatchOutcome, dead: int) -> None:
    """Add one batch to the running counters.

    The counters are kept in the checkpoint; ``rejected`` includes the ``unauthorised`` ones.
    """
    counters["records"] += records
    counters["applied"] += result.count("applied")
    counters["rejected"] += result.count("rejected")
    counters["duplicates"] += result.count("duplicate")
    counters["dead_letters"] += dead
    counters["unauthorised"] += len(result.unauthorised)
    counters["samples"] += len(result.removed)
    counters["batches"] += 1


def totals(fed: Federation, state: ConsumerState) -> dict[str, Any]:
    """Counters and the head's state now."""
    head = fed.head
    return {
        **state.counters,
        "ledger": len(state.ledger),
        "model_version": head.model_version,
        "retrains": head.retrains,
        "epsilon_spent": head.epsilon_spent,
        "delta": head.config.delta,
        "accounting": head.config.accounting,
        "budget_used_ratio": head.cumulative_residual / head.budget,
        "retained": fed.head_data.retained_count,
        "held": len(state.pending),
        "batches_applied": state.run.batches,
        "removed_total": len(state.run.forgotten),
        "sessions": state.sessions,
        "offsets": {str(p): o for p, o in sorted(state.offsets.items())},
    }


def kafka_fields(
    state: ConsumerState, *, records: int, dead: dict[str, int], unauthorised: dict[str, int]
) -> dict[str, Any]:
    """What the consumer adds to the batch's event (``state`` already updated)."""
    return {
        "source": "kafka",
        "consumer_batch": state.batch,
        "records": records,
        "dead_letters": dict(dead),
        "unauthorised": dict(unauthorised),
        "held": len(state.pending),
    }
