"""The in-process deletion stream: batches of requests become certified removals.

Each batch (the requests of one tick, chunked by ``stream.max_batch_requests``) is validated,
routed to the owning clients, applied as one certified removal (or a retrain), answered with
one receipt per request, and followed by cheap metrics every ``evaluation.every`` batches and
the retrained reference at ``evaluation.checkpoints``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError
from simulator.federation.client import cold_fit as fit_cold
from simulator.head import (
    CertifiedHead,
    LocalHeadData,
    RemovalReport,
    predict_classes,
    train_head,
)
from simulator.head.certificate import stacked_norm
from simulator.head.logistic import objective_gradient
from simulator.metrics import (
    accuracy,
    certificate_status,
    prediction_agreement,
    relative_distance,
    weighted_f1,
)
from simulator.runner.monitoring import RunMonitor
from simulator.runner.setup import Federation
from simulator.runner.shards import weighting_plan
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
    monitor: RunMonitor | None = None


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


@dataclass(frozen=True, eq=False)
class ColdFit:
    """``A(D')``'s objective: the retained rows with weights fitted from scratch on them.

    ``weight_gap`` is the largest difference between the clients' current weights and these
    (0 up to rounding when every client refits cold, as the certificate requires).
    """

    data: LocalHeadData
    weight_gap: float


def cold_fit(fed: Federation) -> ColdFit:
    """Fit every client's weights from scratch on its retained rows, on the server's features.

    This is what a retrain from scratch on ``D'`` does (``method.md`` section 2), computed
    independently of the clients, whatever the transport.
    """
    ids_parts, weight_parts, gap = [], [], 0.0
    for cid, client in sorted(fed.clients.items()):
        ids, current = client.retained_weights()
        plan = weighting_plan(fed.scenario, cid)
        cold = np.ones(ids.size)
        if plan is not None and ids.size >= 2:
            fit = fit_cold(plan, fed.train_features[ids], fed.dataset.y_train[ids])
            cold = np.asarray(fit.weights, dtype=np.float64)
        if ids.size:
            gap = max(gap, float(np.max(np.abs(cold - current))))
        ids_parts.append(ids)
        weight_parts.append(cold)
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, dtype=np.int64)
    weights = np.concatenate(weight_parts) if weight_parts else np.zeros(0)
    order = np.argsort(ids)
    ids, weights = ids[order], weights[order]
    data = LocalHeadData(
        fed.train_features[ids], fed.dataset.y_train[ids], fed.dataset.num_classes, weights=weights
    )
    return ColdFit(data, gap)


def retrained_head(fed: Federation) -> tuple[FloatArray, float, dict[str, float]]:
    """``A(D')``: weights fitted cold and the head trained from scratch with the same ``b``.

    Returns the head, the seconds it took, and the certificate checked against it: the released
    head's exact residual on ``A(D')``'s objective (``residual_against_cold_fit``, which the
    budget must cover) and the clients' weight gap to the cold fit.
    """
    t = time.perf_counter()
    ref = cold_fit(fed)
    cfg = fed.head.config
    trained = train_head(ref.data, fed.head.b, lam=cfg.lam, tol=cfg.tol)
    seconds = time.perf_counter() - t
    W = fed.head.W
    stats = ref.data.statistics(W, hessian=False)
    residual = stacked_norm(
        np.linalg.norm(objective_gradient(stats, W, fed.head.b, lam=cfg.lam), axis=0)
    )
    check = {
        "residual_against_cold_fit": residual,
        "weight_gap_to_cold_fit": ref.weight_gap,
        "budget": fed.head.budget,
    }
    return trained.W, seconds, check


def reference(
    fed: Federation,
    tick: int,
    *,
    monitor: RunMonitor | None = None,
    forgotten: list[int] | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """The current head against the exactly retrained one ("ours vs ideal").

    Utility of both heads and their distance always; with a ``monitor`` also every attack and
    model-dependent drift number for the retrained head (``privacy`` and ``drift`` keys, the
    same layout as a batch event's).
    """
    W_ref, seconds, check = retrained_head(fed)
    W = fed.head.W
    out: dict[str, Any] = {
        "param_distance_relative": relative_distance(W, W_ref),
        "retrain_seconds": seconds,
        **check,
    }
    for split in fed.eval_sets.base:
        Z, y = fed.eval_sets.features(split, tick)
        pred_ref = predict_classes(Z @ W_ref)
        out[f"reference_accuracy_{split}"] = accuracy(y, pred_ref)
        out[f"reference_f1_{split}"] = weighted_f1(y, pred_ref)
        out[f"prediction_agreement_{split}"] = prediction_agreement(pred_ref, fed.head.predict(Z))
    if monitor is not None:
        sets = monitor.sample_sets(forgotten or [], index)
        privacy, drift, _ = monitor.model_sections(W_ref, sets, tick, index)
        out["privacy"], out["drift"] = privacy, drift
    return out


def iterate_batches(fed: Federation) -> Iterator[list[DeletionRequest]]:
    yield from batches(fed.requests, fed.scenario.stream.max_batch_requests)


def expand(fed: Federation, batch: Sequence[DeletionRequest]) -> tuple[list[int], dict[str, str]]:
    """Sample ids a batch deletes, in request order, and the rejected requests' reasons.

    A client withdrawal deletes the client's retained rows not already named earlier in the
    batch; a sample request naming an unknown, already deleted or already named id is rejected
    whole (nothing of it is deleted).
    """
    ids: list[int] = []
    rejected: dict[str, str] = {}
    seen: set[int] = set()
    for req in batch:
        if req.client_id is not None:
            client = fed.clients.get(req.client_id)
            if client is None:
                rejected[req.request_id] = f"unknown client {req.client_id}"
                continue
            wanted = [i for i in (int(j) for j in client.retained_ids) if i not in seen]
        else:
            wanted = list(req.sample_ids or [])
            bad = fed.head_data.unknown_ids(wanted) or [i for i in wanted if i in seen]
            if bad:
                rejected[req.request_id] = f"unknown or already deleted sample ids: {bad[:5]}"
                continue
        seen.update(wanted)
        ids.extend(wanted)
    return ids, rejected


def receipt(
    req: DeletionRequest,
    reason: str | None,
    head: CertifiedHead,
    report: RemovalReport | None,
    applied_at: datetime,
) -> DeletionReceipt:
    """The receipt of one request of a batch: rejected with ``reason``, or applied."""
    return DeletionReceipt(
        request_id=req.request_id,
        status="rejected" if reason else "applied",
        reason=reason,
        model_version=head.model_version,
        residual=None if reason or report is None else report.charged,
        epsilon_spent=None if reason else head.epsilon_spent,
        accounting=None if reason else head.config.accounting,
        delta=None if reason else head.config.delta,
        applied_at=applied_at,
    )


def removal_fields(report: RemovalReport) -> dict[str, Any]:
    """The event fields describing one certified removal (shared with the Kafka consumer)."""
    return {
        "accounting": report.accounting,
        "residual_worst": report.residual_worst,
        "residual_data": report.residual_data,
        "residual_exact": report.residual_exact,
        "charged": report.charged,
        "cumulative_residual": report.cumulative,
        "budget": report.budget,
        "budget_used_ratio": report.budget_used_ratio,
        "epsilon_spent": report.epsilon_spent,
        "delta": report.delta,
        "retrained": report.retrained,
        "retrain_reason": report.retrain_reason,
        "retrain_newton_iterations": report.retrain_iterations,
        "retained": report.retained,
    }


def apply_batch(
    fed: Federation, state: StreamState, index: int, batch: list[DeletionRequest]
) -> dict[str, Any]:
    """Apply one batch; returns its event record (also appended to ``state.events``)."""
    tick = batch[0].tick
    if state.monitor is None:
        t = time.perf_counter()
        state.monitor = RunMonitor.start(fed)  # baselines frozen before the first deletion
        monitor_seconds = time.perf_counter() - t
    else:
        monitor_seconds = None
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
        state.receipts.append(receipt(req, reason, fed.head, report, applied_at))
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
        "latency_seconds": [(applied_at - r.requested_at).total_seconds() for r in batch],
        "clients": {str(k): v for k, v in sorted(fed.head_data.last_routing.items())}
        if ids
        else {},
    }
    if report is not None:
        event.update(removal_fields(report), model_version=report.model_version)
        event["timings"] = report.timings
        event["certificate"] = certificate_section(fed, report)
        event["decorrelation"] = weight_reports(fed, sorted(fed.head_data.last_routing))
    if monitor_seconds is not None:
        event.setdefault("timings", {})["monitor_start"] = monitor_seconds
    _evaluate_batch(fed, state, index, tick, event)
    state.events.append(event)
    return event


def certificate_section(fed: Federation, report: RemovalReport) -> dict[str, Any]:
    """Certificate metrics after a removal (``simulator.metrics.certificate``)."""
    h = fed.scenario.head
    status = certificate_status(
        accounting=report.accounting,
        cumulative=report.cumulative,
        sigma=h.sigma,
        epsilon=h.epsilon,
        delta=h.delta,
        residual={
            "worst": report.residual_worst,
            "data": report.residual_data,
            "exact": report.residual_exact,
        },
    )
    return {**asdict(status), "retrains": fed.head.retrains}


def weight_reports(fed: Federation, clients: Sequence[int]) -> dict[str, dict[str, float]]:
    """The listed clients' latest decorrelation fits (n_eff/n, weight range, class masses)."""
    out: dict[str, dict[str, float]] = {}
    for cid in clients:
        client = fed.clients.get(cid)
        report = None if client is None else client.last_weights
        if report is not None:
            out[str(cid)] = report.to_flat()
    return out


def _evaluate_batch(
    fed: Federation, state: StreamState, index: int, tick: int, event: dict[str, Any]
) -> None:
    """Cheap metrics every ``evaluation.every`` batches and at checkpoints, then references.

    At a checkpoint the LiRA references are retrained first, so the current head and the
    retrained one are attacked with the same references.
    """
    cfg = fed.scenario.evaluation
    monitor = state.monitor
    assert monitor is not None
    timings: dict[str, float] = event.setdefault("timings", {})
    due: list[int] = []
    while (
        cfg.retrain_reference
        and state.next_checkpoint + len(due) < len(cfg.checkpoints)
        and len(state.forgotten) >= cfg.checkpoints[state.next_checkpoint + len(due)]
    ):
        due.append(cfg.checkpoints[state.next_checkpoint + len(due)])
    if due:
        timings["lira_references"] = monitor.refresh_references(index + 1)
    if index % cfg.every == 0 or due:
        t = time.perf_counter()
        event["metrics"] = evaluate(fed, tick, state.forgotten)
        timings["evaluation_utility"] = time.perf_counter() - t
        sets = monitor.sample_sets(state.forgotten, index)
        privacy, model_drift, extra = monitor.model_sections(fed.head.W, sets, tick, index)
        timings.update(extra)
        t = time.perf_counter()
        drift = monitor.data_drift(sets, tick, index)
        drift["label"].update(model_drift["label"])
        timings["evaluation_drift"] = time.perf_counter() - t
        drift["detections"] = monitor.detect(event["metrics"].get("accuracy_test"), privacy)
        event["privacy"], event["drift"] = privacy, drift
        stages = ("evaluation_utility", "evaluation_mia", "evaluation_drift")
        timings["evaluation"] = sum(timings.get(k, 0.0) for k in stages)
    if due:
        t = time.perf_counter()
        ref = reference(fed, tick, monitor=monitor, forgotten=state.forgotten, index=index)
        timings["reference"] = time.perf_counter() - t
        for checkpoint in due:  # several thresholds passed in one batch share one reference
            event.setdefault("checkpoints", []).append({"checkpoint": checkpoint, **ref})
            state.next_checkpoint += 1


def run_stream(
    fed: Federation, state: StreamState, on_batch: Callable[[dict[str, Any]], None] | None = None
) -> StreamState:
    """Consume the whole generated stream."""
    for i, batch in enumerate(iterate_batches(fed)):
        event = apply_batch(fed, state, i, batch)
        if on_batch is not None:
            on_batch(event)
    return state
