"""The consumer's event records: one per batch, plus running totals (for logs and metrics).

Batch events use the in-process runner's keys where they overlap (``requests``, ``rejected``,
``samples``, ``removed_total``, the residuals, ``certificate``, ``timings``...), so the Prometheus
exporter reads both; Kafka adds ``records``, ``duplicates``, ``dead_letters`` (per kind),
``committed``, ``lag_requests`` and ``latency_seconds`` (request to receipt, per request).
"""

from __future__ import annotations

from typing import Any

from server.kafka.apply import BatchResult
from server.kafka.checkpoint import StreamState
from simulator.runner.loop import certificate_section, removal_fields, weight_reports
from simulator.runner.setup import Federation

COUNTERS = ("records", "applied", "rejected", "duplicates", "dead_letters", "samples", "batches")


def count_batch(counters: dict[str, int], records: int, result: BatchResult, dead: int) -> None:
    """Add one batch to the running counters (kept in the checkpoint)."""
    counters["records"] += records
    counters["applied"] += result.count("applied")
    counters["rejected"] += result.count("rejected")
    counters["duplicates"] += result.count("duplicate")
    counters["dead_letters"] += dead
    counters["samples"] += len(result.removed)
    counters["batches"] += 1


def totals(fed: Federation, state: StreamState) -> dict[str, Any]:
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
        "offsets": {str(p): o for p, o in sorted(state.offsets.items())},
    }


def batch_event(
    fed: Federation, state: StreamState, result: BatchResult, *, records: int, dead: dict[str, int]
) -> dict[str, Any]:
    """The ``deletion_batch`` record of the batch just applied (``state`` already updated)."""
    event: dict[str, Any] = {
        "event": "deletion_batch",
        "source": "kafka",
        "batch": state.batch,
        "records": records,
        "requests": records - sum(dead.values()),
        "applied": result.count("applied"),
        "rejected": result.count("rejected"),
        "duplicates": result.count("duplicate"),
        "dead_letters": dict(dead),
        "samples": len(result.removed),
        "removed_total": len(state.forgotten),
        "model_version": fed.head.model_version,
    }
    report = result.report
    if report is not None:
        routing = fed.head_data.last_routing
        event["clients"] = {str(k): v for k, v in sorted(routing.items())}
        event.update(removal_fields(report), certificate=certificate_section(fed, report))
        event["decorrelation"] = weight_reports(fed, sorted(routing))
    return event
