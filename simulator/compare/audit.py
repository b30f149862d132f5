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
turns the seeds' AUCs into the answer "head", "extractor" or "neither".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.compare.workload import Workload
from simulator.errors import ConfigError, InputError
from simulator.head import CertifiedHead, LocalHeadData, train_head
from simulator.metrics import (
    THRESHOLD_ATTACKS,
    LiraReferences,
    accuracy,
    class_probabilities,
    lira_scores,
    membership_scores,
    out_mask_for,
    reference_phi,
    roc_auc,
    threshold_attacks,
    train_references,
)
from simulator.models.featurizer import Featurizer
from simulator.seeds import child_rng
from simulator.unlearners import BaseUnlearner
from simulator.unlearners.headbased import CertifiedHeadUnlearner
from simulator.unlearners.retrain import Retrain

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: The three models, in report order (module docstring).
MODELS: tuple[str, ...] = ("retrained", "same_extractor", "unlearned")
#: How the reports name them.
MODEL_LABELS: dict[str, str] = {
    "retrained": "(a) retrained from scratch, extractor included",
    "same_extractor": "(b) same extractor, head retrained on D'",
    "unlearned": "(c) unlearned",
}
#: Every attack of the audit, in report order.
ATTACKS: tuple[str, ...] = (*THRESHOLD_ATTACKS, "lira")


@dataclass(frozen=True)
class AuditConfig:
    """How the audit attacks.

    Attributes
    ----------
    references : int
        LiRA reference heads per extractor (the scenario's ``evaluation.lira_references``).
    max_samples : int
        Most members (and as many non-members) one attack uses (the comparison's own
        membership AUC uses 1,000).
    """

    references: int = 8
    max_samples: int = 1000

    def __post_init__(self) -> None:
        if self.references < 2:
            raise ConfigError(f"need at least 2, got {self.references}", "audit.references")
        if self.max_samples < 1:
            raise ConfigError(f"must be positive, got {self.max_samples}", "audit.max_samples")


@dataclass(frozen=True)
class AuditScore:
    """One method, seed and model of the audit.

    Attributes
    ----------
    method, seed, model
        Which method, seed and model (:data:`MODELS`).
    removed : int
        Rows removed (the final removed set of the seed).
    auc : dict of str to float
        ROC AUC of every attack of :data:`ATTACKS`, removed rows vs the test split.
    acc_test : float
        The model's accuracy on the test split.
    members, nonmembers : int
        How many removed and test rows the attacks used.
    seconds : float
        Wall clock of the whole audit of this method and seed (the same on its three rows).
    """

    method: str
    seed: int
    model: str
    removed: int
    auc: dict[str, float]
    acc_test: float
    members: int
    nonmembers: int
    seconds: float = float("nan")


@dataclass(frozen=True)
class _Targets:
    """The attacked rows of one seed: removed-row ids and test-row indices."""

    members: IntArray
    holdout: IntArray


def head_from_scratch(head: CertifiedHead, features: FloatArray, rows: IntArray) -> FloatArray:
    """The head the method trains from scratch on ``rows`` of ``features`` (module docstring).

    Parameters
    ----------
    head : CertifiedHead
        The method's head: its objective (``lam``, ``tol``), its perturbation ``b`` and its
        re-weighting (DecoRemoval's cold decorrelation fit; none: uniform weights).
    features : (n, d) ndarray
        Head features of every training row (any extractor of the same dimension).
    rows : ndarray of int
        The retained rows ``D'``.
    """
    data = head.data
    if not isinstance(data, LocalHeadData):
        raise InputError("the audit needs a head whose rows are held locally")
    labels = data.labels
    reweigh = data.reweigh
    weights = None
    if reweigh is not None and rows.size >= 2:
        weights = np.asarray(reweigh(rows, features[rows], labels[rows]), dtype=np.float64)
    local = LocalHeadData(features[rows], labels[rows], data.num_classes, weights=weights)
    config = head.config
    W: FloatArray = np.asarray(train_head(local, head.b, lam=config.lam, tol=config.tol).W)
    return W


def _targets(workload: Workload, removed: IntArray, config: AuditConfig) -> _Targets:
    """Equal numbers of removed and test rows, drawn by the seed's audit generator."""
    test = workload.splits["test"]
    k = min(removed.size, test.y.size, config.max_samples)
    if k == 0:
        raise InputError("the audit needs removed rows and test rows")
    rng = child_rng(workload.seed, "audit", "targets")
    members = np.sort(rng.choice(removed, size=k, replace=False))
    holdout = np.sort(rng.choice(test.y.size, size=k, replace=False))
    return _Targets(members.astype(np.int64), holdout.astype(np.int64))


@dataclass(frozen=True, eq=False)
class _Extractor:
    """One extractor's view of the seed: features and its LiRA references' ``phi``.

    Attributes
    ----------
    train, test : (n, d) ndarrays
        Head features of every training row and of every test row.
    references : LiraReferences
        Heads trained on random halves of ``D'`` of these features.
    phi_members, phi_holdout : (R, k) ndarrays
        Every reference's ``phi`` on the attacked removed rows and test rows.
    """

    train: FloatArray
    test: FloatArray
    references: LiraReferences
    phi_members: FloatArray
    phi_holdout: FloatArray


def _extractor(  # noqa: PLR0913 (one extractor: its map, then what the references need)
    featurizer: Featurizer,
    head: CertifiedHead,
    workload: Workload,
    rows: IntArray,
    targets: _Targets,
    *,
    config: AuditConfig,
    role: str,
) -> _Extractor:
    """Features of ``featurizer`` and LiRA references trained on them (module docstring).

    The references' generator is named by the extractor's ``role`` (``retrained`` or
    ``unlearned``), not by the method, so methods that share an extractor share references.
    """
    train, test = workload.train, workload.splits["test"]
    features, test_features = featurizer(train.x), featurizer(test.x)
    refs = train_references(
        features,
        train.y,
        rows,
        train.num_classes,
        count=config.references,
        lam=head.config.lam,
        sigma=head.config.sigma,
        rng=child_rng(workload.seed, "audit", "lira", role),
        tol=head.config.tol,
    )
    return _Extractor(
        features,
        test_features,
        refs,
        reference_phi(refs, features[targets.members], train.y[targets.members]),
        reference_phi(refs, test_features[targets.holdout], test.y[targets.holdout]),
    )


@dataclass(eq=False)
class ExtractorViews:
    """Each extractor's features and LiRA references in one seed, computed once.

    ``cr`` and ``decoremoval`` share their extractor (the comparison trains it once), and every
    method shares the retrained one, so the references (the audit's main cost) are trained
    once per extractor and seed. Entries hold their featurizer, so an id is never reused.
    """

    _views: dict[tuple[Any, ...], tuple[Featurizer, _Extractor]] = field(default_factory=dict)

    def get(  # noqa: PLR0913 (the extractor, then what its references need)
        self,
        featurizer: Featurizer,
        head: CertifiedHead,
        workload: Workload,
        rows: IntArray,
        targets: _Targets,
        *,
        config: AuditConfig,
        role: str,
    ) -> _Extractor:
        """The view of ``featurizer`` (computed by :func:`_extractor` the first time)."""
        c = head.config
        key = (
            id(featurizer),
            role,
            workload.seed,
            c.lam,
            c.sigma,
            c.tol,
            config,
            rows.tobytes(),
            targets.members.tobytes(),
            targets.holdout.tobytes(),
        )
        if key not in self._views:
            view = _extractor(featurizer, head, workload, rows, targets, config=config, role=role)
            self._views[key] = (featurizer, view)
        return self._views[key][1]


def _attack(
    W: FloatArray, view: _Extractor, workload: Workload, targets: _Targets
) -> tuple[dict[str, float], float]:
    """Every attack's AUC and the test accuracy of the head ``W`` on ``view``'s features."""
    train, test = workload.train, workload.splits["test"]
    ym, yh = train.y[targets.members], test.y[targets.holdout]
    member_scores = membership_scores(view.train[targets.members] @ W, ym)
    holdout_scores = membership_scores(view.test[targets.holdout] @ W, yh)
    aucs = {a: s.auc for a, s in threshold_attacks(member_scores, holdout_scores).items()}
    refs = view.references
    lira_members = lira_scores(
        refs, member_scores.phi, view.phi_members, out_mask_for(refs, targets.members, ym.size)
    )
    lira_holdout = lira_scores(
        refs, holdout_scores.phi, view.phi_holdout, out_mask_for(refs, None, yh.size)
    )
    aucs["lira"] = roc_auc(lira_members, lira_holdout)
    predicted = np.argmax(class_probabilities(view.test @ W), axis=1)
    return aucs, accuracy(test.y, np.asarray(predicted, dtype=np.int64))


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
    targets = _targets(workload, removed, config)
    head = unlearned.head
    views = views if views is not None else ExtractorViews()
    own = views.get(
        unlearned.featurizer, head, workload, rows, targets, config=config, role="unlearned"
    )
    fresh = views.get(retrained, head, workload, rows, targets, config=config, role="retrained")
    heads = {
        "retrained": (head_from_scratch(head, fresh.train, rows), fresh),
        "same_extractor": (head_from_scratch(head, own.train, rows), own),
        "unlearned": (head.W, own),
    }
    attacked = {model: _attack(W, view, workload, targets) for model, (W, view) in heads.items()}
    seconds = time.perf_counter() - started
    out = []
    for model in MODELS:
        aucs, acc = attacked[model]
        out.append(
            AuditScore(
                method=unlearned.name,
                seed=workload.seed,
                model=model,
                removed=int(removed.size),
                auc=aucs,
                acc_test=acc,
                members=int(targets.members.size),
                nonmembers=int(targets.holdout.size),
                seconds=seconds,
            )
        )
    return out


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
