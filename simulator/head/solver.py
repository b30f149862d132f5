"""Solves with the aggregate Hessians of the K one-vs-rest heads, kept current by downdates.

The aggregate ``H_k`` (K x d x d) is never rebuilt over all data per removal (``method.md``,
"Hessians"). A removal changes it by a low-rank term and a multiple of the identity,

    H_k' = H_k - sum_j c_jk x_j x_j^T - mu I,      c_jk = a_j p_jk (1 - p_jk),  mu = lam * m,

so the solver keeps a Cholesky factor of a *base* matrix and the pending rows ``x_j`` with
their per-class coefficients. Solves apply the Woodbury identity to the pending rows
(Hager 1989, "Updating the inverse of a matrix") and correct for ``mu I`` by a Neumann step or
preconditioned conjugate gradients against the exact implicit matrix, whose relative size
``mu / (lam n)`` is the fraction of rows removed since the last factorisation, so one step
reaches ``rtol``. A removal therefore costs a few ``O(d^2)`` triangular solves per class,
not the ``O(d^3 / 3)`` of a fresh Cholesky factorisation. Past ``max_pending_rows`` pending
rows, or after a dense change (sample re-weighting), the pending terms are folded into the
base and the factor is recomputed. No explicit inverse is ever formed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError, NumericalError
from simulator.head.backend import Array, Backend, backend_of

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class SolveResult:
    """Solution ``u`` (d x K) of ``H_k u_k = g_k`` and the true residual norms ``||g - H u||``."""

    step: Array
    residual_norms: FloatArray
    refinements: int
    refactored: bool


class HessianSolver:
    """Aggregate per-class Hessians with low-rank downdates and Cholesky solves.

    Parameters
    ----------
    hessians : (K, d, d) symmetric positive definite matrices (copied).
    max_pending_rows : low-rank rows kept before they are folded in and the factor recomputed.
    rtol : relative residual ``||g - H u|| / ||g||`` that refinement aims for. The certificate
        charges the true residual of every solve (``solve_residuals`` in the bounds), so any
        value is sound; 1e-6 adds about 1e-6 ||g|| to a removal's residual (against ~1e-2 for
        the removal itself) and lets one preconditioned CG step suffice (docs/certified-head.md).
    max_refine : refinement steps per solve before falling back to a fresh factorisation.
    backend : the array library (:mod:`simulator.head.backend`); by default that of
        ``hessians``. Right-hand sides and downdates are moved to it.
    factors : lower Cholesky factors of ``hessians`` already computed (a warm retrain's
        polish step factorised the same matrices: K ``d^3 / 3`` flops saved), or None.
    """

    def __init__(
        self,
        hessians: FloatArray,
        *,
        max_pending_rows: int = 128,
        rtol: float = 1e-6,
        max_refine: int = 6,
        backend: Backend | None = None,
        factors: list[Array] | None = None,
    ) -> None:
        self._bk = backend_of(hessians) if backend is None else backend
        if hessians.ndim != 3 or hessians.shape[1] != hessians.shape[2]:
            raise InputError(f"Hessians must have shape (K, d, d), got {hessians.shape}")
        self.max_pending_rows = max_pending_rows
        self.rtol = rtol
        self.max_refine = max_refine
        self.factorisations = 0
        self._base: Array = self._bk.copy(hessians)
        self._clear_pending()
        if factors is None:
            self._factorise()
        else:  # the caller's factors of exactly these matrices (a retrain's polish)
            if len(factors) != hessians.shape[0]:
                raise InputError(f"{len(factors)} factors for {hessians.shape[0]} Hessians")
            self._factors: list[Array] | None = [self._bk.asarray(f) for f in factors]
            self.factorisations += 1

    # ------------------------------------------------------------------ state
    @property
    def shape(self) -> tuple[int, int]:
        """(K, d)."""
        return int(self._base.shape[0]), int(self._base.shape[1])

    @property
    def hessians(self) -> Array:
        """The current matrices, materialised (a copy; O(K r d^2))."""
        out = self._bk.copy(self._base)
        for k in range(out.shape[0]):
            out[k] -= (self._rows.T * self._coef[:, k]) @ self._rows
        if self._mu:
            out -= self._mu * self._bk.eye(out.shape[1])[None, :, :]
        return out

    def replace(self, hessians: Array) -> None:
        """Swap in freshly computed Hessians (refresh, retrain, naive rebuild)."""
        if tuple(hessians.shape) != tuple(self._base.shape):
            raise InputError(f"Hessian shape {hessians.shape} != {self._base.shape}")
        self._base = self._bk.copy(hessians)
        self._clear_pending()
        self._factorise()

    def _clear_pending(self) -> None:
        k, d = self._base.shape[0], self._base.shape[1]
        bk = self._bk
        self._rows = bk.zeros((0, d))
        self._coef = bk.zeros((0, k))
        self._z = [bk.zeros((d, 0)) for _ in range(k)]
        self._uz = [bk.zeros((0, 0)) for _ in range(k)]  # rows @ z[c], kept by bordering
        self._mu = 0.0

    def _factorise(self) -> None:
        factors = []
        for k in range(self._base.shape[0]):
            try:
                factors.append(self._bk.cholesky(self._base[k]))
            except np.linalg.LinAlgError as exc:
                raise NumericalError(f"Hessian of class {k} is not positive definite") from exc
        self._factors = factors
        self.factorisations += 1

    def _fold_pending(self) -> None:
        """Fold pending rows and ``mu`` into the base; the factor becomes stale."""
        if self._rows.shape[0] or self._mu:
            self._base = self.hessians
        self._clear_pending()
        self._factors = None

    def state_dict(self) -> dict[str, Any]:
        """Every array and counter, as numpy (the factors too: a restore is bit-exact)."""
        bk = self._bk
        return {
            "base": bk.to_numpy(self._base),
            "rows": bk.to_numpy(self._rows),
            "coef": bk.to_numpy(self._coef),
            "z": [bk.to_numpy(z) for z in self._z],
            "uz": [bk.to_numpy(u) for u in self._uz],
            "mu": float(self._mu),
            "factors": None if self._factors is None else [bk.to_numpy(f) for f in self._factors],
            "factorisations": self.factorisations,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Install :meth:`state_dict`'s arrays (shapes must match)."""
        bk = self._bk
        base = bk.asarray(np.asarray(state["base"], dtype=np.float64))
        if tuple(base.shape) != tuple(self._base.shape):
            raise InputError(f"saved Hessians {tuple(base.shape)} != {tuple(self._base.shape)}")
        self._base = base
        self._rows = bk.asarray(np.asarray(state["rows"], dtype=np.float64))
        self._coef = bk.asarray(np.asarray(state["coef"], dtype=np.float64))
        self._z = [bk.asarray(np.asarray(z, dtype=np.float64)) for z in state["z"]]
        self._uz = [bk.asarray(np.asarray(u, dtype=np.float64)) for u in state["uz"]]
        self._mu = float(state["mu"])
        factors = state["factors"]
        self._factors = (
            None
            if factors is None
            else [bk.asarray(np.asarray(f, dtype=np.float64)) for f in factors]
        )
        self.factorisations = int(state["factorisations"])

    # -------------------------------------------------------------- downdates
    def downdate_rows(self, rows: Array, coef: Array, *, diagonal: float = 0.0) -> None:
        """``H_k -= sum_j coef[j, k] rows_j rows_j^T + diagonal * I`` for every class k."""
        bk = self._bk
        rows, coef = bk.asarray(rows), bk.asarray(coef)
        k, d = self.shape
        if rows.ndim != 2 or rows.shape[1] != d or coef.shape != (rows.shape[0], k):
            raise InputError(
                f"rows {rows.shape} / coefficients {coef.shape} do not fit (K, d) = {(k, d)}"
            )
        self._mu += diagonal
        if self._factors is None or self._rows.shape[0] + rows.shape[0] > self.max_pending_rows:
            self._fold_pending()
            nonnegative = bk.all(coef >= 0.0)
            for c in range(k):
                if nonnegative:  # removal curvatures: A^T A form, dispatched to syrk
                    scaled = rows * bk.sqrt(coef[:, c])[:, None]
                    self._base[c] -= scaled.T @ scaled
                else:
                    self._base[c] -= (rows.T * coef[:, c]) @ rows
            return
        # Z_c = base_c^{-1} U^T for the new rows is computed at the next solve, in the same
        # triangular solves as the right-hand side (one pass over the factor for both).
        self._rows = bk.concat([self._rows, rows])
        self._coef = bk.concat([self._coef, coef])

    def downdate_dense(self, delta: Array, *, diagonal: float = 0.0) -> None:
        """``H_k -= delta_k + diagonal * I`` for a dense change (e.g. re-weighting)."""
        delta = self._bk.asarray(delta)
        if tuple(delta.shape) != tuple(self._base.shape):
            raise InputError(f"downdate shape {delta.shape} != {self._base.shape}")
        self._fold_pending()
        self._base -= delta
        if diagonal:
            self._base -= diagonal * self._bk.eye(self._base.shape[1])[None, :, :]

    # ------------------------------------------------------------------ solve
    def _matvec(self, c: int, x: Array) -> Array:
        out = self._base[c] @ x - self._mu * x
        if self._rows.shape[0]:
            out -= self._rows.T @ (self._coef[:, c] * (self._rows @ x))
        return out

    def _cholesky_solve(self, c: int, r: Array) -> Array:
        """``base_c^{-1} r`` by two triangular solves (LAPACK's potrs is ~6x slower here)."""
        assert self._factors is not None
        return self._bk.cho_solve(self._factors[c], r)

    def _extend_z(self, c: int, b: Array) -> Array:
        """``base_c^{-1} b``, extending ``Z`` for class c in the same solves.

        ``Z`` gains the rows added since the last solve of class c (bordering ``U Z_c``).
        """
        done = self._z[c].shape[1]
        new_rows = self._rows[done:]
        if not new_rows.shape[0]:
            return self._cholesky_solve(c, b)
        bk = self._bk
        sol = self._cholesky_solve(c, bk.concat([new_rows.T, b[:, None]], axis=1))
        new = sol[:, :-1]
        old_rows = self._rows[:done]
        top = bk.concat([self._uz[c], old_rows @ new], axis=1)
        bottom = bk.concat([new_rows @ self._z[c], new_rows @ new], axis=1)
        self._uz[c] = bk.concat([top, bottom])
        self._z[c] = bk.concat([self._z[c], new], axis=1)
        return sol[:, -1]

    def _woodbury(
        self, c: int, r: Array, cap: Array | None, base_solve: Array | None = None
    ) -> Array:
        """Apply ``(base_c - U^T D_c U)^{-1}`` to r (``cap`` is the r x r capacitance)."""
        x = self._cholesky_solve(c, r) if base_solve is None else base_solve
        if cap is not None:
            y = self._bk.solve(cap, self._coef[:, c] * (self._rows @ x))
            x = x + self._z[c] @ y
        return x

    def solve(self, g: Array) -> SolveResult:
        """Solve ``H_k u_k = g[:, k]`` for every class k to relative residual ``rtol``.

        ``step`` is returned in the solver's backend, ``residual_norms`` in numpy.
        """
        k, d = self.shape
        g = self._bk.asarray(g)
        if tuple(g.shape) != (d, k):
            raise InputError(f"right-hand side must be (d, K) = {(d, k)}, got {g.shape}")
        refactored = False
        if self._factors is None:
            self._factorise()
            refactored = True
        u = self._bk.zeros((d, k))
        res = np.zeros(k)
        refinements = 0
        for c in range(k):
            u[:, c], res[c], n_ref, ok = self._solve_one(c, g[:, c])
            refinements += n_ref
            if not ok:  # stalled: fold everything in, refactorise, solve directly
                self._fold_pending()
                self._factorise()
                refactored = True
                u[:, c], res[c], n_ref, ok = self._solve_one(c, g[:, c])
                refinements += n_ref
                if not ok:
                    raise NumericalError(f"solve for class {c} did not converge")
        return SolveResult(
            step=u, residual_norms=res, refinements=refinements, refactored=refactored
        )

    def _conjugate_gradients(
        self,
        c: int,
        x: Array,
        r: Array,
        z: Array,
        cap: Array | None,
        tol: float,
    ) -> tuple[Array, int]:
        """Preconditioned CG from ``x`` (residual ``r``, preconditioned ``z``) to ``tol``."""
        p = z
        rz = float(r @ z)
        it = 0
        while it < self.max_refine:
            it += 1
            hp = self._matvec(c, p)
            alpha = rz / float(p @ hp)
            x = x + alpha * p
            r = r - alpha * hp
            if self._bk.norm(r) <= tol:
                break
            z = self._woodbury(c, r, cap)
            rz_new = float(r @ z)
            p = z + (rz_new / rz) * p
            rz = rz_new
        return x, it

    def _solve_one(self, c: int, b: Array) -> tuple[Array, float, int, bool]:
        """Conjugate gradients on the exact matrix, preconditioned by the Woodbury solve.

        The preconditioned operator is ``I - mu M^{-1}``: its eigenvalues lie in a cluster of
        relative width ``mu / (lam n)``, so one or two iterations reach ``rtol``.
        Returns (x, true residual norm, iterations, converged).
        """
        base_solve = self._extend_z(c, b)
        r_rows = self._rows.shape[0]
        cap = None
        if r_rows:
            cap = self._bk.eye(r_rows) - self._coef[:, c, None] * self._uz[c]
        bnorm = self._bk.norm(b)
        tol = self.rtol * bnorm
        x = self._woodbury(c, b, cap, base_solve)
        # M x = b exactly for M = base - U^T D U (Cholesky + Woodbury, backward stable), and
        # H = M - mu I, so the residual b - H x is mu x: no product with H is needed here. The
        # returned residual is still the true one, from an explicit product (below).
        r = self._mu * x
        rnorm = self._bk.norm(r)
        it = 0
        if rnorm > tol:
            z = self._woodbury(c, r, cap)
            if self._mu * self._bk.norm(z) <= tol:
                # a Neumann step: x0 + M^{-1} r0 leaves the residual mu M^{-1} r0 = mu z, again
                # known without a product with H (the usual case: it saves that product)
                x, it = x + z, 1
            else:
                x, it = self._conjugate_gradients(c, x, r, z, cap, tol)
        # certify with the true residual, not the recurrence
        rnorm = self._bk.norm(b - self._matvec(c, x))
        return x, rnorm, it, rnorm <= 1e3 * tol
