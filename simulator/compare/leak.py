"""The audit's answer: membership leaks through the head, the extractor, or neither.

From the seeds' membership AUCs of the three models of :mod:`simulator.compare.audit`
((a) retrained from scratch, (b) same extractor with the head retrained on ``D'``, (c)
unlearned), one attack at a time:

* the **tolerance** is ``factor`` (default 2) times the spread of the retrained model (a): the
  sample standard deviation of its AUC over the seeds, but never less than the AUC's own
  sampling standard deviation when nothing leaks (``sqrt((m + n + 1) / (12 m n))`` for ``m``
  members and ``n`` non-members; Hanley and McNeil, Radiology 1982, the Mann-Whitney variance
  under the null), so that two seeds that happen to agree do not make every difference a leak;
* the **extractor** leaks when ``mean(b) - mean(a) > tolerance``: with the head trained the same
  way from scratch on ``D'``, the extractor that saw the removed rows makes them more
  recognisable than one that never did;
* the **head** leaks when ``mean(c) - mean(b) > tolerance``: on the same extractor, the released
  head makes them more recognisable than the head retrained from scratch;
* otherwise **neither** (one-sided: an AUC lower than the reference's is not membership).

Means are over the seeds where all three models were scored (the models are paired by seed:
same removed set, same attacked rows). With fewer than two such seeds there is no spread and the
answer is ``undetermined``.

Over the attacks, a part leaks when at least one attack says so; both parts give ``head and
extractor``. LiRA does not vote on the extractor: its reference heads are trained on the
attacked model's own features, so they share its extractor and largely calibrate away what
the extractor remembers: it measures the head given the extractor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from simulator.compare.audit import ATTACKS, MODELS, AuditScore
from simulator.errors import InputError
from simulator.metrics import THRESHOLD_ATTACKS

#: Tolerance = FACTOR x the retrained model's spread (module docstring).
FACTOR = 2.0
#: Attacks whose verdict on the extractor counts (LiRA's references share the extractor).
EXTRACTOR_ATTACKS: tuple[str, ...] = THRESHOLD_ATTACKS
#: Every answer, in report order.
ANSWERS: tuple[str, ...] = ("neither", "head", "extractor", "head and extractor", "undetermined")


def auc_null_std(members: int, nonmembers: int) -> float:
    """Standard deviation of the ROC AUC when members and non-members are alike (module doc)."""
    if members < 1 or nonmembers < 1:
        raise InputError(f"need members and non-members, got {members} and {nonmembers}")
    return math.sqrt((members + nonmembers + 1) / (12.0 * members * nonmembers))


@dataclass(frozen=True)
class LeakVerdict:
    """One attack's answer for one method (module docstring).

    Attributes
    ----------
    where : str
        One of :data:`ANSWERS`.
    head_gap : float
        ``mean(c) - mean(b)``: what the released head adds.
    extractor_gap : float
        ``mean(b) - mean(a)``: what the extractor adds.
    tolerance : float
        ``factor x max(std(a), floor)``; NaN when undetermined.
    seeds : int
        Seeds where all three models were scored.
    """

    where: str
    head_gap: float
    extractor_gap: float
    tolerance: float
    seeds: int

    @property
    def head(self) -> bool:
        """The head leaks."""
        return self.where in ("head", "head and extractor")

    @property
    def extractor(self) -> bool:
        """The extractor leaks."""
        return self.where in ("extractor", "head and extractor")


def _answer(head: bool, extractor: bool) -> str:
    if head and extractor:
        return "head and extractor"
    return "head" if head else "extractor" if extractor else "neither"


def leak_verdict(
    retrained: Sequence[float],
    same_extractor: Sequence[float],
    unlearned: Sequence[float],
    *,
    floor: float = 0.0,
    factor: float = FACTOR,
) -> LeakVerdict:
    """Where one attack's AUCs say membership leaks (the rule of the module docstring).

    Parameters
    ----------
    retrained, same_extractor, unlearned : sequences of float
        The AUC of models (a), (b) and (c), one per seed, paired by position; a NaN drops
        that seed.
    floor : float
        The smallest spread of (a) (:func:`auc_null_std` at the attack's sizes).
    factor : float
        Tolerance = ``factor`` x spread.
    """
    a, b, c = (np.asarray(v, dtype=np.float64) for v in (retrained, same_extractor, unlearned))
    if not a.shape == b.shape == c.shape or a.ndim != 1:
        raise InputError(f"one AUC per seed for each model, got {a.shape}, {b.shape}, {c.shape}")
    if not (floor >= 0 and factor > 0):
        raise InputError(f"need floor >= 0 and factor > 0, got {floor} and {factor}")
    keep = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    a, b, c = a[keep], b[keep], c[keep]
    n = int(a.size)
    head_gap = float(c.mean() - b.mean()) if n else math.nan
    extractor_gap = float(b.mean() - a.mean()) if n else math.nan
    if n < 2:
        return LeakVerdict("undetermined", head_gap, extractor_gap, math.nan, n)
    tolerance = factor * max(float(a.std(ddof=1)), floor)
    where = _answer(head_gap > tolerance, extractor_gap > tolerance)
    return LeakVerdict(where, head_gap, extractor_gap, tolerance, n)


def combine(verdicts: Mapping[str, LeakVerdict]) -> str:
    """One answer over the attacks: a part leaks when one attack says so (module docstring)."""
    decided = {a: v for a, v in verdicts.items() if v.where != "undetermined"}
    if not decided:
        return "undetermined"
    head = any(v.head for v in decided.values())
    extractor = any(v.extractor for a, v in decided.items() if a in EXTRACTOR_ATTACKS)
    return _answer(head, extractor)


@dataclass(frozen=True)
class MethodAudit:
    """Every number of one method's audit.

    Attributes
    ----------
    method : str
    seeds : tuple of int
        Seeds with all three models scored, in order.
    removed : tuple of int
        Rows removed at each of those seeds.
    auc : dict of (model, attack) to list of float
        Each model's AUC per seed, in ``seeds`` order.
    acc_test : dict of str to list of float
        Each model's test accuracy per seed.
    verdicts : dict of str to LeakVerdict
        One per attack.
    answer : str
        :func:`combine` of the verdicts.
    """

    method: str
    seeds: tuple[int, ...]
    removed: tuple[int, ...]
    auc: dict[tuple[str, str], list[float]]
    acc_test: dict[str, list[float]]
    verdicts: dict[str, LeakVerdict]
    answer: str


def audit_methods(scores: Sequence[AuditScore], *, factor: float = FACTOR) -> list[MethodAudit]:
    """Group the scores by method and decide each (first-seen method order)."""
    methods = list(dict.fromkeys(s.method for s in scores))
    out = []
    for method in methods:
        mine = [s for s in scores if s.method == method]
        by_key = {(s.seed, s.model): s for s in mine}
        seeds = tuple(
            sorted(
                {s.seed for s in mine if all((s.seed, m) in by_key for m in MODELS)},
            )
        )
        auc = {
            (m, a): [by_key[(seed, m)].auc.get(a, math.nan) for seed in seeds]
            for m in MODELS
            for a in ATTACKS
        }
        acc = {m: [by_key[(seed, m)].acc_test for seed in seeds] for m in MODELS}
        floor = max(
            (
                auc_null_std(by_key[(s, m)].members, by_key[(s, m)].nonmembers)
                for s in seeds
                for m in MODELS
            ),
            default=0.0,
        )
        verdicts = {
            a: leak_verdict(
                auc[("retrained", a)],
                auc[("same_extractor", a)],
                auc[("unlearned", a)],
                floor=floor,
                factor=factor,
            )
            for a in ATTACKS
        }
        removed = tuple(by_key[(seed, "unlearned")].removed for seed in seeds)
        out.append(MethodAudit(method, seeds, removed, auc, acc, verdicts, combine(verdicts)))
    return out
