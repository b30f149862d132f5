"""What a removal charges against the residual budget, per accounting mode.

Guo et al. (ICML 2020) certify a removal when the gradient residual of the released head is at
most the budget ``eps'``; a sequence of Newton steps is certified by bounding each step's new
error and summing (triangle inequality: the error carried from earlier steps stays in the
gradient, ``docs/certified-head.md``). Their reference code charges the data-dependent bound
(Corollary 1) and retrains when the sum would exceed the budget. Modes:

* ``anchored`` (default): charge the step's tight bound (``certificate.py``), summed since the
  last *anchor*: a point where the exact gradient of the released head is known (training, or
  one exact pass over the retained rows). The known gradient enters the next Newton step, which
  corrects it, so the sum restarts there. When the sum would cross the budget, one exact pass at
  the new head re-anchors (the charge becomes its exact residual) before a retrain is
  considered (an exact residual measured for ``report_exact`` alone stays a diagnostic, so the
  decisions do not depend on that option). Where that residual is above the budget,
  *correction steps* ``w <- w - H_ref'^{-1} r`` on the measured gradient ``r``, each measured
  by one more exact pass, come first (``CertifiedHead._correct``): the charge is the exact
  residual of the head released, and its gradient enters the next step;
* ``guo``: charge the step's data-dependent bound (Guo et al.'s constants); the charge is the
  running sum since the last (re)training, which starts at the training residual;
* ``worst``: the same with the data-independent worst-case bound (Theorem 1);
* ``exact``: charge the exact residual of the released head, which already contains every
  earlier step's error (never summed); one pass per removal, and correction steps as above
  where it is above the budget. The charge reported is the running maximum since the last
  (re)training.

Every mode's retrain decision depends on the noise ``b`` (the bounds and the exact residual are
functions of ``W``, which depends on ``b``; ``worst`` only through ``||W||`` and the reference
gap). Under the reading of Guo et al.'s Theorem 3 that their paper and code use (the residual of
the realised model) all four are sound; under the strict reading (a ``b``-dependent decision
makes the release a mixture) none is exactly, ``worst`` comes closest
(``docs/certified-head.md``, "Two readings of Guo et al.'s Theorem 3").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.errors import InputError
from simulator.head.certificate import StepResiduals
from simulator.head.config import Accounting


@dataclass(frozen=True)
class Charge:
    """``charged``: this removal's charge; ``cumulative``: the charge of the released head."""

    charged: float
    cumulative: float


def _summed(previous: float, step: float) -> Charge:
    """The step's bound adds to the charge (triangle inequality)."""
    return Charge(step, previous + step)


def _charge_tight(previous: float, residuals: StepResiduals) -> Charge:
    """``anchored``: the tight bound, summed since the last anchor."""
    return _summed(previous, residuals.tight)


def _charge_data(previous: float, residuals: StepResiduals) -> Charge:
    """``guo``: the data-dependent bound, summed."""
    return _summed(previous, residuals.data)


def _charge_worst(previous: float, residuals: StepResiduals) -> Charge:
    """``worst``: the worst-case bound, summed."""
    return _summed(previous, residuals.worst)


def _charge_exact(previous: float, residuals: StepResiduals) -> Charge:
    """``exact``: the released head's exact residual; the running maximum is reported."""
    if residuals.exact is None:
        raise InputError("exact accounting needs the exact residual")
    return Charge(residuals.exact, max(previous, residuals.exact))


def anchor(residuals: StepResiduals) -> Charge:
    """``anchored`` at an exact pass: the charge is the released head's exact residual."""
    if residuals.exact is None:
        raise InputError("an anchor needs the exact residual")
    return Charge(residuals.exact, residuals.exact)


@dataclass(frozen=True)
class AccountingRule:
    """What one accounting mode does (module docstring).

    Attributes
    ----------
    charge : ``(previous charge, step residuals) -> Charge``.
    knows_gradient : whether the exact gradient of the current head (the ``carried`` term of
        :mod:`simulator.head.certified`) is measured after every step and enters the next
        Newton step (``exact``); the others bound it by the charge so far.
    anchors : whether an exact gradient, where one is known, replaces the charge and enters
        the next step (``anchored``).
    """

    charge: Callable[[float, StepResiduals], Charge]
    knows_gradient: bool
    anchors: bool = False


#: The accounting modes (:data:`simulator.head.config.ACCOUNTING_MODES`).
RULES: dict[Accounting, AccountingRule] = {
    "anchored": AccountingRule(_charge_tight, knows_gradient=False, anchors=True),
    "guo": AccountingRule(_charge_data, knows_gradient=False),
    "worst": AccountingRule(_charge_worst, knows_gradient=False),
    "exact": AccountingRule(_charge_exact, knows_gradient=True),
}


def charge(
    accounting: Accounting,
    *,
    previous: float,
    residuals: StepResiduals,
) -> Charge:
    """The charge of one removal given the charge so far, before any anchor (module docstring).

    Parameters
    ----------
    accounting : the mode (a key of :data:`RULES`).
    previous : the charge of the head before this removal (0 after an anchor whose gradient
        entered this step).
    residuals : this step's bounds and, where measured, the exact residual after it.

    Returns
    -------
    Charge
        This removal's charge and the charge of the head it releases.
    """
    return RULES[accounting].charge(previous, residuals)
