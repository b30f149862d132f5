"""What a removal charges against the residual budget, per accounting mode.

Guo et al. (ICML 2020) certify a removal when the gradient residual of the released head is at
most the budget ``eps'``; a sequence of Newton steps is certified by bounding each step's new
error and summing (triangle inequality: the error carried from earlier steps stays in the
gradient, ``docs/certified-head.md``). Their reference code charges the data-dependent bound
(Corollary 1) and retrains when the sum would exceed the budget. Modes:

* ``guo``: charge the step's data-dependent bound; the charge is the running sum since the
  last (re)training, which starts at the training residual;
* ``worst``: the same with the data-independent worst-case bound (Theorem 1);
* ``exact``: charge the exact residual of the released head, which already contains every
  earlier step's error (never summed). The charge reported is the running maximum since the
  last (re)training, so that it is monotone like the others. A diagnostic only: retraining on
  the realised residual makes the decision depend on ``b``, which the theorem does not cover.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.errors import InputError
from simulator.head.certificate import StepResiduals
from simulator.head.config import Accounting


@dataclass(frozen=True)
class Charge:
    """``charged``: this removal's charge; ``cumulative``: the charge since the last retrain."""

    charged: float
    cumulative: float


def _summed(previous: float, step: float) -> Charge:
    """``guo`` and ``worst``: the step's bound adds to the charge (triangle inequality)."""
    return Charge(step, previous + step)


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


@dataclass(frozen=True)
class AccountingRule:
    """What one accounting mode does (module docstring).

    Attributes
    ----------
    charge : ``(previous charge, step residuals) -> Charge``.
    knows_gradient : whether the exact gradient of the current head (the ``carried`` term of
        :mod:`simulator.head.certified`) is known and enters the Newton step and its bounds;
        only ``exact`` measures it, the others bound it by the charge so far.
    """

    charge: Callable[[float, StepResiduals], Charge]
    knows_gradient: bool


#: The accounting modes (:data:`simulator.head.config.ACCOUNTING_MODES`).
RULES: dict[Accounting, AccountingRule] = {
    "guo": AccountingRule(_charge_data, knows_gradient=False),
    "worst": AccountingRule(_charge_worst, knows_gradient=False),
    "exact": AccountingRule(_charge_exact, knows_gradient=True),
}


def charge(
    accounting: Accounting,
    *,
    previous: float,
    worst: float,
    data: float,
    exact: float | None,
) -> Charge:
    """The charge of one removal given the charge so far (module docstring).

    Parameters
    ----------
    accounting : the mode (a key of :data:`RULES`).
    previous : the charge since the last (re)training before this removal.
    worst, data : this step's worst-case and data-dependent bounds (stacked norms).
    exact : the exact residual of the head after the step (needed by ``exact``).

    Returns
    -------
    Charge
        This removal's charge and the charge since the last (re)training.
    """
    return RULES[accounting].charge(previous, StepResiduals(worst, data, exact))
