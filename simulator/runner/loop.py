"""The in-process deletion stream: batches of requests become certified removals.

Each batch (the requests of one tick, chunked by ``stream.max_batch_requests``) is validated,
routed to the owning clients, applied as one certified removal (or a retrain), answered with
one receipt per request, and followed by cheap metrics every ``evaluation.every`` batches and
the retrained reference at ``evaluation.checkpoints``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError
from simulator.head import LocalHeadData, RemovalReport, train_head
from simulator.metrics import accuracy, weighted_f1
from simulator.runner.setup import Federation
from simulator.stream import DeletionReceipt, DeletionRequest, batches

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass
class StreamState:
    """What the loop accumulates: forgotten ids, receipts and the event log."""

    forgotten: list[int] = field(default_factory=list)
    receipts: list[DeletionReceipt] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    next_checkpoint: int = 0


def evaluate(fed: Federation, tick: int, forgotten: list[int]) -> dict[str, float]:
    """Accuracy and weighted F1 of the current head on every split."""
    head = fed.head
    out: dict[str, float] = {}
    for split in fed.eval_sets.base:
        Z, y = fed.eval_sets.features(split, tick)
        _score(out, split, y, head.predict(Z))
    retained = set(fed.head_data_retained())
    probe = np.array([i for i in fed.retain_probe if int(i) in retained], dtype=np.int64)
    for split, ids in (("retain", probe), ("forget", np.asarray(forgotten, dtype=np.int64))):
        if ids.size:
            _score(out, split, fed.dataset.y_train[ids], head.predict(fed.train_features[ids]))
    return out


def _score(out: dict[str, float], split: str, y: IntArray, pred: IntArray) -> None:
    out[f"accuracy_{split}"] = accuracy(y, pred)
    out[f"f1_{split}"] = weighted_f1(y, pred)


def reference(fed: Federation, tick: int) -> dict[str, float]:
    """Head retrained exactly on the retained rows with the same perturbation and weights."""
    ids = np.concatenate([c.retained_ids for c in fed.clients.values()])
    weights = np.concatenate([c.data.weights[c.data.retained_ids] for c in fed.clients.values()])
    order = np.argsort(ids)
    ids, weights = ids[order], weights[order]
    t = time.perf_counter()
    ref = train_head(
        LocalHeadData(fed.train_features[ids], fed.dataset.y_train[ids], fed.dataset.num_classes,
                      weights=weights),
        fed.head.b,
        lam=fed.head.config.lam,
        tol=fed.head.config.tol,
    )
    seconds = time.perf_counter() - t
    W = fed.head.W
    out = {
        "param_distance_relative": float(np.linalg.norm(W - ref.W) / max(np.linalg.norm(ref.W), 1e-300)),
        "retrain_seconds": seconds,
    }
    for split in fed.eval_sets.base:
        Z, y = fed.eval_sets.features(split, tick)
        pred_ref = np.argmax(Z @ ref.W, axis=1)
        out[f"reference_accuracy_{split}"] = accuracy(y, pred_ref)
        out[f"reference_f1_{split}"] = weighted_f1(y, pred_ref)
        out[f"prediction_agreement_{split}"] = float(np.mean(pred_ref == fed.head.predict(Z)))
    return out


def iterate_batches(fed: Federation) -> Iterator[list[DeletionRequest]]:
    yield from batches(fed.requests, fed.scenario.stream.max_batch_requests)


def expand(fed: Federation, batch: list[DeletionRequest]) -> tuple[list[int], dict[str, str]]:
    """Sample ids a batch deletes, and the requests rejected with their reasons."""
    ids: list[int] = []
    rejected: dict[str, str] = {}
    seen: set[int] = set()
    for req in batch:
        if req.client_id is not None:
            client = fed.clients.get(req.client_id)
            if client is None:
                rejected[req.request_id] = f"unknown client {req.client_id}"
                continue
            wanted = [int(i) for i in client.retained_ids]
        else:
            wanted = list(req.sample_ids or [])
        unknown = fed.head_data.unknown_ids(wanted)
        clash = [i for i in wanted if i in seen]
        if unknown or clash:
            rejected[req.request_id] = (
                f"unknown or already deleted sample ids: {(unknown or clash)[:5]}"
            )
            continue
        seen.update(wanted)
        ids.extend(wanted)
    return ids, rejected


def apply_batch(
    fed: Federation, state: StreamState, index: int, batch: list[DeletionRequest]
) -> dict[str, Any]:
    """Apply one batch; returns its event record (also appended to ``state.events``)."""
    tick = batch[0].tick
    ids, rejected = expand(fed, batch)
    report: RemovalReport | None = None
    if ids:
        report = fed.head.remove(ids, retrain=fed.scenario.method == "retrain")
        state.forgotten.extend(ids)
    applied_at = batch[0].requested_at + timedelta(seconds=fed.scenario.stream.tick_seconds)
    for req in batch:
        reason = rejected.get(req.request_id)
        if reason is None and report is None:
            raise InputError("a batch with accepted requests produced no removal")
        state.receipts.append(
            DeletionReceipt(
                request_id=req.request_id,
                status="rejected" if reason else "applied",
                reason=reason,
                model_version=fed.head.model_version,
                residual=None if reason or report is None else report.charged,
                epsilon_spent=None if reason else fed.head.epsilon_spent,
                applied_at=applied_at,
            )
        )
    event: dict[str, Any] = {
        "event": "deletion_batch",
        "batch": index,
        "tick": tick,
        "phase": fed.scenario.stream.phase_at(tick).name,
        "requests": len(batch),
        "rejected": len(rejected),
        "withdrawn_clients": sorted(r.client_id for r in batch if r.client_id is not None),
        "samples": len(ids),
        "removed_total": len(state.forgotten),
        "clients": {str(k): v for k, v in sorted(fed.head_data.last_routing.items())} if ids else {},
    }
    if report is not None:
        event.update(
            residual_worst=report.residual_worst,
            residual_data=report.residual_data,
            residual_exact=report.residual_exact,
            charged=report.charged,
            cumulative_residual=report.cumulative,
            budget=report.budget,
            budget_used_ratio=report.budget_used_ratio,
            epsilon_spent=report.epsilon_spent,
            retrained=report.retrained,
            retrain_reason=report.retrain_reason,
            model_version=report.model_version,
            retained=report.retained,
            timings=report.timings,
        )
    cfg = fed.scenario.evaluation
    if index % cfg.every == 0:
        t = time.perf_counter()
        event["metrics"] = evaluate(fed, tick, state.forgotten)
        event.setdefault("timings", {})["evaluation"] = time.perf_counter() - t
    checkpoints = cfg.checkpoints
    while (
        cfg.retrain_reference
        and state.next_checkpoint < len(checkpoints)
        and len(state.forgotten) >= checkpoints[state.next_checkpoint]
    ):
        event.setdefault("checkpoints", []).append(
            {"checkpoint": checkpoints[state.next_checkpoint], **reference(fed, tick)}
        )
        state.next_checkpoint += 1
    state.events.append(event)
    return event


def run_stream(
    fed: Federation, state: StreamState, on_batch: Callable[[dict[str, Any]], None] | None = None
) -> StreamState:
    """Consume the whole generated stream."""
    for i, batch in enumerate(iterate_batches(fed)):
        event = apply_batch(fed, state, i, batch)
        if on_batch is not None:
            on_batch(event)
    return state
