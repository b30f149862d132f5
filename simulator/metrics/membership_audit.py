"""The membership audit's machinery on plain arrays, shared by ``compare --audit`` and ``run``.

Three models at the same retained rows ``D'`` are attacked alike (``docs/comparison.md``,
"Where does it leak?"): (a) ``retrained``, extractor and head trained from scratch on ``D'``;
(b) ``same_extractor``, the unlearned model's extractor with the head trained from scratch on
``D'`` (``A(D')`` of ``docs/certified-head.md``); (c) ``unlearned``, the released head. Each
is attacked on the same members (removed rows) and non-members (the test split), at most
``max_samples`` of each (:func:`draw_targets`): the population threshold attacks of
:mod:`simulator.metrics.mia` and offline LiRA (:mod:`simulator.metrics.lira`), whose reference
heads are trained on random halves of ``D'`` on the attacked model's own features
(:func:`extractor_view`). The ROC AUC of each attack and the test accuracy are the numbers
(:func:`attack_head`). How the two commands get their models is theirs
(:mod:`simulator.compare.audit`, :mod:`simulator.runner.run_audit`); everything here takes
arrays, so both score them the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from simulator.arrays import FloatArray, IntArray
from simulator.errors import ConfigError, InputError
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData, train_head
from simulator.metrics.lira import (
    LiraReferences,
    lira_scores,
    out_mask_for,
    reference_phi,
    train_references,
)
from simulator.metrics.mia import threshold_attacks
from simulator.metrics.roc import roc_auc
from simulator.metrics.scores import (
    THRESHOLD_ATTACKS,
    class_probabilities,
    membership_scores,
)
from simulator.metrics.utility import accuracy

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
        Rows removed (the removed set the models were scored at).
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
class AuditTargets:
    """The attacked rows: removed-row ids (training rows) and test-row indices."""

    members: IntArray
    holdout: IntArray


@dataclass(frozen=True, eq=False)
class AuditData:
    """What every extractor of one audit shares: labels, ``D'`` and the attacked rows.

    Attributes
    ----------
    train_y, test_y : ndarrays of int
        Labels of every training row and of every test row.
    num_classes : int
    rows : ndarray of int
        The retained rows ``D'`` (training row ids).
    targets : AuditTargets
        The attacked rows (:func:`draw_targets`).
    """

    train_y: IntArray
    test_y: IntArray
    num_classes: int
    rows: IntArray
    targets: AuditTargets


def draw_targets(
    removed: IntArray, n_test: int, config: AuditConfig, rng: np.random.Generator
) -> AuditTargets:
    """Equal numbers of removed rows and test rows, drawn by ``rng`` (members first).

    Raises
    ------
    InputError
        No removed row or no test row.
    """
    k = min(removed.size, n_test, config.max_samples)
    if k == 0:
        raise InputError("the audit needs removed rows and test rows")
    members = np.sort(rng.choice(removed, size=k, replace=False))
    holdout = np.sort(rng.choice(n_test, size=k, replace=False))
    return AuditTargets(members.astype(np.int64), holdout.astype(np.int64))


def audit_data(  # noqa: PLR0913 (the labels, the rows, and the draw of the attacked rows)
    train_y: IntArray,
    test_y: IntArray,
    num_classes: int,
    *,
    rows: IntArray,
    removed: IntArray,
    config: AuditConfig,
    rng: np.random.Generator,
) -> AuditData:
    """The audit's labels, its retained rows ``rows`` and attacked rows drawn by ``rng``.

    Members from ``removed``, non-members from the test split (:func:`draw_targets`).

    Raises
    ------
    InputError
        No removed row or no test row.
    """
    targets = draw_targets(removed, int(test_y.size), config, rng)
    return AuditData(train_y, test_y, num_classes, rows, targets)


def head_from_scratch(head: CertifiedHead, features: FloatArray, rows: IntArray) -> FloatArray:
    """The head the method trains from scratch on ``rows`` of ``features``.

    Parameters
    ----------
    head : CertifiedHead
        The method's head: its objective (``lam``, ``tol``), its perturbation ``b`` (Guo et
        al., ICML 2020, eq. 2) and its re-weighting (DecoRemoval's cold decorrelation fit;
        none: uniform weights). Its rows must be held locally (a compare method's head).
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


@dataclass(frozen=True, eq=False)
class ExtractorView:
    """One extractor's view of the audit: features and its LiRA references' ``phi``.

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


def extractor_view(
    train: FloatArray,
    test: FloatArray,
    data: AuditData,
    *,
    head: HeadConfig,
    audit: AuditConfig,
    rng: np.random.Generator,
) -> ExtractorView:
    """``audit.references`` LiRA reference heads on ``train``'s rows of ``D'`` and their phi.

    The references have the head's ``lam``, ``sigma`` and ``tol``, each trained on a random
    half of ``data.rows`` drawn by ``rng`` (:func:`~simulator.metrics.lira.train_references`).
    """
    refs = train_references(
        train,
        data.train_y,
        data.rows,
        data.num_classes,
        count=audit.references,
        lam=head.lam,
        sigma=head.sigma,
        rng=rng,
        tol=head.tol,
    )
    t = data.targets
    return ExtractorView(
        train,
        test,
        refs,
        reference_phi(refs, train[t.members], data.train_y[t.members]),
        reference_phi(refs, test[t.holdout], data.test_y[t.holdout]),
    )


def attack_head(
    W: FloatArray, view: ExtractorView, data: AuditData
) -> tuple[dict[str, float], float]:
    """Every attack's AUC and the test accuracy of the head ``W`` on ``view``'s features."""
    t = data.targets
    ym, yh = data.train_y[t.members], data.test_y[t.holdout]
    member_scores = membership_scores(view.train[t.members] @ W, ym)
    holdout_scores = membership_scores(view.test[t.holdout] @ W, yh)
    aucs = {a: s.auc for a, s in threshold_attacks(member_scores, holdout_scores).items()}
    refs = view.references
    lira_members = lira_scores(
        refs, member_scores.phi, view.phi_members, out_mask_for(refs, t.members, ym.size)
    )
    lira_holdout = lira_scores(
        refs, holdout_scores.phi, view.phi_holdout, out_mask_for(refs, None, yh.size)
    )
    aucs["lira"] = roc_auc(lira_members, lira_holdout)
    predicted = np.argmax(class_probabilities(view.test @ W), axis=1)
    return aucs, accuracy(data.test_y, np.asarray(predicted, dtype=np.int64))


@dataclass(frozen=True)
class ScoredAt:
    """Which method and seed the three models belong to, at how many removals, how long."""

    method: str
    seed: int
    removed: int
    seconds: float


Attacked = dict[str, tuple[dict[str, float], float]]


def attack_models(heads: dict[str, tuple[FloatArray, ExtractorView]], data: AuditData) -> Attacked:
    """:func:`attack_head` of every model (``heads``: its head and extractor view)."""
    return {model: attack_head(W, view, data) for model, (W, view) in heads.items()}


def score_models(
    heads: dict[str, tuple[FloatArray, ExtractorView]],
    data: AuditData,
    *,
    method: str,
    seed: int,
    removed: int,
    started: float,
) -> list[AuditScore]:
    """Attack every model of ``heads`` alike and score each (:func:`audit_scores`).

    ``heads``: each model's head and extractor view; ``method``, ``seed`` and ``removed`` (how
    many rows were removed) label the scores; ``started``: the audit's ``time.perf_counter()``
    at its start, for the seconds it took.
    """
    attacked = attack_models(heads, data)
    at = ScoredAt(method, seed, removed, time.perf_counter() - started)
    return audit_scores(attacked, data, at)


def audit_scores(attacked: Attacked, data: AuditData, at: ScoredAt) -> list[AuditScore]:
    """One :class:`AuditScore` per model of :data:`MODELS`, in that order."""
    out = []
    for model in MODELS:
        aucs, acc = attacked[model]
        out.append(
            AuditScore(
                method=at.method,
                seed=at.seed,
                model=model,
                removed=at.removed,
                auc=aucs,
                acc_test=acc,
                members=int(data.targets.members.size),
                nonmembers=int(data.targets.holdout.size),
                seconds=at.seconds,
            )
        )
    return out
