"""One micro-batch of requests becomes one certified removal and one receipt per request.

Requests the consumer refused before (``denied``: a bad signature, a subject that does not own
the rows, a subject over its rate limit; :mod:`server.kafka.gate`) are answered ``rejected``
with that reason and do not enter the ledger, so a forged copy cannot block the genuine request
with the same id. Requests whose id is in the ledger (or earlier in the same batch) are
answered ``duplicate`` and change nothing. The others are validated as the in-process runner does
(:func:`simulator.runner.loop.expand`: unknown client, unknown or already deleted sample ids are
rejected with the reason), with one difference: a micro-batch can span scenario ticks, so a
client withdrawal takes whatever the client still holds after the requests before it in the
same batch (in-process batches never hold both). The accepted ids are routed to their owning
clients and removed by a single :meth:`~simulator.head.CertifiedHead.remove` (a certified Newton
step, or a retrain when the budget would be exceeded), the paper's batch removal.

With ``min_rows`` > 1 (``--min-removal-batch``), a client's removal message must cover at least
that many rows (docs/security.md: what the server learns). Accepted requests of a client with
fewer rows requested in the batch are *held*: not applied, not answered, returned to the caller,
who puts them first in the next batch (they are answered when their client's rows add up).
A client withdrawal is never held.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from server.kafka.ledger import Ledger
from simulator.head import RemovalReport
from simulator.runner.loop import expand, receipt
from simulator.runner.setup import Federation
from simulator.stream import DeletionReceipt, DeletionRequest


@dataclass
class BatchResult:
    """Receipts aligned with the batch's requests (None: held), and what the removal did."""

    receipts: list[DeletionReceipt | None]
    removed: list[int] = field(default_factory=list)
    report: RemovalReport | None = None
    #: positions (in the batch) of the requests held for a later batch
    held: list[int] = field(default_factory=list)
    #: positions of the requests rejected before validation (``denied``)
    unauthorised: list[int] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(r is not None and r.status == status for r in self.receipts)


def apply_requests(
    fed: Federation,
    ledger: Ledger,
    requests: Sequence[DeletionRequest],
    *,
    now: datetime | None = None,
    denied: Mapping[int, str] | None = None,
    min_rows: int = 1,
) -> BatchResult:
    """Answer every request of a micro-batch (or hold it); fresh ones enter the ledger.

    Parameters
    ----------
    fed : the federation whose head and clients change.
    ledger : answered request ids (updated in place).
    requests : the micro-batch, in topic order (requests held before come first).
    now : the decision time written into every receipt (``applied_at``); default: the time
        the removal finished.
    denied : position in ``requests`` -> why it is refused (rejected, not in the ledger).
    min_rows : fewest rows a client's removal may cover; requests of clients with fewer are
        held (see the module docstring).

    Raises
    ------
    NumericalError
        The removal failed; the federation may be half changed and must be discarded (the
        consumer exits and restarts from its last checkpoint).
    """
    denied = denied or {}
    fresh: list[DeletionRequest] = []
    batch_ids: set[str] = set()
    for i, req in enumerate(requests):
        if i in denied:
            continue
        if req.request_id not in ledger and req.request_id not in batch_ids:
            fresh.append(req)
            batch_ids.add(req.request_id)
    ids, rejected = expand(fed, fresh)
    held_ids: set[str] = set()
    if min_rows > 1:
        ids, held_ids = _hold_small(fed, fresh, rejected, min_rows)
    report = None
    if ids:
        report = fed.head.remove(ids, retrain=fed.scenario.method == "retrain")
    now = now or datetime.now(UTC)
    head = fed.head
    version = head.model_version
    outcome: dict[str, DeletionReceipt] = {}
    for req in fresh:
        if req.request_id in held_ids:
            continue
        reason = rejected.get(req.request_id)
        outcome[req.request_id] = receipt(req, reason, head, report, now)
        ledger.record(req.request_id, "rejected" if reason else "applied", version)
    result = BatchResult([], ids, report)
    for i, req in enumerate(requests):
        if i in denied:
            result.unauthorised.append(i)
            result.receipts.append(
                DeletionReceipt(
                    request_id=req.request_id,
                    status="rejected",
                    reason=denied[i],
                    model_version=version,
                    applied_at=now,
                )
            )
        elif req.request_id in held_ids and req.request_id not in outcome:
            held_ids.discard(req.request_id)  # its first copy is held; later copies: duplicates
            result.held.append(i)
            result.receipts.append(None)
        elif (first := outcome.pop(req.request_id, None)) is not None:
            result.receipts.append(first)
        elif req.request_id in ledger:
            result.receipts.append(
                ledger.duplicate_receipt(req.request_id, model_version=version, now=now)
            )
        else:  # a later copy of a held request
            result.receipts.append(
                DeletionReceipt(
                    request_id=req.request_id,
                    status="duplicate",
                    reason="request id already received; held until its client's removal",
                    model_version=version,
                    applied_at=now,
                )
            )
    return result


def _hold_small(
    fed: Federation, fresh: Sequence[DeletionRequest], rejected: Mapping[str, str], min_rows: int
) -> tuple[list[int], set[str]]:
    """The ids to remove now, and the request ids held: those with a client whose rows in
    this batch are fewer than ``min_rows`` (a withdrawal releases its client)."""
    leaving = {r.client_id for r in fresh if r.client_id is not None}
    owners: dict[str, set[int]] = {}
    sizes: dict[str, dict[int, int]] = {}
    for req in fresh:
        if req.request_id in rejected:
            continue
        if req.client_id is not None:
            owners[req.request_id] = {req.client_id}
            sizes[req.request_id] = {}
            continue
        groups = fed.head_data.route(req.sample_ids or [])
        owners[req.request_id] = set(groups)
        sizes[req.request_id] = {c: len(g) for c, g in groups.items()}
    held: set[str] = set()
    while True:  # holding a request can leave another client short: repeat until stable
        rows: dict[int, int] = {}
        for rid, per_client in sizes.items():
            if rid not in held:
                for client, n in per_client.items():
                    rows[client] = rows.get(client, 0) + n
        short = {c for c, n in rows.items() if n < min_rows and c not in leaving}
        now_held = held | {rid for rid, clients in owners.items() if clients & short}
        if now_held == held:
            break
        held = now_held
    ids, _ = expand(fed, [r for r in fresh if r.request_id in owners and r.request_id not in held])
    return ids, held
