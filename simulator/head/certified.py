"""The certified head: training, certified batch removal, budget accounting and retraining.

Implements certified removal (Guo et al., ICML 2020) of DecoRemoval's linear head
(``decoremoval.tex`` section 3.3 and Algorithm 1): one Newton step on the retained data per
removal batch, the residual of that step measured three ways, the residual charged against the
budget ``eps' = sigma * epsilon / c``, and a retrain from scratch with a fresh perturbation
``b`` whenever the next removal would exceed the budget.

The Newton step targets the objective *after* the deletion, including sample weights that the
data side recomputes (DecoRemoval's decorrelation weights change for every retained row), so the
gradient is

    g = carried - removed.gradient - lam * m * W + reweighted.gradient

where ``carried`` is the exactly known gradient of the current model (only in ``exact`` mode;
otherwise it is bounded by the accumulated residual). The aggregate Hessian is kept at a
reference head ``W_ref`` and downdated by the removed rows and the weight changes, both
evaluated at ``W_ref``; it is rebuilt over all retained rows only at (re)training, on
``refresh_every`` or in ``hessian_mode="rebuild"`` (the naive reference path).

Accounting (summed over the K classes):

* ``bound="worst"`` / ``"data"``: each step's bound is added to a cumulative residual that
  starts at the training residual; by the triangle inequality it bounds the true residual.
* ``bound="exact"``: the true residual ``||grad L_b(W; D')||`` of the current model is charged.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import scipy.linalg as sla
from numpy.typing import NDArray

from simulator.errors import InputError, UnknownSampleError
from simulator.head.certificate import (
    certificate_constant,
    data_dependent_bound,
    removal_gradient_bound,
    worst_case_bound,
)
from simulator.head.config import HeadConfig, RemovalReport
from simulator.head.data import HeadData
from simulator.head.gram import GramMatrix
from simulator.head.logistic import objective_gradient, objective_hessian
from simulator.head.solver import HessianSolver
from simulator.head.threads import single_threaded_blas
from simulator.head.training import train_head

FloatArray = NDArray[np.float64]
#: Batches up to this size run their O(d^2) kernels single-threaded (see ``threads.py``).
SMALL_BATCH = 64


class CertifiedHead:
    """K one-vs-rest perturbed logistic heads with certified removal.

    Parameters
    ----------
    data : where the rows live (:class:`~simulator.head.data.HeadData`).
    config : hyperparameters.
    rng : the generator that draws every perturbation ``b ~ N(0, sigma^2 I)``.
    """

    def __init__(self, data: HeadData, config: HeadConfig, *, rng: np.random.Generator) -> None:
        self.data = data
        self.config = config
        self._rng = rng
        self.model_version = 0
        self.retrains = 0
        self.removals = 0
        self._c = certificate_constant(config.delta)
        self._fit("initial")

    # ------------------------------------------------------------------ state
    @property
    def W(self) -> FloatArray:
        """The current head (d x K), a copy."""
        return self._W.copy()

    @property
    def b(self) -> FloatArray:
        """The current perturbation (d x K), a copy."""
        return self._b.copy()

    @property
    def cumulative_residual(self) -> float:
        return self._cumulative

    @property
    def epsilon_spent(self) -> float:
        return self._c * self._cumulative / self.config.sigma

    def gradient_norms(self) -> FloatArray:
        """Exact per-class ``||grad L_b(W; D')||`` of the current model (one pass over rows)."""
        stats = self.data.statistics(self._W, hessian=False)
        return np.asarray(
            np.linalg.norm(objective_gradient(stats, self._W, self._b, lam=self.config.lam), axis=0)
        )

    def decision_function(self, X: FloatArray) -> FloatArray:
        """Scores ``X @ W`` (n x K)."""
        return np.asarray(X @ self._W)

    def predict(self, X: FloatArray) -> NDArray[np.int64]:
        return np.asarray(np.argmax(X @ self._W, axis=1), dtype=np.int64)

    # --------------------------------------------------------------- training
    def _fit(self, reason: str) -> float:
        """Train from scratch with a fresh ``b``; returns seconds."""
        d, k = self.data.dim, self.data.num_classes
        self._b = self._rng.normal(0.0, self.config.sigma, size=(d, k))
        if self.data.retained_count == 0:
            return self._empty(reason)
        res = train_head(self.data, self._b, lam=self.config.lam, tol=self.config.tol)
        self._W = res.W
        self._W_ref = res.W.copy()
        self._solver = HessianSolver(res.hessian)
        self._gram = GramMatrix(res.gram)
        self._spectral = _spectral_upper_bound(res.gram)
        self._cumulative = float(res.gradient_norms.sum())
        self._carried = self._gradient_exact()
        self._since_refresh = 0
        self.model_version += 1
        self.last_fit_reason = reason
        self.last_fit_iterations = res.iterations
        return res.seconds

    def _empty(self, reason: str) -> float:
        """No rows left: the objective is the unbounded ``b . w``; the head is reset to 0."""
        d, k = self.data.dim, self.data.num_classes
        self._W = np.zeros((d, k))
        self._W_ref = self._W.copy()
        self._solver = HessianSolver(np.broadcast_to(np.eye(d), (k, d, d)).copy())
        self._gram = GramMatrix(np.zeros((d, d)))
        self._spectral = 0.0
        self._cumulative = 0.0
        self._carried = np.zeros((d, k))
        self._since_refresh = 0
        self.model_version += 1
        self.last_fit_reason = f"{reason} (no rows left: head reset to zero)"
        self.last_fit_iterations = 0
        return 0.0

    def _gradient_exact(self) -> FloatArray:
        stats = self.data.statistics(self._W, hessian=False)
        return objective_gradient(stats, self._W, self._b, lam=self.config.lam)

    def _refresh(self) -> None:
        """Rebuild the aggregate Hessian at the current head (the expensive, exact path)."""
        stats = self.data.statistics(self._W, hessian=True)
        self._solver.replace(objective_hessian(stats, lam=self.config.lam))
        self._spectral = _spectral_upper_bound(self._gram.matrix())  # kept current
        self._W_ref = self._W.copy()
        self._since_refresh = 0

    # ---------------------------------------------------------------- removal
    def remove(self, ids: Sequence[int], *, retrain: bool = False) -> RemovalReport:
        """Certifiably remove a batch of sample ids (one Newton step, or a retrain).

        With ``retrain=True`` the rows are deleted and the head is retrained from scratch on
        the retained rows (the ``retrain`` baseline); no residual is charged.

        Raises
        ------
        InputError
            ``ids`` is empty or has duplicates; nothing changes.
        UnknownSampleError
            Some ids are unknown or already removed; nothing changes.
        """
        t0 = time.perf_counter()
        ids = _as_ids(ids)
        if not ids:
            raise InputError("no sample ids to remove")
        if len(set(ids)) != len(ids):
            raise InputError("duplicate sample ids in one removal")
        unknown = self.data.unknown_ids(ids)
        if unknown:
            raise UnknownSampleError(unknown)
        if retrain:
            self.data.delete(ids, W=self._W, W_ref=self._W_ref)
            return self._retrained(ids, "method", t0)
        with single_threaded_blas(len(ids) <= SMALL_BATCH):
            return self._remove(ids, t0)

    def _remove(self, ids: list[int], t0: float) -> RemovalReport:
        cfg = self.config
        if cfg.hessian_mode == "incremental" and (
            cfg.refresh_every and self._since_refresh >= cfg.refresh_every
        ):
            self._refresh()
        timings: dict[str, float] = {}
        t = time.perf_counter()
        delta = self.data.delete(ids, W=self._W, W_ref=self._W_ref)
        timings["statistics"] = time.perf_counter() - t
        m = len(ids)
        n_new = self.data.retained_count
        if n_new == 0:
            return self._retrained(ids, "empty", t0)

        t = time.perf_counter()
        g = -delta.removed_gradient - cfg.lam * m * self._W
        if cfg.bound == "exact":
            g = g + self._carried
        rows = delta.removed_rows
        self._gram.downdate(rows)
        if cfg.hessian_mode == "rebuild":
            stats = self.data.statistics(self._W, hessian=True)
            assert stats.hessian is not None
            self._solver.replace(objective_hessian(stats, lam=cfg.lam))
            self._W_ref = self._W.copy()
            if delta.reweighted is not None:
                g = g + delta.reweighted.gradient
        else:
            self._solver.downdate_rows(rows, delta.removed_curvature, diagonal=cfg.lam * m)
            if delta.reweighted is not None:
                assert delta.reweighted.hessian is not None
                g = g + delta.reweighted.gradient
                self._solver.downdate_dense(-delta.reweighted.hessian)
        solved = self._solver.solve(g)
        W_new = self._W - solved.step
        timings["solve"] = time.perf_counter() - t

        t = time.perf_counter()
        step_norms = np.linalg.norm(solved.step, axis=0)
        gaps = np.linalg.norm(self._W_ref - self._W, axis=0)
        worst = worst_case_bound(
            gradient_bounds=removal_gradient_bound(
                batch=m,
                head_norms=np.linalg.norm(self._W, axis=0),
                lam=cfg.lam,
                max_weight=delta.max_weight,
                weight_change_l1=delta.weight_change_l1,
            )
            + (np.linalg.norm(self._carried, axis=0) if cfg.bound == "exact" else 0.0),
            retained=n_new,
            lam=cfg.lam,
            reference_gaps=gaps,
            solve_residuals=solved.residual_norms,
            max_weight=delta.max_weight,
        )
        # ||X' u||^2 = u^T (X'^T X') u from the Gram matrix kept current by downdates
        proj_sq = self._gram.quadratic(solved.step)
        proj = np.sqrt(np.maximum(proj_sq, 0.0))
        data_b = data_dependent_bound(
            spectral_norm=self._spectral,
            step_norms=step_norms,
            projected_norms=proj,
            reference_gaps=gaps,
            solve_residuals=solved.residual_norms,
            max_weight=delta.max_weight,
        )
        timings["bounds"] = time.perf_counter() - t

        exact: float | None = None
        grad_new: FloatArray | None = None
        if cfg.bound == "exact" or cfg.report_exact:
            t = time.perf_counter()
            stats = self.data.statistics(W_new, hessian=False)
            grad_new = objective_gradient(stats, W_new, self._b, lam=cfg.lam)
            exact = float(np.linalg.norm(grad_new, axis=0).sum())
            timings["exact"] = time.perf_counter() - t

        if cfg.bound == "exact":
            assert exact is not None
            charged, cumulative = exact, exact
        else:
            charged = float((worst if cfg.bound == "worst" else data_b).sum())
            cumulative = self._cumulative + charged

        self.removals += 1
        retrained, reason = False, None
        if cumulative > self.budget:
            retrained, reason = True, "budget"
            timings["retrain"] = self._fit("budget")
            self.retrains += 1
            cumulative = self._cumulative
        else:
            self._W = W_new
            self._cumulative = cumulative
            self._since_refresh += 1
            self.model_version += 1
            if grad_new is not None:
                self._carried = grad_new
        timings["total"] = time.perf_counter() - t0
        return RemovalReport(
            sample_ids=tuple(ids),
            residual_worst=float(worst.sum()),
            residual_data=float(data_b.sum()),
            residual_exact=exact,
            charged=charged,
            cumulative=cumulative,
            budget=self.budget,
            budget_used_ratio=cumulative / self.budget,
            epsilon_spent=self._c * cumulative / cfg.sigma,
            retrained=retrained,
            retrain_reason=reason,
            model_version=self.model_version,
            retained=n_new,
            solver_iterations=solved.refinements,
            timings=timings,
        )

    def _retrained(self, ids: list[int], reason: str, t0: float) -> RemovalReport:
        """Retrain after the rows were deleted (``retrain`` method, or no rows left)."""
        self.removals += 1
        self.retrains += 1
        seconds = self._fit(reason)
        return RemovalReport(
            sample_ids=tuple(ids),
            residual_worst=0.0,
            residual_data=0.0,
            residual_exact=self._cumulative,
            charged=0.0,
            cumulative=self._cumulative,
            budget=self.budget,
            budget_used_ratio=self._cumulative / self.budget,
            epsilon_spent=self.epsilon_spent,
            retrained=True,
            retrain_reason=reason,
            model_version=self.model_version,
            retained=self.data.retained_count,
            solver_iterations=0,
            timings={"retrain": seconds, "total": time.perf_counter() - t0},
        )

    def remove_sequentially(self, ids: Sequence[int]) -> list[RemovalReport]:
        """Remove samples one at a time (one certified step each)."""
        return [self.remove([i]) for i in ids]

    def retrain(self, reason: str = "requested") -> float:
        """Retrain from scratch on the retained rows with a fresh perturbation."""
        self.retrains += 1
        return self._fit(reason)

    @property
    def budget(self) -> float:
        return self.config.budget


def _as_ids(ids: Sequence[int]) -> list[int]:
    """Integer sample ids; floats, NaN, bools and strings are refused (nothing changes)."""
    arr = np.asarray(ids)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InputError(f"sample ids must be a flat sequence of integers, got dtype {arr.dtype}")
    return [int(i) for i in arr]


def _spectral_upper_bound(gram: FloatArray) -> float:
    """``||X||_2 = sqrt(lambda_max(X^T X))``, with a relative safety margin.

    Rows are only ever removed, so ``X'^T X' <= X^T X`` and the value at the last (re)training
    or refresh stays a valid upper bound until the next one; power iteration would give a
    *lower* estimate, which a bound must not use.
    """
    d = gram.shape[0]
    top = sla.eigh(gram, eigvals_only=True, subset_by_index=[d - 1, d - 1], check_finite=False)
    return float(np.sqrt(max(float(top[0]), 0.0)) * (1.0 + 1e-9) + 1e-12)
