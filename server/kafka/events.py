"""The consumer's additions to the pipeline's batch events, and its running totals.

A batch's event is the one every path writes (:func:`simulator.runner.pipeline.apply_batch`:
requests, rejected, samples, the residuals, ``certificate``, ``metrics``, ``privacy``,
``drift``...); Kafka adds ``records``, ``dead_letters`` (per kind), ``unauthorised`` (per
reason: bad_signature, not_owner, rate_limited), ``committed``, ``lag_requests`` and
``latency_seconds`` measured from each record's broker timestamp to its receipt.
"""

from __future__ import annotations

import json
from typing import Any

from server.kafka.checkpoint import ConsumerState
from simulator.reporting.run_report import json_safe
from simulator.runner.federation import Federation
from simulator.runner.pipeline import BatchOutcome
from simulator.runner.recorder import RunRecorder
from simulator.stream import DeletionReceipt

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
        **fed.scope_fields(head.epsilon_spent),
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


def batch_record(
    result: BatchOutcome,
    state: ConsumerState,
    records: int,
    dead: dict[str, int],
    unauthorised: dict[str, int],
) -> str:
    """The batch's event as the checkpoint keeps it (JSON; ``state`` already updated).

    What is known before the checkpoint is written: the pipeline's event and
    :func:`kafka_fields`, marked ``recovered`` (:func:`recover_batch` writes it only when the
    process died before the run folder got the full event).
    """
    event = {
        **result.event,
        **kafka_fields(state, records=records, dead=dead, unauthorised=unauthorised),
        "recovered": True,
    }
    return json.dumps(json_safe(event), sort_keys=True)


def recover_batch(recorder: RunRecorder, state: ConsumerState, receipts_topic: str) -> bool:
    """Write the checkpoint's last batch into the run folder when a crash kept it out.

    The checkpoint holds the last batch's event (:func:`batch_record`) and receipts (the
    outbox); the run folder is written after the checkpoint, so a process killed between the
    two left the batch out of ``events.jsonl`` and ``receipts.jsonl``. Appends what is missing,
    never a line twice (:meth:`~simulator.runner.recorder.RunRecorder.recover`); whether
    anything was appended.
    """
    if not state.batch_event:
        return False
    receipts = [
        DeletionReceipt.from_json(r.value) for r in state.outbox if r.topic == receipts_topic
    ]
    return recorder.recover(json.loads(state.batch_event), receipts, key="consumer_batch")
