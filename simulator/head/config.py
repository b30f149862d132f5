"""Settings of the certified head and the report each removal returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from simulator.errors import ConfigError
from simulator.head.certificate import residual_budget

Accounting = Literal["guo", "worst", "exact"]
ACCOUNTING_MODES: tuple[Accounting, ...] = ("guo", "worst", "exact")

#: One line per accounting mode: what it charges (shown wherever epsilon is).
ACCOUNTING_NOTES: dict[str, str] = {
    "guo": "Guo et al.'s data-dependent bound, summed over removals since the last retrain",
    "worst": "the data-independent worst-case bound, summed over removals since the last retrain",
    "exact": (
        "DIAGNOSTIC: the exact residual of the current head; the retrain decision then depends "
        "on the noise b, which Guo et al.'s theorem does not cover (delta grows by the "
        "probability of crossing)"
    ),
}


@dataclass(frozen=True)
class HeadConfig:
    """Hyperparameters of the certified head (``method.md`` section 3 defaults).

    ``accounting`` says what is charged against the budget (``docs/certified-head.md``):
    ``guo`` (default) Guo et al.'s data-dependent bound, ``worst`` the worst-case bound, both
    summed over removals; ``exact`` the exact residual of the current head, a diagnostic whose
    retrain decision depends on ``b``. ``report_exact`` computes the exact residual after every
    removal as a diagnostic (one gradient round over the retained rows) whatever is charged.
    """

    lam: float = 1e-3
    sigma: float = 10.0
    epsilon: float = 1.0
    delta: float = 1e-4
    accounting: Accounting = "guo"
    tol: float = 1e-8
    refresh_every: int = 0
    hessian_mode: Literal["incremental", "rebuild"] = "incremental"
    report_exact: bool = True

    def __post_init__(self) -> None:
        for name in ("lam", "sigma", "epsilon", "tol"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"must be positive, got {getattr(self, name)}", f"head.{name}")
        if not 0 < self.delta < 1:
            raise ConfigError(f"must lie in (0, 1), got {self.delta}", "head.delta")
        if self.accounting not in ACCOUNTING_MODES:
            raise ConfigError(
                f"must be one of {', '.join(ACCOUNTING_MODES)}, got {self.accounting!r}",
                "head.accounting",
            )
        if self.refresh_every < 0:
            raise ConfigError("must be >= 0", "head.refresh_every")

    @property
    def budget(self) -> float:
        """Residual budget ``eps'``."""
        return residual_budget(sigma=self.sigma, epsilon=self.epsilon, delta=self.delta)

    @property
    def computes_exact(self) -> bool:
        """Whether every removal computes the exact residual (one gradient round)."""
        return self.accounting == "exact" or self.report_exact


@dataclass(frozen=True)
class RemovalReport:
    """What one removal did.

    Every residual is the L2 norm of the stacked per-class residuals (the K one-vs-rest heads
    are one mechanism on the stacked d*K parameter; ``docs/certified-head.md``).

    Attributes
    ----------
    residual_worst, residual_data : the worst-case and data-dependent bounds on this step.
    residual_exact : exact residual of the released head (None when not computed).
    charged : what this removal charged: the step's bound (``guo``, ``worst``), or the exact
        residual of the released head (``exact``).
    cumulative : the charge since the last (re)training, monotone between retrains: the sum
        of the steps' charges (``guo``, ``worst``; it starts at the training residual), or the
        largest exact residual since then (``exact``).
    epsilon_spent : ``c * cumulative / sigma``, holding with ``delta``.
    retrain_iterations : Newton iterations of the retrain (0 when the step was kept).
    """

    sample_ids: tuple[int, ...]
    accounting: Accounting
    residual_worst: float
    residual_data: float
    residual_exact: float | None
    charged: float
    cumulative: float
    budget: float
    budget_used_ratio: float
    epsilon_spent: float
    delta: float
    retrained: bool
    retrain_reason: str | None
    model_version: int
    retained: int
    solver_iterations: int
    retrain_iterations: int = 0
    timings: dict[str, float] = field(default_factory=dict)
