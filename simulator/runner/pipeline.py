"""One deletion batch, whatever brought it: the scenario's stream, Kafka, or the Flower ServerApp.

:func:`apply_batch` is the only implementation of a deletion batch. It

1. answers what needs no removal: requests refused before (``denied``: a bad signature, not
   the owner, over the rate limit; rejected, not recorded), and with a ``ledger`` the request
   ids answered before or earlier in the batch (``duplicate``);
2. rejects requests that cannot be placed in the scenario (a tick past its stream:
   :mod:`simulator.runner.admission`) or need a client which failed earlier, then validates
   the rest (:func:`simulator.runner.requests.expand`: unknown client, unknown or already
   deleted ids);
3. with ``min_rows`` > 1 holds the requests of clients whose rows in the batch are fewer
   (returned as held, answered in a later batch; docs/security.md);
4. removes the accepted ids as the scenario's method does (:mod:`simulator.methods`: one
   certified Newton step or a retrain when the budget would be exceeded; ``retrain_head``),
   or, under ``extractor_data: dp`` when the extractor's group charge would pass
   ``model.dp.extractor_epsilon_limit``, retrains the whole model from scratch on the
   retained rows (:mod:`simulator.runner.extractor_limit`, reason ``extractor_limit``);
5. survives client failures: the failed clients leave the federation, the head is retrained
   from scratch on the others, and each request is ``applied`` only if every one of its rows
   was confirmed deleted (else ``rejected`` naming the failed client). A removal is all or
   nothing: a client whose step fails (an exception in its refit) leaves every client as it
   was, and the batch's requests are ``rejected`` with the reason, kept out of the ledger so
   that a resend is handled afresh; a head that fails (a solve that does not converge) is
   retrained from scratch on what the clients hold;
6. answers every request with a receipt, records fresh ones in the ledger, and builds the
   batch's event: its tick and phase from the requests it applied
   (:func:`~simulator.runner.admission.batch_place`), the removal, the certificate, the
   decorrelation weights and, on the scenario's schedule (``evaluation.every``,
   ``evaluation.checkpoints``), utility, MIA, drift and the retrained reference
   (:mod:`simulator.runner.batch_metrics`); a batch that changed nothing (only duplicates or
   rejections) is not evaluated.

The caller owns the transport of requests and receipts (the scenario loop in
:mod:`simulator.runner.run`, the Kafka consumer in :mod:`server.kafka.consumer`) and may add
its own keys to the event (Kafka: records, dead letters, lag...).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from simulator.errors import ClientUnavailableError, DeletionFailedError, NumericalError
from simulator.head import RemovalReport
from simulator.runner.admission import BatchPlace, batch_place, unappliable
from simulator.runner.batch_metrics import (
    certificate_section,
    evaluate_batch,
    removal_fields,
    weight_reports,
)
from simulator.runner.extractor_limit import EXTRACTOR_LIMIT, remove_batch
from simulator.runner.federation import Federation
from simulator.runner.monitoring import RunMonitor
from simulator.runner.requests import (
    FederationHoldings,
    expand,
    hold_small,
    wanted_ids,
)
from simulator.runner.run_state import RunState
from simulator.stream import DeletionReceipt, DeletionRequest
from simulator.stream.ledger import Ledger


@dataclass(frozen=True, eq=False)
class BatchOutcome:
    """What one batch did.

    Attributes
    ----------
    receipts : one per request of the batch, in order; None for a held request.
    removed : the sample ids deleted (confirmed by their owners).
    report : the head's removal report (None: nothing removed, or a client failure retrain).
    held : positions of the requests held for a later batch.
    unauthorised : positions of the requests refused before validation (``denied``).
    event : the ``deletion_batch`` event record (the caller may add keys).
    """

    receipts: tuple[DeletionReceipt | None, ...]
    removed: tuple[int, ...]
    report: RemovalReport | None
    held: tuple[int, ...] = ()
    unauthorised: tuple[int, ...] = ()
    event: dict[str, Any] = field(default_factory=dict)

    def count(self, status: str) -> int:
        """Receipts of this batch with ``status``."""
        return sum(r is not None and r.status == status for r in self.receipts)

    @property
    def answered(self) -> list[DeletionReceipt]:
        """The receipts, without the held requests' places."""
        return [r for r in self.receipts if r is not None]


def apply_batch(  # noqa: PLR0913 (the batch entry point's keyword-only options, defaulted)
    fed: Federation,
    run: RunState,
    requests: Sequence[DeletionRequest],
    *,
    ledger: Ledger | None = None,
    denied: Mapping[int, str] | None = None,
    min_rows: int = 1,
    now: datetime | None = None,
) -> BatchOutcome:
    """Answer every request of one batch (or hold it), as the module docstring says.

    Parameters
    ----------
    fed : the federation whose head and clients change.
    run : the run's totals (updated in place).
    requests : the batch, in arrival order (requests held before come first).
    ledger : answered request ids (updated in place); None: no duplicate detection (the
        scenario's own stream has unique ids).
    denied : position in ``requests`` -> why it is refused (rejected, not in the ledger).
    min_rows : fewest rows one client's removal may cover (see the module docstring).
    now : the decision time in every receipt (``applied_at``); default: when the removal ended.

    Raises
    ------
    NumericalError
        The removal failed; the federation may be half changed and must be discarded.
    ClientUnavailableError
        Every client failed.
    """
    denied = denied or {}
    timings: dict[str, float] = {}
    if run.evaluate and run.monitor is None:  # baselines frozen before the first deletion
        run.step("evaluation baselines (LiRA references)")
        t = time.perf_counter()
        run.monitor = RunMonitor.start(fed)
        timings["monitor_start"] = time.perf_counter() - t
    holdings = FederationHoldings(fed)
    fresh = _fresh(requests, denied, ledger)
    blocked = {r.request_id: why for r in fresh if (why := _unservable(fed, r)) is not None}
    candidates = [r for r in fresh if r.request_id not in blocked]
    wanted = {r.request_id: wanted_ids(holdings, r) for r in candidates}
    ids, rejected = expand(holdings, candidates)
    held: set[str] = set()
    if min_rows > 1:
        ids, held = hold_small(holdings, candidates, rejected, min_rows)
    rejected.update(blocked)
    attempt = _Attempt(removed=ids)
    if ids:
        run.step(f"removal of {len(ids)} samples")
        attempt = _remove(fed, run, ids, _Selection(candidates, wanted, held), rejected)
    report, removed, failures, failed = (
        attempt.report, attempt.removed, attempt.failures, attempt.failed,
    )  # fmt: skip
    removal = _Removal(report, removed, now or datetime.now(UTC))
    verdicts = _Verdicts(fresh, rejected, held, attempt.unrecorded)
    receipts = _answer(fed, requests, denied, ledger, verdicts, removal)
    run.forgotten.extend(removed)
    applied = [
        q
        for q, r in zip(requests, receipts, strict=True)
        if r is not None and r.status == "applied"
    ]
    place = batch_place(fed.scenario, applied, run.last_tick)
    run.last_tick = max(run.last_tick, place.tick)
    for r in receipts:
        if r is not None:
            run.answered[r.status] = run.answered.get(r.status, 0) + 1
    event = _event(fed, run, requests, receipts, removal, place)
    event.update(_failure_fields(fed, failures, failed))
    reason = event.get("retrain_reason") if event.get("retrained") else None
    if reason:
        run.retrains[reason] = run.retrains.get(reason, 0) + 1
    event.setdefault("timings", {}).update(timings)
    if run.evaluate and (removed or failures):  # a batch that changed nothing: not evaluated
        evaluate_batch(fed, run, place.tick, event)
    run.batches += 1
    run.step("")
    return BatchOutcome(
        receipts=tuple(receipts),
        removed=tuple(removed),
        report=report,
        held=tuple(i for i, r in enumerate(receipts) if r is None),
        unauthorised=tuple(sorted(denied)),
        event=event,
    )


def _fresh(
    requests: Sequence[DeletionRequest], denied: Mapping[int, str], ledger: Ledger | None
) -> list[DeletionRequest]:
    """The first copy of each request not denied and (with a ledger) not answered before."""
    fresh: list[DeletionRequest] = []
    seen: set[str] = set()
    for i, req in enumerate(requests):
        if i in denied:
            continue
        if ledger is not None and (req.request_id in ledger or req.request_id in seen):
            continue
        fresh.append(req)
        seen.add(req.request_id)
    return fresh


def _unservable(fed: Federation, req: DeletionRequest) -> str | None:
    """Why ``req`` is rejected before its rows are looked at, or None.

    A field the scenario cannot place (:mod:`simulator.runner.admission`), or a client that
    failed earlier.
    """
    return unappliable(fed.scenario, req) or _needs_excluded(fed, req)


def _needs_excluded(fed: Federation, req: DeletionRequest) -> str | None:
    """Why ``req`` cannot be served (it needs a client that failed earlier), or None."""
    if not fed.excluded:
        return None
    owners = (
        {req.client_id}
        if req.client_id is not None
        else {fed.head_data.owner_of(i) for i in req.sample_ids or []}
    )
    for cid in sorted(owners & set(fed.excluded)):
        return (
            f"client {cid} left the federation after failing ({fed.excluded[cid]}): its rows "
            "are no longer in the head, but it cannot confirm the deletion"
        )
    return None


@dataclass(frozen=True)
class _Selection:
    """The requests a batch tried to remove: the validated ones, their ids, the held ones.

    Attributes
    ----------
    candidates : the fresh requests that need no failed client, in order.
    wanted : request id -> the sample ids it asks to delete.
    held : ids of the requests held for a later batch (not removed now).
    """

    candidates: Sequence[DeletionRequest]
    wanted: Mapping[str, list[int]]
    held: set[str]

    @property
    def pending(self) -> list[DeletionRequest]:
        """The candidates not held: those whose rows the removal covered."""
        return [r for r in self.candidates if r.request_id not in self.held]

    def removed_unless(self, rejected: Mapping[str, str]) -> list[int]:
        """The ids of the pending requests that are not ``rejected``, in request order."""
        kept = [r for r in self.pending if r.request_id not in rejected]
        return [i for r in kept for i in self.wanted[r.request_id]]


def _recover(
    fed: Federation, err: ClientUnavailableError, selection: _Selection
) -> tuple[dict[int, str], dict[str, str]]:
    """Retrain without the clients that failed a deletion.

    Exclude the failed clients, retrain on the others; the failures and, per request whose
    rows were not all confirmed deleted, why it is rejected.
    """
    retained = {cid: {int(i) for i in c.retained_ids} for cid, c in fed.clients.items()}
    failures = _retrain_without_failed(fed, err)
    unconfirmed: dict[str, str] = {}
    for req in selection.pending:
        ids = selection.wanted[req.request_id]
        gone = [i for i in ids if i not in retained.get(fed.head_data.owner_of(i), set())]
        if len(gone) < len(ids):
            owners = sorted({fed.head_data.owner_of(i) for i in ids} & set(failures))
            unconfirmed[req.request_id] = (
                "not confirmed: "
                + "; ".join(f"client {c} failed ({failures[c]})" for c in owners or failures)
                + "; the head was retrained without the failed clients' rows"
            )
    return failures, unconfirmed


def _retrain_without_failed(fed: Federation, err: ClientUnavailableError) -> dict[int, str]:
    """Exclude the failed clients and retrain, again while more fail; every failure.

    Raises
    ------
    ClientUnavailableError
        No client is left, or a retrain failed without naming a client still in the federation.
    """
    failures = dict(err.clients)
    pending = dict(err.clients)
    while pending:
        for cid, why in pending.items():
            fed.exclude(cid, why)
        if not fed.clients:
            raise ClientUnavailableError(failures, "no client is left in the federation")
        try:
            fed.head.retrain("client_failed")
            pending = {}
        except ClientUnavailableError as again:
            pending = {c: r for c, r in again.clients.items() if c in fed.clients}
            failures.update(pending)
            if not pending:
                raise
    return failures


@dataclass(frozen=True)
class _Attempt:
    """What a batch's removal did: its report, the ids removed, and what failed.

    ``failures``: clients that left the federation (id -> why); ``failed``: a removal that
    failed as a whole (:func:`_failed_removal`); ``unrecorded``: the requests it answered
    without recording them.
    """

    report: RemovalReport | None = None
    removed: Sequence[int] = ()
    failures: dict[int, str] = field(default_factory=dict)
    failed: dict[str, Any] = field(default_factory=dict)
    unrecorded: frozenset[str] = frozenset()


def _remove(
    fed: Federation,
    run: RunState,
    ids: Sequence[int],
    selection: _Selection,
    rejected: dict[str, str],
) -> _Attempt:
    """Remove ``ids``, surviving failed clients and failed removals (``rejected`` grows)."""
    try:
        return _Attempt(remove_batch(fed, run, ids), ids)
    except ClientUnavailableError as err:
        failures, unconfirmed = _recover(fed, err, selection)
        rejected.update((rid, why) for rid, why in unconfirmed.items() if rid not in rejected)
        removed = selection.removed_unless(rejected)
        fed.extractor.rows_since += len(removed)
        return _Attempt(None, removed, failures)
    except (DeletionFailedError, NumericalError) as err:
        failed, removed = _failed_removal(fed, err, ids)
        if removed:
            return _Attempt(None, removed, failed=failed)
        # nothing changed: answered, not recorded (a resend is handled afresh)
        unrecorded = {r.request_id for r in selection.pending} - set(rejected)
        rejected.update(dict.fromkeys(unrecorded, f"not applied: {failed['reason']}"))
        return _Attempt(None, [], failed=failed, unrecorded=frozenset(unrecorded))


def _failed_removal(
    fed: Federation, err: DeletionFailedError | NumericalError, ids: Sequence[int]
) -> tuple[dict[str, Any], list[int]]:
    """After a removal that failed: what failed, and the ids removed after all (or none).

    A client's step that failed (:class:`~simulator.errors.DeletionFailedError`) changed
    nothing anywhere: no id is removed. A head that failed (a solve that did not converge)
    may have failed before or after the clients deleted the rows: the head is retrained from
    scratch (cold, fresh perturbation) on whatever the clients hold now, so that it agrees
    with them, and the ids count as removed when the clients no longer hold them.
    """
    if isinstance(err, DeletionFailedError):
        reason = f"{err}; every client is as before this batch, so send the request again"
        return {"client": err.client, "reason": reason}, []
    fed.head.retrain("numerical", cold=True)
    gone = len(fed.head_data.unknown_ids(ids)) == len(ids)
    if gone:
        fed.extractor.rows_since += len(ids)
    done = "the rows were deleted" if gone else "nothing was deleted, so send the request again"
    reason = f"the head failed ({err}): {done} and the head retrained from scratch"
    return {"head": True, "reason": reason}, list(ids) if gone else []


@dataclass(frozen=True)
class _Verdicts:
    """What a batch decided for its fresh requests: refusals (id -> why) and held ids.

    ``unrecorded``: refusals that stay out of the ledger (a removal that failed and changed
    nothing: a resend of the request is handled afresh).
    """

    fresh: Sequence[DeletionRequest]
    rejected: Mapping[str, str]
    held: set[str]
    unrecorded: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Removal:
    """What a batch's removal did: its report (None: nothing removed), the ids and when."""

    report: RemovalReport | None
    removed: Sequence[int]
    now: datetime


def _answer(
    fed: Federation,
    requests: Sequence[DeletionRequest],
    denied: Mapping[int, str],
    ledger: Ledger | None,
    verdicts: _Verdicts,
    removal: _Removal,
) -> list[DeletionReceipt | None]:
    """One receipt per request, in order (None: held); fresh answers enter the ledger."""
    head = fed.head
    version = head.model_version
    rejected, held, now = verdicts.rejected, verdicts.held, removal.now
    outcome: dict[str, DeletionReceipt] = {}
    for req in verdicts.fresh:
        if req.request_id in held:
            continue
        reason = rejected.get(req.request_id)
        outcome[req.request_id] = receipt(req, reason, fed, removal.report, now)
        if ledger is not None and req.request_id not in verdicts.unrecorded:
            ledger.record(req.request_id, "rejected" if reason else "applied", version)
    out: list[DeletionReceipt | None] = []
    first_held = set(held)
    for i, req in enumerate(requests):
        if i in denied:
            out.append(_plain(req, "rejected", denied[i], version, now))
        elif req.request_id in first_held and req.request_id not in outcome:
            first_held.discard(req.request_id)  # its first copy is held; later copies: duplicates
            out.append(None)
        elif (first := outcome.pop(req.request_id, None)) is not None:
            out.append(first)
        elif ledger is not None and req.request_id in ledger:
            out.append(ledger.duplicate_receipt(req.request_id, model_version=version, now=now))
        else:  # a later copy of a held request
            why = "request id already received; held until its client's removal"
            out.append(_plain(req, "duplicate", why, version, now))
    return out


def _plain(
    req: DeletionRequest,
    status: Literal["rejected", "duplicate"],
    reason: str,
    version: int,
    now: datetime,
) -> DeletionReceipt:
    return DeletionReceipt(
        request_id=req.request_id,
        status=status,
        reason=reason,
        model_version=version,
        applied_at=now,
    )


def receipt(
    req: DeletionRequest,
    reason: str | None,
    fed: Federation,
    report: RemovalReport | None,
    applied_at: datetime,
) -> DeletionReceipt:
    """The receipt of one validated request: rejected with ``reason``, or applied."""
    head = fed.head
    scope = None if reason else fed.certificate_scope(head.epsilon_spent)
    return DeletionReceipt(
        request_id=req.request_id,
        status="rejected" if reason else "applied",
        reason=reason,
        model_version=head.model_version,
        residual=None if reason or report is None else report.charged,
        epsilon_spent=None if reason else head.epsilon_spent,
        accounting=None if reason else head.config.accounting,
        delta=None if reason else head.config.delta,
        scope=None if scope is None else scope.scope,
        total_epsilon_spent=None if scope is None else scope.total_epsilon,
        total_delta=None if scope is None else scope.total_delta,
        scope_reason=None if scope is None else scope.reason,
        applied_at=applied_at,
    )


def _event(
    fed: Federation,
    run: RunState,
    requests: Sequence[DeletionRequest],
    receipts: Sequence[DeletionReceipt | None],
    removal: _Removal,
    place: BatchPlace,
) -> dict[str, Any]:
    """The ``deletion_batch`` record (``requests`` counts the requests answered now).

    ``tick``, ``phase`` and ``phases`` (applied requests per phase) come from the requests
    the batch applied, and ``withdrawn_clients`` lists the withdrawals it applied: re-sent
    duplicates and rejected requests place and mark nothing
    (:func:`~simulator.runner.admission.batch_place`).
    """
    removed, report, now = removal.removed, removal.report, removal.now
    answered = [(req, r) for req, r in zip(requests, receipts, strict=True) if r is not None]
    head = fed.head
    event: dict[str, Any] = {
        "event": "deletion_batch",
        "batch": run.batches,
        "tick": place.tick,
        "phase": place.phase,
        "phases": place.phases,
        "requests": len(answered),
        "applied": sum(r.status == "applied" for _, r in answered),
        "rejected": sum(r.status == "rejected" for _, r in answered),
        "duplicates": sum(r.status == "duplicate" for _, r in answered),
        "held": sum(r is None for r in receipts),
        "withdrawn_clients": sorted(
            req.client_id
            for req, r in answered
            if req.client_id is not None and r.status == "applied"
        ),
        "samples": len(removed),
        "removed_total": len(run.forgotten),
        "latency_seconds": [(now - req.requested_at).total_seconds() for req, _ in answered],
        "model_version": head.model_version,
        "retained": fed.head_data.retained_count,
        "clients": {},
    }
    if report is not None:
        routing = fed.head_data.last_routing
        event["clients"] = {str(k): v for k, v in sorted(routing.items())}
        event.update(removal_fields(report), model_version=report.model_version)
        event["timings"] = dict(report.timings)
        event["certificate"] = certificate_section(fed, report)
        event["decorrelation"] = weight_reports(fed, sorted(routing))
        if report.retrain_reason == EXTRACTOR_LIMIT:
            event["extractor_retrain"] = extractor_retrain_fields(fed)
    return event


def extractor_retrain_fields(fed: Federation) -> dict[str, Any]:
    """What a whole-model retrain at the extractor's limit trained (its event section)."""
    part = fed.extractor_guarantee
    trained_on = fed.extractor.trained_on or {}
    return {
        "generation": fed.extractor.generation,
        "trained_rows": sum(len(rows) for rows in trained_on.values()),
        "epsilon": None if part is None else part.epsilon,
        "delta": None if part is None else part.delta,
        "client_epsilons": {str(c): e for c, e in sorted(fed.data.extractor_epsilons.items())},
        "limit": fed.scenario.model.dp.extractor_epsilon_limit,
    }


def _failure_fields(
    fed: Federation, failures: Mapping[int, str], failed: Mapping[str, Any]
) -> dict[str, Any]:
    """What failed clients (``failures``) or a failed removal (``failed``) add to the event."""
    out: dict[str, Any] = {}
    if failures:
        out["client_failures"] = {str(c): r for c, r in sorted(failures.items())}
        out["excluded_clients"] = sorted(fed.excluded)
        out.update(_retrain_fields(fed, "client_failed"))
    if failed:
        out["removal_failed"] = dict(failed)
        if failed.get("head"):
            out.update(_retrain_fields(fed, "numerical"))
    return out


def _retrain_fields(fed: Federation, reason: str) -> dict[str, Any]:
    """What a retrain outside the method's removal (``reason``) adds to the batch's event."""
    head = fed.head
    return {
        "retrained": True,
        "retrain_reason": reason,
        "model_version": head.model_version,
        "retained": fed.head_data.retained_count,
        "epsilon_spent": head.epsilon_spent,
        "cumulative_residual": head.cumulative_residual,
        "budget_used_ratio": head.cumulative_residual / head.budget,
    }
