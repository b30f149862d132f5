"""Settings of the certified head, the report each removal returns and a released head."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError, InputError
from simulator.head.certificate import residual_budget

Accounting = Literal["anchored", "guo", "worst", "exact"]
ACCOUNTING_MODES: tuple[Accounting, ...] = ("anchored", "guo", "worst", "exact")

#: Under the realised-b reading of Guo et al.'s Theorem 3 (their paper and code) every mode is
#: sound; under the strict reading none exactly, ``worst`` closest (docs/certified-head.md).
_READINGS = "sound under the realised-b reading of Guo et al.'s Theorem 3"

#: One line per accounting mode: what it charges (shown wherever epsilon is).
ACCOUNTING_NOTES: dict[str, str] = {
    "anchored": (
        "the tight step bound, summed since the last exact gradient of the released head "
        "(training or an exact pass, made when the sum would cross the budget, then Newton "
        f"steps on that gradient, each measured, before any retrain); {_READINGS}"
    ),
    "guo": (
        "Guo et al.'s data-dependent bound, summed over removals since the last retrain; "
        + _READINGS
    ),
    "worst": (
        "the worst-case bound (no row's values), summed over removals since the last retrain; "
        "sound under the realised-b reading of Guo et al.'s Theorem 3 and the closest to the "
        "strict one (its decision depends on b only through ||w||)"
    ),
    "exact": (
        "the exact residual of the released head after every removal (one pass each, and "
        f"measured Newton steps on that gradient before any retrain); {_READINGS}"
    ),
}


@dataclass(frozen=True)
class HeadConfig:
    """Hyperparameters of the certified head (``method.md`` section 3 defaults).

    ``accounting`` says what is charged against the budget (:mod:`simulator.head.accounting`,
    ``docs/certified-head.md``): ``anchored`` (default) the tight bound summed since the last
    exact gradient, with an exact pass before any retrain; ``guo`` Guo et al.'s data-dependent
    bound and ``worst`` the worst-case bound, both summed since the last retrain; ``exact`` the
    exact residual of the released head. ``report_exact`` computes the exact residual after every
    removal (one gradient round over the retained rows) whatever is charged, as a diagnostic
    that no mode's decision depends on except ``exact``'s.
    ``correction_steps`` caps the correction steps taken where the exact gradient of the new
    head is in hand and its residual is above the budget (``anchored`` at an anchor,
    ``exact`` after every removal): ``w <- w - H_ref'^{-1} grad L'(w)``, each measured by one
    more exact pass, before a retrain is considered (0: retrain at once, the earlier behaviour).
    ``refresh_every`` rebuilds the Hessian over the retained rows at the current head every N
    removals, and ``rereference_after`` (a full rebuild's cost in exact passes: anchors and
    correction steps) for the ``s`` of the K classes that moved most once ``N s / K`` passes
    have been made since the last build (0: never): both move the reference point ``W_ref`` (of
    those classes) to the released head
    (:meth:`~simulator.head.certified.CertifiedHead._refresh_if_due`).
    ``retrain`` says how a retrain reaches the (unique) minimiser on the retained rows:
    ``warm`` (default) from the current head with the removal solver's Hessian as
    preconditioner and one Hessian build at the end; ``cold`` from zero, as the initial
    training. ``cold_solver`` says how a training from zero runs: ``lbfgs`` (default) the
    warm iteration preconditioned by the Hessian at zero, one Hessian build at the end;
    ``newton`` damped Newton, a build per iteration (:mod:`simulator.head.training`). All
    stop at the same tolerance.
    ``device`` (``cpu``, ``cuda``, ``auto``) and ``backend`` (``numpy``, ``torch``, ``auto``)
    choose where the head's maths runs (:mod:`simulator.head.backend`): by default numpy on
    the CPU; ``auto`` device is cuda when torch sees a GPU; ``auto`` backend is torch on cuda
    and numpy on the CPU; ``backend="torch"`` on the CPU runs the GPU code path on the CPU.
    """

    lam: float = 1e-3
    sigma: float = 10.0
    epsilon: float = 1.0
    delta: float = 1e-4
    accounting: Accounting = "anchored"
    tol: float = 1e-8
    refresh_every: int = 0
    rereference_after: int = 0
    correction_steps: int = 8
    hessian_mode: Literal["incremental", "rebuild"] = "incremental"
    report_exact: bool = True
    retrain: Literal["warm", "cold"] = "warm"
    cold_solver: Literal["lbfgs", "newton"] = "lbfgs"
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    backend: Literal["numpy", "torch", "auto"] = "auto"

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
        if self.retrain not in ("warm", "cold"):
            raise ConfigError(f"must be warm or cold, got {self.retrain!r}", "head.retrain")
        if self.cold_solver not in ("lbfgs", "newton"):
            raise ConfigError(
                f"must be lbfgs or newton, got {self.cold_solver!r}", "head.cold_solver"
            )
        from simulator.head.backend import resolve

        resolve(self.device, self.backend)  # raises ConfigError on a bad combination
        for name in ("refresh_every", "rereference_after", "correction_steps"):
            if getattr(self, name) < 0:
                raise ConfigError("must be >= 0", f"head.{name}")

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
    residual_worst, residual_data, residual_tight : the worst-case, data-dependent and tight
        bounds on this step.
    residual_exact : exact residual of the released head (None when not computed).
    charged : what this removal charged: the step's bound (``anchored``: tight, ``guo``: data,
        ``worst``), or the exact residual of the released head (``exact``; ``anchored`` at an
        anchor).
    cumulative : the charge of the released head: the sum of the steps' charges since the
        last (re)training (``guo``, ``worst``; it starts at the training residual) or since the
        last anchor (``anchored``; it drops at an anchor to the exact residual), or the largest
        exact residual since the last (re)training (``exact``).
    anchored : whether an exact pass re-anchored the charge at this removal.
    corrections : the correction steps taken before the head was released or retrained
        (:attr:`HeadConfig.correction_steps`), each with its own exact pass.
    epsilon_spent : ``c * cumulative / sigma``, holding with ``delta``.
    retrain_iterations : iterations of the retrain (0 when the step was kept).
    retrain_newton_iterations : those of them that built the Hessians (a warm retrain's
        fallback; every iteration of a cold one).
    """

    sample_ids: tuple[int, ...]
    accounting: Accounting
    residual_worst: float
    residual_data: float
    residual_tight: float
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
    retrain_newton_iterations: int = 0
    anchored: bool = False
    corrections: int = 0
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Release:
    """A released head as published: what a checkpoint's journal records with every batch.

    ``W`` and ``b`` (d x columns), the charge of ``W`` (``cumulative``), the counters and the
    state of the generator of future perturbations (:meth:`CertifiedHead.release`,
    :meth:`CertifiedHead.install`).
    """

    W: NDArray[np.float64]
    b: NDArray[np.float64]
    cumulative: float
    model_version: int
    retrains: int
    removals: int
    rng: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (the arrays as base64 of their little-endian float64 bytes)."""
        return {
            "shape": list(self.W.shape),
            "W": _packed(self.W),
            "b": _packed(self.b),
            "cumulative": self.cumulative,
            "model_version": self.model_version,
            "retrains": self.retrains,
            "removals": self.removals,
            "rng": self.rng,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Release:
        """Inverse of :meth:`to_dict`."""
        shape = tuple(int(n) for n in data["shape"])
        return cls(
            W=_unpacked(str(data["W"]), shape),
            b=_unpacked(str(data["b"]), shape),
            cumulative=float(data["cumulative"]),
            model_version=int(data["model_version"]),
            retrains=int(data["retrains"]),
            removals=int(data["removals"]),
            rng=dict(data["rng"]),
        )


def _packed(array: NDArray[np.float64]) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f8").tobytes()).decode()


def _unpacked(text: str, shape: tuple[int, ...]) -> NDArray[np.float64]:
    flat = np.frombuffer(base64.b64decode(text), dtype="<f8")
    if flat.size != int(np.prod(shape)):
        raise InputError(f"a released head of {flat.size} values is not of shape {shape}")
    return flat.reshape(shape).astype(np.float64)
