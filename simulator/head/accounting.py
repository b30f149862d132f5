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

from dataclasses import dataclass

from simulator.errors import InputError
from simulator.head.config import Accounting


@dataclass(frozen=True)
class Charge:
    """``charged``: this removal's charge; ``cumulative``: the charge since the last retrain."""

    charged: float
    cumulative: float


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
    previous : the charge since the last (re)training before this removal.
    worst, data : this step's worst-case and data-dependent bounds (stacked norms).
    exact : the exact residual of the head after the step (needed by ``exact``).
    """
    if accounting == "exact":
        if exact is None:
            raise InputError("exact accounting needs the exact residual")
        return Charge(exact, max(previous, exact))
    step = data if accounting == "guo" else worst
    return Charge(step, previous + step)
