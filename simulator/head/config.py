"""Settings of the certified head and the report each removal returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from simulator.errors import ConfigError
from simulator.head.certificate import residual_budget

BoundKind = Literal["worst", "data", "exact"]


@dataclass(frozen=True)
class HeadConfig:
    """Hyperparameters of the certified head (``method.md`` section 3 defaults)."""

    lam: float = 1e-3
    sigma: float = 10.0
    epsilon: float = 1.0
    delta: float = 1e-4
    bound: BoundKind = "data"
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
        if self.bound not in ("worst", "data", "exact"):
            raise ConfigError(f"must be worst, data or exact, got {self.bound!r}", "head.bound")
        if self.refresh_every < 0:
            raise ConfigError("must be >= 0", "head.refresh_every")

    @property
    def budget(self) -> float:
        """Residual budget ``eps'``."""
        return residual_budget(sigma=self.sigma, epsilon=self.epsilon, delta=self.delta)


@dataclass(frozen=True)
class RemovalReport:
    """What one removal did. Residuals are summed over the K classes."""

    sample_ids: tuple[int, ...]
    residual_worst: float
    residual_data: float
    residual_exact: float | None
    charged: float
    cumulative: float
    budget: float
    budget_used_ratio: float
    epsilon_spent: float
    retrained: bool
    retrain_reason: str | None
    model_version: int
    retained: int
    solver_iterations: int
    timings: dict[str, float] = field(default_factory=dict)
