"""How good the head is: utility on every split, and the exactly retrained reference ``A(D')``.

``evaluate`` scores the current head (accuracy, weighted F1) on every evaluation split and on
the retain / forget probes; ``reference`` retrains ``A(D')`` (weights fitted cold, head trained
from scratch with the same ``b``) and checks the certificate against it (``method.md``
section 2).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.federation.client import cold_fit as fit_cold
from simulator.head import LocalHeadData, predict_classes, train_head
from simulator.head.certificate import stacked_norm
from simulator.head.logistic import StatisticsRequest, objective_gradient
from simulator.metrics import accuracy, prediction_agreement, relative_distance, weighted_f1
from simulator.runner.federation import Federation
from simulator.runner.monitoring import RunMonitor
from simulator.runner.shards import weighting_plan

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


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


def retrain_objective(fed: Federation, features: FloatArray | None = None) -> ColdFit:
    """Fit every client's weights from scratch on its retained rows, on the server's features.

    This is what a retrain from scratch on ``D'`` does (``method.md`` section 2), computed
    independently of the clients, whatever the transport. ``features``: every training row's
    head features under another extractor (default: the run's own, ``fed.train_features``);
    the membership audit's model (a) fits on those of an extractor retrained on ``D'``.
    """
    Z = fed.train_features if features is None else features
    ids_parts, weight_parts, gap = [], [], 0.0
    for cid, client in sorted(fed.clients.items()):
        ids, current = client.retained_weights()
        plan = weighting_plan(fed.scenario, cid)
        cold = np.ones(ids.size)
        if plan is not None and ids.size >= 2:
            fit = fit_cold(plan, Z[ids], fed.dataset.y_train[ids])
            cold = np.asarray(fit.weights, dtype=np.float64)
        if ids.size:
            gap = max(gap, float(np.max(np.abs(cold - current))))
        ids_parts.append(ids)
        weight_parts.append(cold)
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, dtype=np.int64)
    weights = np.concatenate(weight_parts) if weight_parts else np.zeros(0)
    order = np.argsort(ids)
    ids, weights = ids[order], weights[order]
    data = LocalHeadData(Z[ids], fed.dataset.y_train[ids], fed.dataset.num_classes, weights=weights)
    return ColdFit(data, gap)


def retrained_head(fed: Federation) -> tuple[FloatArray, float, dict[str, float]]:
    """``A(D')``: weights fitted cold and the head trained from scratch with the same ``b``.

    Returns the head, the seconds it took, and the certificate checked against it: the released
    head's exact residual on ``A(D')``'s objective (``residual_against_cold_fit``, which the
    budget must cover) and the clients' weight gap to the cold fit.
    """
    t = time.perf_counter()
    ref = retrain_objective(fed)
    cfg = fed.head.config
    trained = train_head(ref.data, fed.head.b, lam=cfg.lam, tol=cfg.tol)
    seconds = time.perf_counter() - t
    W = fed.head.W
    stats = ref.data.statistics(StatisticsRequest(W))
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
