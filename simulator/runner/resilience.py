"""Deletion batches when clients fail: report, exclude, retrain, receipt every request.

A transport raises :class:`~simulator.errors.ClientUnavailableError` when clients fail or do
not answer in time (after its retries). Nothing is dropped silently:

* the failure is recorded in the batch's event (``client_failures``: client -> reason);
* the failed clients leave the federation (:meth:`Federation.exclude`) and the head is retrained
  from scratch on the clients that remain (``retrain_reason: client_failed``), which is always
  consistent with whatever the survivors hold;
* every request of the batch gets a receipt: ``applied`` if every one of its rows was confirmed
  deleted by its owner (the retrained head holds none of them), otherwise ``rejected`` with the
  failed client and its reason;
* later requests that need an excluded client are rejected with that reason.

The in-process transport never fails, so there this is exactly :func:`loop.apply_batch`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from simulator.errors import ClientUnavailableError
from simulator.runner.loop import StreamState, apply_batch, expand
from simulator.runner.setup import Federation
from simulator.stream import DeletionReceipt, DeletionRequest


def apply_batch_guarded(
    fed: Federation, state: StreamState, index: int, batch: list[DeletionRequest]
) -> dict[str, Any]:
    """:func:`~simulator.runner.loop.apply_batch`, surviving client failures (module doc)."""
    blocked = {r.request_id: why for r in batch if (why := _needs_excluded(fed, r)) is not None}
    rest = [r for r in batch if r.request_id not in blocked]
    n_before = len(state.receipts)
    wanted = {r.request_id: _wanted_ids(fed, r) for r in rest}
    _, invalid = expand(fed, rest)  # as the batch sees it before anything changes
    failures: dict[int, str] = {}
    event: dict[str, Any] | None = None
    if rest:
        try:
            event = apply_batch(fed, state, index, rest)
        except ClientUnavailableError as err:
            failures = dict(err.clients)
    if failures:
        event = _recover(fed, state, index, rest, wanted, invalid, failures, n_before)
    if event is None:  # every request needed an excluded client
        event = _bare_event(fed, state, index, batch)
        state.events.append(event)
    _reject(fed, state, batch, blocked)
    event["requests"] = len(batch)
    event["rejected"] = sum(r.status == "rejected" for r in state.receipts[n_before:])
    return event


def _needs_excluded(fed: Federation, req: DeletionRequest) -> str | None:
    """Why ``req`` cannot be served (it needs a client that failed), or None."""
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


def _wanted_ids(fed: Federation, req: DeletionRequest) -> list[int]:
    if req.client_id is not None:
        client = fed.clients.get(req.client_id)
        return [] if client is None else [int(i) for i in client.retained_ids]
    return [int(i) for i in req.sample_ids or []]


def _recover(
    fed: Federation,
    state: StreamState,
    index: int,
    rest: list[DeletionRequest],
    wanted: dict[str, list[int]],
    invalid: dict[str, str],
    failures: dict[int, str],
    n_before: int,
) -> dict[str, Any]:
    """Exclude the failed clients, retrain on the others, receipt ``rest`` (module doc)."""
    already = len(state.receipts) - n_before == len(rest)  # failed after the receipts
    retained = {cid: {int(i) for i in c.retained_ids} for cid, c in fed.clients.items()}
    all_failures = dict(failures)
    pending = dict(failures)
    while pending:
        for cid, why in pending.items():
            fed.exclude(cid, why)
        if not fed.clients:
            raise ClientUnavailableError(all_failures, "no client is left in the federation")
        try:
            fed.head.retrain("client_failed")
            pending = {}
        except ClientUnavailableError as err:
            pending = {c: r for c, r in err.clients.items() if c in fed.clients}
            all_failures.update(pending)
            if not pending:
                raise
    event = _bare_event(fed, state, index, rest)  # apply_batch raised before its own event
    state.events.append(event)
    if not already:
        for req in rest:
            ids = wanted[req.request_id]
            gone = [i for i in ids if i not in retained.get(fed.head_data.owner_of(i), set())]
            reason = invalid.get(req.request_id)
            if reason is None and len(gone) < len(ids):
                owners = sorted({fed.head_data.owner_of(i) for i in ids} & set(all_failures))
                who = owners or sorted(all_failures)
                reason = (
                    "not confirmed: "
                    + "; ".join(f"client {c} failed ({all_failures[c]})" for c in who)
                    + "; the head was retrained without the failed clients' rows"
                )
            if reason is None:
                state.forgotten.extend(ids)
            state.receipts.append(_receipt(fed, req, reason))
    event.update(
        client_failures={str(c): r for c, r in sorted(all_failures.items())},
        excluded_clients=sorted(fed.excluded),
        retrained=True,
        retrain_reason="client_failed",
        model_version=fed.head.model_version,
        retained=fed.head_data.retained_count,
        removed_total=len(state.forgotten),
        epsilon_spent=fed.head.epsilon_spent,
        cumulative_residual=fed.head.cumulative_residual,
        budget_used_ratio=fed.head.cumulative_residual / fed.head.budget,
    )
    return event


def _bare_event(
    fed: Federation, state: StreamState, index: int, batch: list[DeletionRequest]
) -> dict[str, Any]:
    tick = batch[0].tick
    return {
        "event": "deletion_batch",
        "batch": index,
        "tick": tick,
        "phase": fed.scenario.stream.phase_at(tick).name,
        "requests": len(batch),
        "rejected": 0,
        "withdrawn_clients": sorted(r.client_id for r in batch if r.client_id is not None),
        "samples": 0,
        "removed_total": len(state.forgotten),
        "clients": {},
    }


def _reject(
    fed: Federation, state: StreamState, batch: list[DeletionRequest], blocked: dict[str, str]
) -> None:
    for req in batch:
        if req.request_id in blocked:
            state.receipts.append(_receipt(fed, req, blocked[req.request_id]))


def _receipt(fed: Federation, req: DeletionRequest, reason: str | None) -> DeletionReceipt:
    applied_at = req.requested_at + timedelta(seconds=fed.scenario.stream.tick_seconds)
    return DeletionReceipt(
        request_id=req.request_id,
        status="rejected" if reason else "applied",
        reason=reason,
        model_version=fed.head.model_version,
        residual=None,
        epsilon_spent=None if reason else fed.head.epsilon_spent,
        applied_at=applied_at,
    )
