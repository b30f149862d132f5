"""Run unlearning methods on identical workloads and measure them at the same removal counts.

For every seed and method: :meth:`fit` on all training rows, then the workload's removal steps
in order; at each checkpoint (and before the first removal) the method is measured:

* utility on every evaluation split of the workload (``test``, ``label_swap``, the shifted
  splits): accuracy ``acc_<split>`` and weighted F1 ``f1_<split>`` (the paper's ACC and F1,
  Sec. 4.1; :mod:`simulator.metrics.utility`) and the mean top-class probability
  ``conf_<split>``; on a split without task labels (``remaining``: classes the model was not
  trained on) what the model predicts: ``conf_<split>``, the share of its most predicted class
  ``top_<split>`` and, for a binary task, the share predicted as the second class
  ``pos_<split>`` (e.g. "8" for MNIST 3 vs 8);
* cost: the removal seconds summed since :meth:`fit` (wall clock of :meth:`remove` only), the
  number of :meth:`remove` calls and of fallbacks to retraining;
* privacy: ROC AUC of a loss-threshold membership attack (Yeom et al., CSF 2018): the score
  ``log p_y`` of every method's own class probabilities, members = samples removed so far,
  non-members = the in-distribution test split, equal numbers drawn by a seeded generator
  (:func:`simulator.metrics.roc.roc_auc`). The retrained model's value is the target;
* closeness to retrain: the share of predictions (all labelled splits) that differ from
  ``retrain``'s at the same checkpoint and seed, and the in-distribution test accuracy gap
  ``acc_gap`` (added by :func:`attach_retrain`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.compare.audit import AuditConfig, AuditScore, SeedAudit
from simulator.compare.provenance import Provenance
from simulator.compare.workload import Workload
from simulator.errors import InputError
from simulator.metrics.roc import roc_auc
from simulator.metrics.utility import accuracy, weighted_f1
from simulator.seeds import child_rng
from simulator.unlearners import BaseUnlearner, create_unlearner

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
#: Most members (and as many non-members) one membership AUC uses.
MIA_SAMPLES = 1000
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Measurement:
    """One method, one seed, one checkpoint (module docstring). NaN where a number does not apply.

    Attributes
    ----------
    method, seed, removed
        Which method, which seed, after how many removals.
    scores : dict of str to float
        Split scores (``acc_test``, ``f1_label_swap``, ``conf_remaining``, ...).
    removal_seconds, removal_calls, retrains, fit_seconds
        The :class:`Cost` so far.
    mia_auc : float
        Loss-threshold membership attack AUC, removed rows vs the test split.
    disagreement, acc_gap : float
        Closeness to ``retrain`` at the same point (:func:`attach_retrain`).
    predictions : dict of str to ndarray
        Predicted classes on every labelled split (for :func:`attach_retrain`; not stored).
    """

    method: str
    seed: int
    removed: int
    scores: dict[str, float]
    removal_seconds: float
    removal_calls: int
    retrains: int
    mia_auc: float
    fit_seconds: float
    disagreement: float = float("nan")
    acc_gap: float = float("nan")
    predictions: dict[str, IntArray] = field(default_factory=dict, repr=False, compare=False)

    def value(self, key: str) -> float:
        """A fixed metric (``removal_seconds``) or a split score (``acc_test``); NaN if absent."""
        if key in self.scores:
            return self.scores[key]
        got = getattr(self, key, None)
        return float(got) if isinstance(got, int | float) else float("nan")

    @property
    def acc_test(self) -> float:
        """In-distribution test accuracy."""
        return self.value("acc_test")


@dataclass(frozen=True)
class FitRecord:
    """What :meth:`fit` reported for one method and seed.

    Attributes
    ----------
    method, seed
        Which fit.
    seconds : float
        Wall clock of :meth:`fit`.
    info : dict of str to float
        The method's own numbers (budget, weight spread, shards, ...).
    notes : tuple of str
        What the results of this method must say (e.g. what its certificate does not cover).
    """

    method: str
    seed: int
    seconds: float
    info: dict[str, float]
    notes: tuple[str, ...]


def membership_auc(
    unlearner: BaseUnlearner[Any], forget: IntArray, workload: Workload, rng: np.random.Generator
) -> float:
    """Loss-threshold attack AUC, forget set vs test split (module docstring); NaN if empty."""
    test = workload.splits["test"]
    k = min(forget.size, test.y.size, MIA_SAMPLES)
    if k == 0:
        return float("nan")
    members = np.sort(rng.choice(forget, size=k, replace=False))
    holdout = np.sort(rng.choice(test.y.size, size=k, replace=False))
    train = workload.train

    def log_py(x: NDArray[Any], y: IntArray) -> FloatArray:
        p = unlearner.predict_proba(x)[np.arange(y.size), y]
        return np.log(np.clip(p, 1e-12, 1.0))

    return roc_auc(
        log_py(train.x[members], train.y[members]), log_py(test.x[holdout], test.y[holdout])
    )


@dataclass(frozen=True)
class Cost:
    """What a method has spent since :meth:`fit`: the cost columns of a :class:`Measurement`.

    Attributes
    ----------
    removal_seconds : float
        Wall clock of its :meth:`remove` calls, summed.
    removal_calls : int
        Number of :meth:`remove` calls.
    retrains : int
        Number of those that fell back to retraining.
    fit_seconds : float
        What :meth:`fit` reported.
    """

    removal_seconds: float
    removal_calls: int
    retrains: int
    fit_seconds: float


def measure(
    unlearner: BaseUnlearner[Any],
    workload: Workload,
    *,
    removed: int,
    forget: IntArray,
    cost: Cost,
) -> Measurement:
    """Evaluate ``unlearner`` now (see the module docstring).

    Parameters
    ----------
    unlearner : BaseUnlearner
        The method, fitted, after its removals so far.
    workload : Workload
        The seed's data and evaluation splits.
    removed : int
        The removal count of this checkpoint.
    forget : ndarray of int
        The sample ids removed so far (the membership attack's members).
    cost : Cost
        What the method has spent so far.

    Returns
    -------
    Measurement
        The scores of every split, the cost and the membership attack's AUC.
    """
    scores: dict[str, float] = {}
    predictions: dict[str, IntArray] = {}
    for split, data in workload.splits.items():
        proba = unlearner.predict_proba(data.x)
        pred = np.asarray(np.argmax(proba, axis=1), dtype=np.int64)
        scores[f"conf_{split}"] = float(proba.max(axis=1).mean()) if pred.size else float("nan")
        if data.labelled:
            predictions[split] = pred
            scores[f"acc_{split}"] = accuracy(data.y, pred)
            scores[f"f1_{split}"] = weighted_f1(data.y, pred)
        else:
            shares = np.bincount(pred, minlength=proba.shape[1]) / max(pred.size, 1)
            scores[f"top_{split}"] = float(shares.max())
            if proba.shape[1] == 2:
                scores[f"pos_{split}"] = float(shares[1])
    rng = child_rng(workload.seed, "mia", unlearner.name, removed)
    return Measurement(
        method=unlearner.name,
        seed=workload.seed,
        removed=removed,
        removal_seconds=cost.removal_seconds,
        removal_calls=cost.removal_calls,
        retrains=cost.retrains,
        mia_auc=membership_auc(unlearner, forget, workload, rng),
        fit_seconds=cost.fit_seconds,
        predictions=predictions,
        scores=scores,
    )


def run_method(
    name: str,
    workload: Workload,
    *,
    options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    keep: Callable[[BaseUnlearner[Any]], None] | None = None,
) -> tuple[list[Measurement], FitRecord]:
    """Fit one method on ``workload`` and walk its removal steps, measuring at checkpoints.

    ``keep`` receives the method's model after its last removal (the audit's; it is dropped
    otherwise).
    """
    unlearner = create_unlearner(name, workload.settings, **dict(options or {}))
    report = unlearner.fit(workload.train, seed=workload.seed)
    out: list[Measurement] = []
    seconds, retrains = 0.0, 0
    removed: list[IntArray] = []

    def snapshot(calls: int) -> None:
        forget = np.concatenate(removed) if removed else np.zeros(0, dtype=np.int64)
        out.append(
            measure(
                unlearner,
                workload,
                removed=workload.evaluate_after[calls],
                forget=forget,
                cost=Cost(seconds, calls, retrains, report.seconds),
            )
        )
        if progress is not None:
            progress(f"{name} seed {workload.seed}: {forget.size} removed")

    snapshot(0)
    for i, ids in enumerate(workload.steps, start=1):
        outcome = unlearner.remove(ids)
        seconds += outcome.seconds
        retrains += int(outcome.retrained)
        removed.append(ids)
        if i in workload.evaluate_after:
            snapshot(i)
    if keep is not None:
        keep(unlearner)
    return out, FitRecord(name, workload.seed, report.seconds, report.info, report.notes)


def attach_retrain(measurements: Sequence[Measurement]) -> list[Measurement]:
    """Fill ``disagreement`` and ``acc_gap`` from ``retrain``'s measurement at the same point."""
    reference = {(m.seed, m.removed): m for m in measurements if m.method == "retrain"}
    out = []
    for m in measurements:
        ref = reference.get((m.seed, m.removed))
        if ref is None:
            out.append(m)
            continue
        differ = [
            np.asarray(m.predictions[s] != ref.predictions[s])
            for s in m.predictions
            if s in ref.predictions
        ]
        share = float(np.concatenate(differ).mean()) if differ else float("nan")
        out.append(replace(m, disagreement=share, acc_gap=m.acc_test - ref.acc_test))
    return out


@dataclass(frozen=True)
class Comparison:
    """Every measurement and fit record of a comparison, plus notes and its wall time.

    ``audit`` holds the membership audit's scores (:mod:`simulator.compare.audit`; empty when
    it was not asked for) and ``audit_skipped`` the methods it could not audit.
    ``provenance`` is the extractor's (:mod:`simulator.compare.provenance`).
    """

    scenario: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    measurements: tuple[Measurement, ...]
    fits: tuple[FitRecord, ...]
    notes: tuple[str, ...]
    seconds: float
    split_notes: tuple[str, ...] = ()
    audit: tuple[AuditScore, ...] = ()
    audit_skipped: tuple[str, ...] = ()
    provenance: Provenance = field(default_factory=Provenance)


def _seeded_workloads(
    workloads: Sequence[Workload] | Callable[[int], Workload], seeds: Sequence[int] | None
) -> tuple[Callable[[int], Workload], list[int]]:
    """A function of the seed that gives its workload, and the seeds in order."""
    if callable(workloads):
        if seeds is None:
            raise InputError("seeds are needed when workloads is a function")
        return workloads, list(seeds)
    given = list(workloads)
    by_seed = {w.seed: w for w in given}
    return by_seed.__getitem__, [w.seed for w in given]


def run_comparison(  # noqa: PLR0913 (the workloads and methods, then keyword-only options)
    workloads: Sequence[Workload] | Callable[[int], Workload],
    methods: Sequence[str],
    *,
    seeds: Sequence[int] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress | None = None,
    on_seed: Callable[[Comparison], None] | None = None,
    audit: AuditConfig | None = None,
) -> Comparison:
    """Run ``methods`` on every workload (one per seed); see the module docstring.

    ``workloads`` is a list, or a function of the seed that builds one (with ``seeds``), so a
    long comparison holds one seed's data at a time. ``on_seed`` receives the comparison of
    the seeds finished so far after each seed (to write partial results of a long run).
    ``audit`` also scores every head-based method's final model against the ``retrain``
    baseline's (:class:`~simulator.compare.audit.SeedAudit`).
    """
    started = time.perf_counter()
    make, seed_list = _seeded_workloads(workloads, seeds)
    measurements: list[Measurement] = []
    fits: list[FitRecord] = []
    notes: list[str] = []
    scenario = ""
    split_notes: tuple[str, ...] = ()
    audited: list[AuditScore] = []
    skipped: list[str] = []
    provenance = Provenance()

    def so_far(done: Sequence[int]) -> Comparison:
        return Comparison(
            scenario,
            tuple(methods),
            tuple(done),
            tuple(attach_retrain(measurements)),
            tuple(fits),
            tuple(notes),
            time.perf_counter() - started,
            split_notes,
            tuple(audited),
            tuple(dict.fromkeys(skipped)),
            provenance,
        )

    for i, seed in enumerate(seed_list):
        workload = make(seed)
        scenario = workload.scenario.name
        provenance = Provenance.of(workload)
        split_notes = workload.split_notes
        notes.extend(n for n in workload.notes if n not in notes)
        auditor = SeedAudit(workload, audit) if audit is not None else None
        for name in methods:
            got, fit = run_method(
                name,
                workload,
                options=(options or {}).get(name),
                progress=progress,
                keep=None if auditor is None else auditor.add,
            )
            measurements.extend(got)
            fits.append(fit)
            notes.extend(f"{name}: {n}" for n in fit.notes if f"{name}: {n}" not in notes)
        if auditor is not None:
            audited.extend(auditor.finish())
            skipped.extend(auditor.skipped)
        if on_seed is not None:
            on_seed(so_far(seed_list[: i + 1]))
    return so_far(seed_list)
