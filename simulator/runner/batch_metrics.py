"""Sections of a deletion batch's event.

The removal, the certificate, the weights, and the
evaluation the scenario schedules (``evaluation.every`` batches and ``evaluation.checkpoints``,
with ``evaluation.audit`` the membership audit of :mod:`simulator.runner.run_audit` there).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from simulator.errors import InputError
from simulator.head import RemovalReport
from simulator.metrics import certificate_status
from simulator.runner.federation import Federation
from simulator.runner.run_audit import audit_checkpoint
from simulator.runner.run_state import RunState
from simulator.runner.scoring import evaluate, reference


def removal_fields(report: RemovalReport) -> dict[str, Any]:
    """The event fields describing one certified removal (shared with the Kafka consumer)."""
    return {
        "accounting": report.accounting,
        "residual_worst": report.residual_worst,
        "residual_data": report.residual_data,
        "residual_tight": report.residual_tight,
        "residual_exact": report.residual_exact,
        "anchored": report.anchored,
        "corrections": report.corrections,
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
            "tight": report.residual_tight,
            "exact": report.residual_exact,
        },
    )
    scope = fed.certificate_scope(status.epsilon_spent)
    return {
        **asdict(status),
        "retrains": fed.head.retrains,
        "scope": scope.scope,
        "extractor_data": scope.extractor_data,
        "total_epsilon_spent": scope.total_epsilon,
        "total_delta": scope.total_delta,
        "scope_uncovered": scope.uncovered,
        "scope_reason": scope.reason,
    }


def weight_reports(fed: Federation, clients: Sequence[int]) -> dict[str, dict[str, float]]:
    """The listed clients' latest decorrelation fits (n_eff/n, weight range, class masses)."""
    out: dict[str, dict[str, float]] = {}
    for cid in clients:
        client = fed.clients.get(cid)
        report = None if client is None else client.last_weights
        if report is not None:
            out[str(cid)] = report.to_flat()
    return out


def evaluate_batch(fed: Federation, run: RunState, tick: int, event: dict[str, Any]) -> None:
    """Cheap metrics every ``evaluation.every`` batches and at checkpoints, then references.

    At a checkpoint the LiRA references are retrained first, so the current head and the
    retrained one are attacked with the same references.
    """
    cfg = fed.scenario.evaluation
    monitor = run.monitor
    if monitor is None:
        raise InputError("the run's monitor is started before its first batch (apply_batch)")
    timings: dict[str, float] = event.setdefault("timings", {})
    due: list[int] = []
    while (
        cfg.retrain_reference
        and run.next_checkpoint + len(due) < len(cfg.checkpoints)
        and len(run.forgotten) >= cfg.checkpoints[run.next_checkpoint + len(due)]
    ):
        due.append(cfg.checkpoints[run.next_checkpoint + len(due)])
    if due and "lira" in cfg.attacks:
        run.step("LiRA references")
    if due:
        timings["lira_references"] = monitor.refresh_references(run.batches + 1)
    if run.batches % cfg.every == 0 or due:
        run.step("evaluation")
        t = time.perf_counter()
        event["metrics"] = evaluate(fed, tick, run.forgotten)
        timings["evaluation_utility"] = time.perf_counter() - t
        sets = monitor.sample_sets(run.forgotten, run.batches)
        privacy, model_drift, extra = monitor.model_sections(fed.head.W, sets, tick, run.batches)
        timings.update(extra)
        t = time.perf_counter()
        drift = monitor.data_drift(sets, tick, run.batches)
        drift["label"].update(model_drift["label"])
        timings["evaluation_drift"] = time.perf_counter() - t
        drift["detections"] = monitor.detect(event["metrics"].get("accuracy_test"), privacy)
        event["privacy"], event["drift"] = privacy, drift
        stages = ("evaluation_utility", "evaluation_mia", "evaluation_drift")
        timings["evaluation"] = sum(timings.get(k, 0.0) for k in stages)
    if due:
        run.step(f"reference retrain at {due[-1]} removals")
        t = time.perf_counter()
        ref = reference(fed, tick, monitor=monitor, forgotten=run.forgotten, index=run.batches)
        timings["reference"] = time.perf_counter() - t
        audit: dict[str, Any] = {}
        if cfg.audit:  # where does it leak? (simulator.runner.run_audit)
            run.step(f"membership audit at {due[-1]} removals")
            t = time.perf_counter()
            audit = {"audit": audit_checkpoint(fed, run.forgotten, due[-1])}
            timings["audit"] = time.perf_counter() - t
        for checkpoint in due:  # several thresholds passed in one batch share one reference
            event.setdefault("checkpoints", []).append({"checkpoint": checkpoint, **ref, **audit})
            run.next_checkpoint += 1
