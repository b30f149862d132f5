"""One micro-batch of requests becomes one certified removal and one receipt per request.

Requests whose id is in the ledger (or earlier in the same batch) are answered ``duplicate``
and change nothing. The others are validated as the in-process runner does
(:func:`simulator.runner.loop.expand`: unknown client, unknown or already deleted sample ids are
rejected with the reason), with one difference: a micro-batch can span scenario ticks, so a
client withdrawal takes whatever the client still holds after the requests before it in the
same batch (in-process batches never hold both). The accepted ids are routed to their owning
clients and removed by a single :meth:`~simulator.head.CertifiedHead.remove` (a certified Newton
step, or a retrain when the budget would be exceeded), the paper's batch removal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from server.kafka.ledger import Ledger
from simulator.head import RemovalReport
from simulator.runner.loop import expand, receipt
from simulator.runner.setup import Federation
from simulator.stream import DeletionReceipt, DeletionRequest


@dataclass
class BatchResult:
    """Receipts aligned with the batch's requests, and what the removal did."""

    receipts: list[DeletionReceipt]
    removed: list[int] = field(default_factory=list)
    report: RemovalReport | None = None

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.receipts)


def apply_requests(
    fed: Federation,
    ledger: Ledger,
    requests: Sequence[DeletionRequest],
    *,
    now: datetime | None = None,
) -> BatchResult:
    """Answer every request of a micro-batch; fresh ones enter the ledger.

    Parameters
    ----------
    fed : the federation whose head and clients change.
    ledger : answered request ids (updated in place).
    requests : the micro-batch, in topic order.
    now : the decision time written into every receipt (``applied_at``); default: the time
        the removal finished.

    Raises
    ------
    NumericalError
        The removal failed; the federation may be half changed and must be discarded (the
        consumer exits and restarts from its last checkpoint).
    """
    fresh: list[DeletionRequest] = []
    batch_ids: set[str] = set()
    for req in requests:
        if req.request_id not in ledger and req.request_id not in batch_ids:
            fresh.append(req)
            batch_ids.add(req.request_id)
    ids, rejected = expand(fed, fresh)
    report = None
    if ids:
        report = fed.head.remove(ids, retrain=fed.scenario.method == "retrain")
    now = now or datetime.now(UTC)
    head = fed.head
    version = head.model_version
    outcome: dict[str, DeletionReceipt] = {}
    for req in fresh:
        reason = rejected.get(req.request_id)
        outcome[req.request_id] = receipt(req, reason, head, report, now)
        ledger.record(req.request_id, "rejected" if reason else "applied", version)
    receipts: list[DeletionReceipt] = []
    for req in requests:
        first = outcome.pop(req.request_id, None)
        if first is not None:
            receipts.append(first)
        else:
            receipts.append(
                ledger.duplicate_receipt(req.request_id, model_version=version, now=now)
            )
    return BatchResult(receipts, ids, report)
