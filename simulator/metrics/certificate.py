"""Certificate metrics of certified removal (Guo et al., ICML 2020; ``decoremoval.tex`` Sec. 3.3).

With loss perturbation ``b ~ N(0, sigma^2 I)`` and ``c = sqrt(2 ln(1.5 / delta))``:

* the residual budget is ``eps' = sigma * epsilon / c`` (Theorem 3 solved for ``eps'``);
* the charge ``beta`` of the released head (the L2 norm of the stacked per-class residuals,
  accumulated per ``accounting``: :mod:`simulator.head.accounting`) spends
  ``epsilon(beta) = c * beta / sigma``, with one ``delta`` for the whole head;
* the used ratio is ``beta / eps'`` (= ``epsilon(beta) / epsilon``); the head retrains before it
  would exceed 1.

The residual of the last batch is reported per bound kind: ``worst`` (Guo et al. Theorem 1),
``data`` (Corollary 1), ``tight`` (the tight bound, ``docs/certified-head.md``) and ``exact``
(the true gradient norm), see ``simulator.head``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from simulator.errors import InputError
from simulator.head.certificate import epsilon_spent, residual_budget

#: Bound kinds of the per-batch residual, in report order.
BOUND_KINDS: tuple[str, ...] = ("worst", "data", "tight", "exact")


@dataclass(frozen=True)
class CertificateStatus:
    """Where the certificate stands after a batch (module docstring)."""

    accounting: str = "anchored"
    residual: dict[str, float] = field(default_factory=dict)
    cumulative: float = 0.0
    budget: float = math.nan
    used_ratio: float = math.nan
    epsilon_spent: float = math.nan
    epsilon_target: float = math.nan
    delta: float = math.nan


def certificate_status(
    *,
    accounting: str,
    cumulative: float,
    sigma: float,
    epsilon: float,
    delta: float,
    residual: dict[str, float | None] | None = None,
) -> CertificateStatus:
    """Budget, used ratio and epsilon spent of an accumulated residual ``cumulative``.

    ``residual`` maps bound kinds to the last batch's residuals; ``None`` values (e.g. no
    exact residual computed) are left out.
    """
    if not cumulative >= 0 or not math.isfinite(cumulative):
        raise InputError(f"cumulative residual must be finite and >= 0, got {cumulative}")
    budget = residual_budget(sigma=sigma, epsilon=epsilon, delta=delta)
    kept: dict[str, float] = {}
    for kind, value in (residual or {}).items():
        if kind not in BOUND_KINDS:
            raise InputError(f"unknown bound kind {kind!r}; known: {', '.join(BOUND_KINDS)}")
        if value is not None:
            kept[kind] = float(value)
    return CertificateStatus(
        accounting=accounting,
        residual=kept,
        cumulative=float(cumulative),
        budget=budget,
        used_ratio=cumulative / budget,
        epsilon_spent=epsilon_spent(cumulative, sigma=sigma, delta=delta),
        epsilon_target=float(epsilon),
        delta=float(delta),
    )
