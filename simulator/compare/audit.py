"""Where does membership leak? Three models at the same removed set, attacked alike.

The certified head's guarantee covers the linear head only: the extractor was trained on every
row, the deleted ones included (``docs/comparison.md``). To tell which part still carries the
deleted rows, every head-based method of a comparison (``cr``, ``decoremoval``, ...) is scored
at the final removed set of each seed (the retained rows ``D'``), as three models:

* ``retrained`` (a): retrained from scratch, extractor included. The extractor and RFF map are
  the ``retrain`` baseline's, trained on ``D'`` (the expensive part, reused); the head is the
  method's own objective on them: its sample weights fitted cold on ``D'`` (uniform for
  ``cr``), the same perturbation ``b`` (Guo et al., ICML 2020, eq. 2), trained to the exact
  minimiser (:func:`simulator.head.train_head`). That is what the method run from scratch on
  ``D'`` releases, so (a) and (b) differ only in the extractor.
* ``same_extractor`` (b): the unlearned model's extractor and RFF map (trained on all rows),
  the head trained the same way from scratch on ``D'`` (the head the certificate compares the
  released one with: ``A(D')`` of ``docs/certified-head.md``);
* ``unlearned`` (c): the method's model after its removals, as the comparison measured it.

Each is attacked on the same members (removed rows) and non-members (the in-distribution test
split), at most ``max_samples`` of each drawn by one generator per seed: the population
threshold attacks of :mod:`simulator.metrics.mia` (``loss``, ``confidence``, ``entropy``,
``modified_entropy``) and offline LiRA (:mod:`simulator.metrics.lira`), whose reference heads
are trained on random halves of ``D'`` on the attacked model's own features (so (b) and (c)
share them). The ROC AUC of each attack is the number reported; :mod:`simulator.compare.leak`
turns the seeds' AUCs into the answer "head", "extractor" or "neither". The scoring itself
(targets, references, attacks, the head from scratch) is
:mod:`simulator.metrics.membership_audit`, shared with ``unlearnsim run --audit``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.compare.workload import Workload
from simulator.errors import ConfigError, InputError
from simulator.head import CertifiedHead
from simulator.metrics.membership_audit import (
    ATTACKS,
    MODEL_LABELS,
    MODELS,
    AuditConfig,
    AuditData,
    AuditScore,
    AuditTargets,
    ExtractorView,
    audit_data,
    extractor_view,
    head_from_scratch,
    score_models,
)
from simulator.models.featurizer import Featurizer
from simulator.seeds import child_rng
from simulator.unlearners import BaseUnlearner
from simulator.unlearners.headbased import CertifiedHeadUnlearner
from simulator.unlearners.retrain import Retrain

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

__all__ = [
    "ATTACKS",
    "MODELS",
    "MODEL_LABELS",
    "AuditConfig",
    "AuditScore",
    "ExtractorViews",
    "SeedAudit",
    "audit_method",
    "head_from_scratch",
]


def _data(workload: Workload, rows: IntArray, removed: IntArray, config: AuditConfig) -> AuditData:
    """The seed's labels, ``D'`` and attacked rows (drawn by the seed's audit generator)."""
    train, test = workload.train, workload.splits["test"]
    rng = child_rng(workload.seed, "audit", "targets")
    return audit_data(
        train.y, test.y, train.num_classes, rows=rows, removed=removed, config=config, rng=rng
    )


@dataclass(eq=False)
class ExtractorViews:
    """Each extractor's features and LiRA references in one seed, computed once.

    ``cr`` and ``decoremoval`` share their extractor (the comparison trains it once), and every
    method shares the retrained one, so the references (the audit's main cost) are trained
    once per extractor and seed. Entries hold their featurizer, so an id is never reused.
    """

    _views: dict[tuple[Any, ...], tuple[Featurizer, ExtractorView]] = field(default_factory=dict)

    def get(
        self,
        featurizer: Featurizer,
        head: CertifiedHead,
        workload: Workload,
        data: AuditData,
        *,
        config: AuditConfig,
        role: str,
    ) -> ExtractorView:
        """Features of ``featurizer`` and LiRA references trained on them (module docstring).

        Computed the first time, then kept. The references' generator is named by the
        extractor's ``role`` (``retrained`` or ``unlearned``), not by the method, so methods
        that share an extractor share references.
        """
        c = head.config
        targets: AuditTargets = data.targets
        key = (
            id(featurizer),
            role,
            workload.seed,
            c.lam,
            c.sigma,
            c.tol,
            config,
            data.rows.tobytes(),
            targets.members.tobytes(),
            targets.holdout.tobytes(),
        )
        if key not in self._views:
            train, test = workload.train, workload.splits["test"]
            view = extractor_view(
                featurizer(train.x),
                featurizer(test.x),
                data,
                head=c,
                audit=config,
                rng=child_rng(workload.seed, "audit", "lira", role),
            )
            self._views[key] = (featurizer, view)
        return self._views[key][1]


def audit_method(
    unlearned: CertifiedHeadUnlearner[Any],
    retrained: Featurizer,
    workload: Workload,
    config: AuditConfig | None = None,
    views: ExtractorViews | None = None,
) -> list[AuditScore]:
    """Score the three models of one head-based method at its removed set (module docstring).

    Parameters
    ----------
    unlearned : CertifiedHeadUnlearner
        The method after all of the seed's removals.
    retrained : Featurizer
        The extractor and RFF map trained from scratch on the same retained rows (the
        ``retrain`` baseline's after the same removals).
    workload : Workload
        The seed's data; its ``test`` split is the non-members.
    config : AuditConfig, optional
        References and sample sizes.
    views : ExtractorViews, optional
        Features and references already computed in this seed (shared between methods).

    Returns
    -------
    list of AuditScore
        One per model of :data:`MODELS`.
    """
    started = time.perf_counter()
    config = config or AuditConfig()
    train, test = workload.train, workload.splits["test"]
    if not test.labelled:
        raise InputError("the audit's non-members need a labelled test split")
    rows = unlearned.retained_ids
    removed = np.setdiff1d(np.arange(train.n, dtype=np.int64), rows)
    data = _data(workload, rows, removed, config)
    head = unlearned.head
    views = views if views is not None else ExtractorViews()
    own = views.get(unlearned.featurizer, head, workload, data, config=config, role="unlearned")
    fresh = views.get(retrained, head, workload, data, config=config, role="retrained")
    heads = {
        "retrained": (head_from_scratch(head, fresh.train, rows), fresh),
        "same_extractor": (head_from_scratch(head, own.train, rows), own),
        "unlearned": (head.W, own),
    }
    name, seed = unlearned.name, workload.seed
    return score_models(
        heads, data, method=name, seed=seed, removed=int(removed.size), started=started
    )


@dataclass
class SeedAudit:
    """Collects one seed's final models as the comparison finishes them, and audits them.

    Give :meth:`add` every method's unlearner after its last removal (``run_method``'s
    ``keep``); the ``retrain`` baseline's extractor is kept, and every head-based method is
    audited as soon as that extractor is known (the comparison runs ``retrain`` first), so at
    most one other method's model is held at a time.
    """

    workload: Workload
    config: AuditConfig
    scores: list[AuditScore] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    _retrained: Featurizer | None = None
    _pending: list[CertifiedHeadUnlearner[Any]] = field(default_factory=list)
    _views: ExtractorViews = field(default_factory=ExtractorViews)

    def add(self, unlearner: BaseUnlearner[Any]) -> None:
        """Keep or audit one method's final model (module docstring)."""
        if isinstance(unlearner, Retrain):
            self._retrained = unlearner.featurizer
            pending, self._pending = self._pending, []
            for other in pending:
                self._audit(other)
        elif isinstance(unlearner, CertifiedHeadUnlearner):
            if self._retrained is None:
                self._pending.append(unlearner)
            else:
                self._audit(unlearner)
        else:
            self.skipped.append(unlearner.name)

    def _audit(self, unlearner: CertifiedHeadUnlearner[Any]) -> None:
        assert self._retrained is not None
        self.scores.extend(
            audit_method(unlearner, self._retrained, self.workload, self.config, self._views)
        )

    def finish(self) -> list[AuditScore]:
        """The seed's scores.

        Raises
        ------
        ConfigError
            A head-based method was given but no ``retrain`` model to compare it with.
        """
        if self._pending:
            raise ConfigError(
                "the audit needs the retrain baseline (do not pass --no-retrain)", "--audit"
            )
        return list(self.scores)
