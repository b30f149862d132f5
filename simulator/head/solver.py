"""Solves with the aggregate Hessians of the K one-vs-rest heads, kept current by downdates.

The aggregate ``H_k`` (K x d x d) is never rebuilt over all data per removal (``method.md``,
"Hessians"). A removal changes it by a low-rank term and a multiple of the identity,

    H_k' = H_k - sum_j c_jk x_j x_j^T - mu I,      c_jk = a_j p_jk (1 - p_jk),  mu = lam * m,

so the solver keeps a Cholesky factor of a *base* matrix and the pending rows ``x_j`` with
their per-class coefficients. Solves apply the Woodbury identity to the pending rows
(Hager 1989, "Updating the inverse of a matrix") and correct for ``mu I`` by Neumann steps
against the exact implicit matrix: with ``M = H + mu I`` the Woodbury-solved matrix and
``H >= floor I`` (``floor = lam n'``, the regulariser of the retained rows), each step multiplies
the residual by ``mu M^{-1}``, of norm at most ``q = mu / (floor + mu)``, about the fraction of
rows removed since the last factorisation. One step is taken and the true residual read back;
where it is above ``rtol``, more steps follow, up to ``ceil(log(rtol / 2) / log q) - 1`` (the
count that the bound guarantees; one step suffices in practice because the bound is loose).
Where that is not reached (rounding, or no ``floor`` given), preconditioned conjugate
gradients finish the job, and past those a fresh factorisation. A removal therefore costs a
few ``O(d^2)`` triangular solves per class, not the ``O(d^3 / 3)`` of a fresh Cholesky
factorisation. Past
``max_pending_rows`` pending rows, or after a dense change (sample re-weighting), the pending
terms are folded into the base and the factor is recomputed. No explicit inverse is ever
formed.

A batch larger than ``max_pending_rows`` (a fold would cost ``K d^2 m`` flops and a
refactorisation) joins the *bulk rows* instead, with the pending rows: they stay out of the
factor and enter only the exact implicit matrix, and the solve runs preconditioned conjugate
gradients on it with the Woodbury solve as the preconditioner (eigenvalues of the
preconditioned matrix in ``[1 - q, 1]``, ``q`` the bulk's share of the curvature). The bulk is
folded past ``max_bulk_rows`` rows, after a solve that needed more than half of
``bulk_iterations`` steps, on a dense change (``docs/certified-head.md``, "Bulk rows"), or
when small batches have paid for the fold: the conjugate-gradient steps of their solves
against the bulk reach ``bulk_rent`` (:func:`default_bulk_rent`), so single removals after a
purge stop paying a pass over the bulk rows at every step.

All K classes are solved together: the factors are one (K, d, d) array, the right-hand sides
(K, d, 1), and every step is one batched call (one kernel on a GPU) for all classes. The
common path reads back from the device once per solve: the K true residual norms and the K
right-hand-side norms, in one (2, K) array (issue 27; ``tests/test_device_transfers.py``).
On the CPU the factors dominate the cost instead: each triangular pass reads K d^2 floats
(80 MB at d = 1,024, K = 10), which is why one Neumann step, not the guaranteed count, is the
default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError, NumericalError
from simulator.head.backend import Array, Backend, NotPositiveDefinite, backend_of

FloatArray = NDArray[np.float64]


def default_pending_rows(d: int) -> int:
    """Pending rows before a fold: ``d / 8`` within [16, 128].

    A solve against r pending rows costs about ``4 K r d`` flops on top of the factor's
    ``2 K d^2``, a fold ``K d^3 / 3``: folding every r removals is cheapest near ``r ~ d / 8``
    to ``d / 3`` (measured at d = 1,024: 128 rows beat 256, ``docs/benchmarks.md``; at d = 64,
    128 pending rows made the Woodbury terms larger than the factor's own).
    """
    return max(16, min(128, d // 8))


#: On a backend that applies inverses by products (a GPU), a fold below this many flops (the
#: rows' ``K d^2 m`` and a refactorisation's ``K d^3 / 3``) costs less than the
#: conjugate-gradient steps of bulk rows, whose every step waits for a read-back. On the H200 a
#: 1,000-row batch at d = 1,024, K = 10 (1.4e10 flops) took 5.9 ms folded against 10.5 ms as
#: bulk rows, while 1,000 rows at d = 4,096, K = 100 (4e12) took 377 ms folded against 56 ms
#: (docs/benchmarks.md, issue 27).
DEVICE_FOLD_FLOPS = 5e10

#: At most this dimension, every backend applies ``base^{-1}`` by batched products from the
#: first solve with fresh factors (``HessianSolver._solve_base``). There the inverse costs
#: ``K d^3`` flops (2e7 at d = 128, K = 10: about a millisecond, once per fold), and each
#: application one batched product where two triangular solves cost numpy 2K calls (one per
#: class and pass) and torch two batched calls: at d = 64, K = 10 the single removal's solve
#: took 1.2-1.3 ms of the removal's 2 ms, almost all of it call overhead (issue 27).
PRODUCT_SOLVE_MAX_DIM = 128


def default_bulk_rows(d: int) -> int:
    """Bulk rows kept out of the factor before a fold: ``16 d``.

    A conjugate-gradient step reads each bulk row twice (``2 d`` floats; 2 us at d = 1,024)
    besides three passes over the ``K d^2`` factors and base, where folding the row costs
    ``K d^2`` flops (0.3 ms at K = 10, one core) and the fold a refactorisation: a bulk row
    pays for itself over about a hundred steps, a few dozen solves. At ``16 d`` rows the bulk
    adds about three passes over the factors (K = 10) to each step. The fold is deferred, not
    avoided: a stream longer than ``16 d`` rows of large batches pays it when the bulk is full.
    """
    return 16 * d


def default_bulk_rent(d: int) -> int:
    """Conjugate-gradient steps of small batches against the bulk before it is folded: ``d/10``.

    Rent or buy: each step reads every bulk row twice (``4 K d`` flops per row at the speed
    of memory), the fold costs ``K d^2`` flops per row at the speed of a dense product (and a
    refactorisation), so the fold costs about ``d / 4`` steps' flops, ``d / 10`` steps' time
    on the CPU (a step against 8,800 bulk rows took 9 ms at d = 1,024, K = 10, their fold
    about 0.9 s, two cores). Folding once the steps have cost as much never spends more than
    twice the better choice made in hindsight. Only small batches' solves count: a stream of
    large batches keeps its bulk (a fold would land on one batch's latency), and at most
    ``max_bulk_rows`` rows are kept either way.
    """
    return max(16, d // 10)


@dataclass(frozen=True)
class SolveResult:
    """Solution ``u`` (d x K) of ``H_k u_k = g_k`` and the true residual norms ``||g - H u||``."""

    step: Array
    residual_norms: FloatArray
    refinements: int
    refactored: bool


class HessianSolver:
    """Aggregate per-class Hessians with low-rank downdates and batched Cholesky solves.

    Parameters
    ----------
    hessians : (K, d, d) symmetric positive definite matrices (copied).
    max_pending_rows : low-rank rows kept before they are folded in and the factor recomputed;
        None gives :func:`default_pending_rows` of d.
    rtol : relative residual ``||g - H u|| / ||g||`` that the solve aims for. The certificate
        charges the true residual of every solve (``solve_residuals`` in the bounds), so any
        value is sound; 1e-5 adds about 1e-5 ||g|| to a removal's residual (against ~1e-2 for
        the removal itself) and lets one Neumann step suffice where 1e-6 took two in most
        single removals of a long stream (docs/certified-head.md).
    max_refine : conjugate-gradient iterations after the Neumann steps before falling back to a
        fresh factorisation.
    backend : the array library (:mod:`simulator.head.backend`); by default that of
        ``hessians``. Right-hand sides and downdates are moved to it.
    factors : lower Cholesky factors of ``hessians`` already computed, (K, d, d) or one per
        class (a warm retrain's polish factorised the same matrices: K ``d^3 / 3`` flops
        saved), or None.
    """

    def __init__(  # noqa: PLR0913 (keyword-only tuning options, every one defaulted)
        self,
        hessians: FloatArray,
        *,
        max_pending_rows: int | None = None,
        rtol: float = 1e-5,
        max_refine: int = 6,
        max_bulk_rows: int | None = None,
        bulk_iterations: int = 16,
        bulk_rent: int | None = None,
        backend: Backend | None = None,
        factors: Array | list[Array] | None = None,
    ) -> None:
        self._bk = backend_of(hessians) if backend is None else backend
        if hessians.ndim != 3 or hessians.shape[1] != hessians.shape[2]:
            raise InputError(f"Hessians must have shape (K, d, d), got {hessians.shape}")
        d = int(hessians.shape[1])
        self.max_pending_rows = (
            default_pending_rows(d) if max_pending_rows is None else max_pending_rows
        )
        self.max_bulk_rows = default_bulk_rows(d) if max_bulk_rows is None else max_bulk_rows
        self.rtol = rtol
        self.max_refine = max_refine
        self.bulk_iterations = bulk_iterations
        self.bulk_rent = default_bulk_rent(d) if bulk_rent is None else bulk_rent
        self._last_small = False  # the last downdate was a small batch (its solves pay rent)
        self.factorisations = 0
        self._base: Array = self._bk.copy(hessians)
        self._base_shared = False  # lent to a snapshot: copied before it is written in place
        self._clear_pending()
        self._factors: Array | None = None
        self._owns_factors = True  # False: the caller's factors, never written over
        self._spare: Array | None = None  # stale factors of our own, reused by _factorise
        self._zt_buf: Array | None = None  # (K, capacity, d): Z transposed, see _append_z
        self._inverse: Array | None = None  # base^{-1} where the backend prefers products
        self._factor_solves = 0  # solves with the current factors (the inverse is lazy)
        if factors is None:
            self._factorise()
        else:  # the caller's factors of exactly these matrices (a retrain's polish)
            stacked = self._stacked(factors)
            if tuple(stacked.shape) != tuple(self._base.shape):
                raise InputError(f"factors {tuple(stacked.shape)} != {tuple(self._base.shape)}")
            self._factors = stacked
            self._owns_factors = stacked is not factors
            self.factorisations += 1

    def _stacked(self, arrays: Array | list[Array]) -> Array:
        """One (K, ...) array of the backend from a stacked array or a list of K arrays."""
        if isinstance(arrays, list):
            return self._bk.asarray(np.stack([self._bk.to_numpy(a) for a in arrays]))
        return self._bk.asarray(arrays)

    # ------------------------------------------------------------------ state
    @property
    def shape(self) -> tuple[int, int]:
        """(K, d)."""
        return int(self._base.shape[0]), int(self._base.shape[1])

    @property
    def bulk_rows(self) -> int:
        """Rows of large batches held out of the factor (solved by conjugate gradients)."""
        return sum(int(rows.shape[0]) for rows, _ in self._bulk)

    @property
    def factors(self) -> Array | None:
        """The lower Cholesky factors (K, d, d) of the base matrices, or None when stale."""
        return self._factors

    @property
    def hessians(self) -> Array:
        """The current matrices, materialised (a copy; O(K r d^2))."""
        out = self._bk.copy(self._base)
        if self._rows.shape[0]:
            # (K, d, r) @ (r, d): every class's sum_j c_jk x_j x_j^T in one batched product
            out -= (self._rows.T[None, :, :] * self._coef.T[:, None, :]) @ self._rows
        for rows, coef in self._bulk:
            out -= (rows.T[None, :, :] * coef.T[:, None, :]) @ rows
        if self._mu:
            out -= self._mu * self._bk.eye(out.shape[1])[None, :, :]
        return out

    def replace(self, hessians: Array) -> None:
        """Swap in freshly computed Hessians (refresh, retrain, naive rebuild)."""
        if tuple(hessians.shape) != tuple(self._base.shape):
            raise InputError(f"Hessian shape {hessians.shape} != {self._base.shape}")
        self._base = self._bk.copy(hessians)
        self._base_shared = False
        self._clear_pending()
        self._drop_factors()
        self._factorise()

    def replace_columns(self, columns: tuple[int, ...], hessians: Array) -> None:
        """Swap in freshly computed Hessians of the classes ``columns``; the others keep theirs.

        ``hessians[j]`` is class ``columns[j]``'s; the other classes keep their matrices,
        downdates included.

        The pending and bulk rows and ``mu`` are folded into every class first (the fresh
        matrices are over the retained rows and need none of them; the other classes keep
        them), then every class is factorised again: ``K d^3 / 3`` flops besides the fold,
        against the ``n d^2`` per class of the rows' pass that made ``hessians``.
        """
        k, d = self.shape
        if tuple(hessians.shape) != (len(columns), d, d):
            raise InputError(f"Hessian shape {hessians.shape} != {(len(columns), d, d)}")
        if len(columns) == k and tuple(columns) == tuple(range(k)):
            self.replace(hessians)
            return
        self._fold_pending()  # in place, the base our own (_own_base)
        for j, c in enumerate(columns):
            self._base[c] = hessians[j]
        self._factorise()

    def _clear_pending(self) -> None:
        self._clear_woodbury()
        self._bulk: list[tuple[Array, Array]] = []  # large batches' (rows, coef), unfolded
        self._bulk_stalled = False
        self._bulk_rent_paid = 0  # small batches' conjugate-gradient steps against the bulk
        self._mu = 0.0

    def _clear_woodbury(self) -> None:
        """No Woodbury rows (``mu`` and the bulk rows stay)."""
        k, d = self._base.shape[0], self._base.shape[1]
        bk = self._bk
        self._rows = bk.zeros((0, d))
        self._coef = bk.zeros((0, k))
        self._z = bk.zeros((k, d, 0))  # base_k^{-1} U^T, extended at each solve
        self._zt_rows = 0  # rows of Z held in _zt_buf (a view of which _z is, when equal)
        self._uz = bk.zeros((k, 0, 0))  # U Z_k, kept by bordering
        self._cap_inverse = bk.zeros((k, 0, 0))  # (I - D_k U Z_k)^{-1}, kept by bordering

    def _factorise(self) -> None:
        spare, self._spare = self._spare, None  # stale factors of our own: their memory
        try:
            self._factors = self._bk.cholesky(self._base, out=spare)
            self._owns_factors = True
            self._inverse, self._factor_solves = None, 0
        except NotPositiveDefinite as exc:
            raise NumericalError(f"Hessian of class {exc.index} is not positive definite") from exc
        self.factorisations += 1

    def _solve_base(self, B: Array) -> Array:
        """``base_k^{-1} B_k`` for ``B`` (K, d, c).

        Two triangular solves with the factors or, where the backend prefers products (a
        GPU: a batched triangular solve with one right-hand side took 0.8 ms on an H200 at
        d = 1,024, K = 10, a batched product microseconds), a batched product with
        ``base^{-1}``. The inverse costs ``K d^3`` (about 7 ms there), so it is formed at the
        third application with the same factors (a solve makes one or two): a lone solve
        after a fold (a large batch) keeps the triangular solves, a stream of single
        removals gets the products. Up to ``PRODUCT_SOLVE_MAX_DIM`` every backend takes the
        products from the first application: the inverse is cheap there and the calls are
        what a solve costs. The solves stay
        verified by their true residual, so an inaccurate inverse would cost refinement
        steps, not soundness.
        """
        if self._inverse is not None:
            return self._bk.batched_product(self._inverse, B)
        assert self._factors is not None
        self._factor_solves += 1
        small = self.shape[1] <= PRODUCT_SOLVE_MAX_DIM
        if small or (self._bk.prefers_products and self._factor_solves > 2):
            self._inverse = self._bk.cholesky_inverse(self._factors)
            return self._bk.batched_product(self._inverse, B)
        return self._bk.cho_solve(self._factors, B)

    def _fold_pending(self) -> None:
        """Fold pending rows and ``mu`` into the base, in place; the factor becomes stale.

        In place: a materialised copy (:attr:`hessians`) cost 0.28 s at d = 1,024, K = 10, on
        every large batch, mostly the page faults of 80 MB of fresh memory.
        """
        self._own_base()
        if self._rows.shape[0]:
            self._subtract_rows(self._rows, self._coef, nonnegative=None)
        for rows, coef in self._bulk:
            self._subtract_rows(rows, coef, nonnegative=None)
        if self._mu:
            diagonals = self._bk.diagonals(self._base)
            diagonals -= self._mu
        self._clear_pending()
        self._drop_factors()

    def _drop_factors(self) -> None:
        """The factors are stale; their memory (if ours) is kept for the next factorisation."""
        if self._factors is not None and self._owns_factors:
            self._spare = self._factors
        self._factors = None
        self._inverse, self._factor_solves = None, 0

    def _subtract_rows(self, rows: Array, coef: Array, *, nonnegative: bool | None) -> None:
        """``base_k -= sum_j coef[j, k] rows_j rows_j^T`` in place: ``K d^2 m`` flops.

        One product per class bounds the memory; ``nonnegative`` coefficients (removal
        curvatures; None checks, a read-back from a device) use the ``A^T A`` form, which
        numpy dispatches to BLAS ``syrk`` (half the flops of a general product).
        """
        bk = self._bk
        self._own_base()
        if nonnegative is None:
            nonnegative = bk.all(coef >= 0.0)
        for c in range(self._base.shape[0]):
            if nonnegative:
                scaled = rows * bk.sqrt(coef[:, c])[:, None]
                self._base[c] -= scaled.T @ scaled
            else:
                self._base[c] -= (rows.T * coef[:, c]) @ rows

    def state_dict(self, *, host: bool = True) -> dict[str, Any]:
        """Every array and counter, as numpy (the factors too: a restore is bit-exact).

        ``z``, ``uz`` and ``factors`` are lists of per-class arrays (the layout of the
        checkpoints written before the solver was batched). ``host=False`` leaves the arrays
        on the backend's device, for a caller that reads them back later on another thread
        (:func:`simulator.state_files.host_arrays`). They are the solver's own arrays, not
        copies, except ``z`` (its buffer is written over at every removal): the base and the
        factors are *lent*, copy on write. The next in-place write to the base (a fold)
        copies it first, and the lent factors are never reused as the memory of the next
        factorisation. Copying them at every snapshot cost 0.7 s of a 2,000-row batch at
        d = 1,024, K = 10 on two cores (170 MB of fresh memory), where a fold, if one comes
        at all before the next snapshot, pays 84 MB once.
        """
        bk = self._bk
        out = bk.to_numpy if host else _as_is

        def classes(arrays: Array) -> list[Array]:
            return _per_class(arrays, bk) if host else list(arrays)

        if host:
            # a copy (folds write into the base), made on the device: one read-back, not two
            base, factors = bk.copy(self._base), self._factors
            factors = None if factors is None else bk.copy(factors)
        else:
            base, factors = self._base, self._factors
            self._base_shared = True
            self._owns_factors = False  # lent: _drop_factors will not write over them
        return {
            "base": out(base),
            "rows": out(self._rows),
            "coef": out(self._coef),
            "z": classes(bk.copy(self._z)),  # a copy: the buffer is written over
            "uz": classes(self._uz),
            "cap_inverse": out(self._cap_inverse),
            "mu": float(self._mu),
            "bulk": [(out(rows), out(coef)) for rows, coef in self._bulk],
            "bulk_stalled": self._bulk_stalled,
            "bulk_rent_paid": self._bulk_rent_paid,
            "last_small": self._last_small,
            "factors": None if factors is None else classes(factors),
            "factorisations": self.factorisations,
            "factor_solves": self._factor_solves,
            "inverse": self._inverse is not None,
        }

    def _own_base(self) -> None:
        """Copy the base before writing it in place when a snapshot holds it (``state_dict``)."""
        if self._base_shared:
            self._base = self._bk.copy(self._base)
            self._base_shared = False

    def __getstate__(self) -> dict[str, Any]:
        """Pickle everything but the spare memory of stale factors."""
        return {
            **self.__dict__,
            "_spare": None,
            "_zt_buf": None,
            "_zt_rows": 0,
            "_base_shared": False,  # the copy unpickled is nobody else's
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle, upgrading a solver pickled before it was batched (per-class lists)."""
        fresh = {
            "_owns_factors": False,
            "_spare": None,
            "_zt_buf": None,
            "_zt_rows": 0,
            "_base_shared": False,
            "_bulk_rent_paid": 0,  # pickled before the rent was kept
            "_last_small": False,
        }
        self.__dict__.update({**fresh, **state})
        if "bulk_rent" not in state:
            self.bulk_rent = default_bulk_rent(self.shape[1])
        if "_bulk" not in state:  # pickled before bulk rows existed
            self._bulk, self._bulk_stalled, self.bulk_iterations = [], False, 16
            self.max_bulk_rows = default_bulk_rows(self.shape[1])
        if isinstance(self._z, list):
            saved = self.state_dict()  # accepts the lists as they were
            self.load_state_dict(saved)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Install :meth:`state_dict`'s arrays (shapes must match)."""
        bk = self._bk
        base = bk.copy(np.asarray(state["base"], dtype=np.float64))  # folds write into it
        if tuple(base.shape) != tuple(self._base.shape):
            raise InputError(f"saved Hessians {tuple(base.shape)} != {tuple(self._base.shape)}")
        k, d = self.shape
        self._base, self._base_shared = base, False
        self._rows = bk.asarray(np.asarray(state["rows"], dtype=np.float64).reshape(-1, d))
        self._coef = bk.asarray(np.asarray(state["coef"], dtype=np.float64).reshape(-1, k))
        done = len(state["z"][0][0]) if k and d else 0
        self._z = bk.asarray(np.asarray(state["z"], dtype=np.float64).reshape(k, d, done))
        self._zt_rows = 0  # not in the buffer: the next extension copies it there
        self._uz = bk.asarray(np.asarray(state["uz"], dtype=np.float64).reshape(k, done, done))
        if "cap_inverse" in state:  # as it was kept (bordered): a recomputed one differs
            saved = np.asarray(state["cap_inverse"], dtype=np.float64).reshape(k, done, done)
            self._cap_inverse = bk.asarray(saved)
        else:
            eye = bk.eye(done)[None, :, :]
            capacitance = eye - self._coef.T[:, :done, None] * self._uz
            self._cap_inverse = bk.solve(capacitance, bk.expand(eye, (k, done, done)))
        self._mu = float(state["mu"])
        self._bulk = [
            (
                bk.copy(np.asarray(rows, dtype=np.float64)),
                bk.copy(np.asarray(coef, dtype=np.float64)),
            )
            for rows, coef in state.get("bulk", [])
        ]
        self._bulk_stalled = bool(state.get("bulk_stalled", False))
        self._bulk_rent_paid = int(state.get("bulk_rent_paid", 0))
        self._last_small = bool(state.get("last_small", False))
        factors = state["factors"]
        self._factors = None if factors is None else bk.copy(np.asarray(factors))
        self._owns_factors, self._spare = True, None
        self._inverse, self._factor_solves = None, int(state.get("factor_solves", 0))
        if state.get("inverse") and self._factors is not None:  # a function of the factors
            self._inverse = bk.cholesky_inverse(self._factors)
        self.factorisations = int(state["factorisations"])

    # -------------------------------------------------------------- downdates
    def downdate_rows(
        self,
        rows: Array,
        coef: Array,
        *,
        diagonal: float = 0.0,
        nonnegative: bool | None = None,
    ) -> None:
        """``H_k -= sum_j coef[j, k] rows_j rows_j^T + diagonal * I`` for every class k.

        ``nonnegative`` says whether every ``coef`` is ``>= 0`` (removal curvatures are), which
        lets a fold use symmetric products; None checks it (a read-back from the device).
        """
        bk = self._bk
        rows, coef = bk.asarray(rows), bk.asarray(coef)
        k, d = self.shape
        if rows.ndim != 2 or rows.shape[1] != d or coef.shape != (rows.shape[0], k):
            raise InputError(
                f"rows {rows.shape} / coefficients {coef.shape} do not fit (K, d) = {(k, d)}"
            )
        self._mu += diagonal
        m = int(rows.shape[0])
        self._last_small = m <= self.max_pending_rows
        if self._last_small and self._bulk and self._bulk_rent_paid >= self.bulk_rent:
            self._fold_pending()  # small batches paid for the fold (module docstring)
        if self._takes_bulk(m):
            if self._rows.shape[0]:  # the Woodbury rows go too: the factor stays exact
                self._bulk.append((self._rows, self._coef))
                self._clear_woodbury()
            self._bulk.append((rows, coef))  # kept as they came: no copy of the bulk
            return
        if self._factors is None or self._rows.shape[0] + rows.shape[0] > self.max_pending_rows:
            self._fold_pending()
            self._subtract_rows(rows, coef, nonnegative=nonnegative)
            return
        # Z_k = base_k^{-1} U^T for the new rows is computed at the next solve, in the same
        # triangular solves as the right-hand side (one pass over the factors for both).
        self._rows = bk.concat([self._rows, rows])
        self._coef = bk.concat([self._coef, coef])

    def _takes_bulk(self, m: int) -> bool:
        """Whether ``m`` new rows join the bulk rows instead of a fold (module docstring).

        Rows that overflow the Woodbury rows join the bulk (the pending Woodbury rows with
        them) when the batch alone is larger than ``max_pending_rows`` or a bulk exists
        already, while the bulk stays within ``max_bulk_rows`` and the last solve against it
        converged within half of ``bulk_iterations`` conjugate-gradient steps, and, on a
        backend that prefers products (a GPU), when the fold would cost more than
        ``DEVICE_FOLD_FLOPS``. Otherwise everything is folded in, as single removals always
        were.
        """
        if self.max_bulk_rows <= 0 or self._bulk_stalled or self._factors is None:
            return False
        pending = int(self._rows.shape[0])
        if pending + m <= self.max_pending_rows:
            return False
        large = m > self.max_pending_rows or bool(self._bulk)
        if self._bk.prefers_products and not self._bulk:
            k, d = self.shape
            large = large and k * d * d * (pending + m + d / 3) > DEVICE_FOLD_FLOPS
        return large and self.bulk_rows + pending + m <= self.max_bulk_rows

    def downdate_dense(self, delta: Array, *, diagonal: float = 0.0) -> None:
        """``H_k -= delta_k + diagonal * I`` for a dense change (e.g. re-weighting)."""
        delta = self._bk.asarray(delta)
        if tuple(delta.shape) != tuple(self._base.shape):
            raise InputError(f"downdate shape {delta.shape} != {self._base.shape}")
        self._fold_pending()  # the base is the solver's own after it
        self._base -= delta
        if diagonal:
            self._base -= diagonal * self._bk.eye(self._base.shape[1])[None, :, :]

    # ------------------------------------------------------------------ solve
    def _matvec(self, X: Array) -> Array:
        """``H_k X_k`` for every class: ``X`` (K, d, c), the exact implicit matrices."""
        out = self._bk.batched_product(self._base, X) - self._mu * X
        if self._rows.shape[0]:
            out = out - _rows_term(self._rows, self._coef, X)
        for rows, coef in self._bulk:
            out = out - _rows_term(rows, coef, X)
        return out

    def _extend_z(self, B: Array) -> Array:
        """``base_k^{-1} B_k`` for ``B`` (K, d, c), extending ``Z`` in the same solves.

        ``Z`` gains the rows added since the last solve; ``U Z`` and the inverse capacitance
        are extended by bordering (:meth:`_border_inverse`).
        """
        bk = self._bk
        done = self._z.shape[2]
        new_rows = self._rows[done:]
        fresh = new_rows.shape[0]
        if not fresh:
            return self._solve_base(B)
        k, d = self.shape
        rhs = bk.concat([bk.expand(new_rows.T[None, :, :], (k, d, fresh)), B], axis=2)
        sol = self._solve_base(rhs)
        new = sol[:, :, :fresh]
        old_new = self._rows[:done] @ new  # (K, done, fresh)
        new_old = new_rows @ self._z  # (K, fresh, done)
        new_new = new_rows @ new  # (K, fresh, fresh)
        self._border_inverse(old_new, new_old, new_new)
        top = bk.concat([self._uz, old_new], axis=2)
        bottom = bk.concat([new_old, new_new], axis=2)
        self._uz = bk.concat([top, bottom], axis=1)
        self._append_z(new)
        return sol[:, :, fresh:]

    def _append_z(self, new: Array) -> None:
        """``Z <- [Z, new]`` in a buffer of ``max_pending_rows`` columns, stored transposed.

        ``Z`` is a view of its first columns: a concatenation copied all of ``Z`` (10 MB at
        d = 1,024, K = 10, 128 rows) at every single removal, 12% of its time.
        """
        bk = self._bk
        k, d, done = self._z.shape
        rows = done + new.shape[2]
        buf = self._zt_buf
        if buf is None or buf.shape[1] < rows or self._zt_rows != done:
            grown = bk.zeros((k, max(rows, self.max_pending_rows), d))
            grown[:, :done, :] = self._z.swapaxes(1, 2)
            self._zt_buf = buf = grown
        buf[:, done:rows, :] = new.swapaxes(1, 2)
        self._zt_rows = rows
        self._z = buf[:, :rows, :].swapaxes(1, 2)

    def _border_inverse(self, old_new: Array, new_old: Array, new_new: Array) -> None:
        """Extend ``(I - D_k U Z_k)^{-1}`` to the new rows by the bordered (Schur) inverse.

        With the capacitance ``[[A, P], [Q, R]]`` (``A`` the old rows', known inverse) and
        ``S = R - Q A^{-1} P``, the inverse is ``[[A^{-1} + A^{-1} P S^{-1} Q A^{-1},
        -A^{-1} P S^{-1}], [-S^{-1} Q A^{-1}, S^{-1}]]`` (Golub and Van Loan, 3.2): ``O(K r^2 t)``
        for t new rows instead of a fresh ``O(K r^3)`` solve per Woodbury application.
        """
        bk = self._bk
        done = old_new.shape[1]
        fresh = new_new.shape[1]
        coef_old = self._coef.T[:, :done, None]
        coef_new = self._coef.T[:, done:, None]
        P = -coef_old * old_new
        Q = -coef_new * new_old
        R = bk.eye(fresh)[None, :, :] - coef_new * new_new
        inv_a = self._cap_inverse
        a_p = inv_a @ P
        q_a = Q @ inv_a
        schur = R - Q @ a_p
        if fresh == 1:  # a single removal: the Schur complement is a number per class
            s_inv = 1.0 / schur  # (a batched LU would upload pointer arrays on a GPU)
        else:
            s_inv = bk.solve(schur, bk.expand(bk.eye(fresh)[None, :, :], tuple(R.shape)))
        a_p_s = a_p @ s_inv
        top = bk.concat([inv_a + a_p_s @ q_a, -a_p_s], axis=2)
        bottom = bk.concat([-(s_inv @ q_a), s_inv], axis=2)
        self._cap_inverse = bk.concat([top, bottom], axis=1)

    def _capacitance_inverse(self) -> Array | None:
        """``(I - D_k U Z_k)^{-1}`` (K, r, r) for the pending rows, or None when there are none."""
        return self._cap_inverse if self._rows.shape[0] else None

    def _woodbury(
        self, R: Array, cap_inverse: Array | None, base_solve: Array | None = None
    ) -> Array:
        """``M_k^{-1} R_k`` with ``M_k = base_k - U^T D_k U`` for every class (``R``: K, d, c).

        ``x + Z_k (I - D_k U Z_k)^{-1} D_k U x`` with ``x = base_k^{-1} R_k`` (Woodbury).
        """
        x = self._solve_base(R) if base_solve is None else base_solve
        if cap_inverse is not None:
            y = cap_inverse @ (self._coef.T[:, :, None] * (self._rows @ x))
            x = x + self._z @ y
        return x

    def neumann_steps(self, floor: float) -> int:
        """Neumann steps after the Woodbury solve that surely bring the residual to ``rtol / 2``.

        Each multiplies it by ``mu M^{-1}``, of norm at most ``q = mu / (floor + mu)`` when
        ``H >= floor I`` (module docstring); ``floor <= 0`` (unknown) gives one step, checked.
        """
        if not self._mu:
            return 0
        if floor <= 0.0:
            return 1
        q = self._mu / (floor + self._mu)
        need = math.ceil(math.log(0.5 * self.rtol) / math.log(q)) - 1 if q > 0 else 0
        return max(1, min(need, self.max_refine))

    def solve(
        self,
        g: Array,
        *,
        floor: float = 0.0,
        rtol: float | None = None,
        conjugate_gradients: bool = True,
    ) -> SolveResult:
        """Solve ``H_k u_k = g[:, k]`` for every class k to relative residual ``rtol``.

        ``rtol`` (default: the solver's) may be loosened by a caller that measures the error
        of what it does with the solution anyway (a correction step, ``certified.py``).

        ``floor`` is a lower bound on every ``H_k``'s smallest eigenvalue (``lam n'``), which
        bounds the Neumann steps that can be needed (:meth:`neumann_steps`). One read-back
        from the device on the common path (the residual norms), one more per further step;
        ``step`` is returned in the solver's backend, ``residual_norms`` in numpy.

        ``conjugate_gradients=False`` stops before the conjugate-gradient stage: with bulk
        rows that is the Woodbury solve of the factored matrix alone (the bulk rows and
        ``mu`` left out: ``O(K d^2)``, where each conjugate-gradient step reads every bulk
        row twice), for a caller that measures the error of what it does with the step (a
        correction step, ``certified.py``). Its true residual against the exact matrix is
        still read back.
        """
        k, d = self.shape
        bk = self._bk
        g = bk.asarray(g)
        if tuple(g.shape) != (d, k):
            raise InputError(f"right-hand side must be (d, K) = {(d, k)}, got {g.shape}")
        refactored = False
        if self._factors is None:
            self._factorise()
            refactored = True
        B = g.T[:, :, None]
        base_solve = self._extend_z(B)  # extends Z and U Z to every pending row first
        cap_inverse = self._capacitance_inverse()
        x = self._woodbury(B, cap_inverse, base_solve)
        # M x = b exactly (Cholesky + Woodbury, backward stable) and H = M - mu I, so the
        # residual b - H x is mu x; a Neumann step adds z = M^{-1} (mu x) and leaves the
        # residual mu z, so each step solves with the previous step's correction. One step is
        # taken, the true residual read back (the certificate charges it); more steps follow
        # only where it is above tol, up to the number that the contraction bound guarantees
        # (with bulk rows, conjugate gradients do it all: Neumann steps would contract by the
        # bulk's share of the curvature, unbounded here, and CG converges faster)
        bulk = bool(self._bulk)
        steps = 0
        z = x
        if self._mu and not bulk:
            z = self._woodbury(self._mu * z, cap_inverse)
            x, steps = x + z, 1
        e, res, bnorm = self._residual(B, x)
        tol = (self.rtol if rtol is None else rtol) * bnorm
        limit = 0 if bulk else self.neumann_steps(floor)
        while not np.all(res <= tol) and steps < limit:  # NaN counts as above
            z = self._woodbury(self._mu * z, cap_inverse)
            x, steps = x + z, steps + 1
            e, res, _ = self._residual(B, x)
        if conjugate_gradients and not np.all(res <= tol):
            iterations = self.bulk_iterations if bulk else self.max_refine
            x, res, more, refolded = self._refine(B, x, (e, res), tol, iterations)
            steps += more
            refactored = refactored or refolded
            # slow convergence: the bulk holds too much of the curvature; fold it next time
            self._bulk_stalled = bulk and not refolded and 2 * more > self.bulk_iterations
            if bulk and not refolded and self._last_small:
                self._bulk_rent_paid += more
        return SolveResult(
            step=x[:, :, 0].T, residual_norms=res, refinements=steps, refactored=refactored
        )

    def _residual(self, B: Array, x: Array) -> tuple[Array, FloatArray, FloatArray]:
        """``e = b - H x`` (K, d, 1), ``||e_k||`` and ``||b_k||`` per class, in one read-back."""
        bk = self._bk
        e = B - self._matvec(x)
        both = bk.to_numpy(bk.stack([bk.norms(e[:, :, 0], axis=1), bk.norms(B[:, :, 0], axis=1)]))
        return e, both[0], both[1]

    def _refine(
        self,
        B: Array,
        x: Array,
        residual: tuple[Array, FloatArray],
        tol: FloatArray,
        iterations: int,
    ) -> tuple[Array, FloatArray, int, bool]:
        """Conjugate gradients on the classes above ``tol``, then a fresh factorisation.

        The rare path (one read-back per iteration): preconditioned CG (by the Woodbury
        solve) on the exact matrices, every class at once, the converged ones frozen. Where
        ``max_refine`` iterations leave a residual above ``1e3 tol``, everything is folded in,
        refactorised and solved directly. Returns (x, residual norms, iterations, refactored).
        """
        e, res = residual
        x, it = self._conjugate_gradients(e, x, ~(res <= tol), tol, iterations)
        _, res, _ = self._residual(B, x)
        if np.all(res <= 1e3 * tol):
            return x, res, it, False
        self._fold_pending()  # stalled: fold everything in, refactorise, solve directly
        self._factorise()
        x = self._solve_base(B)
        _, res, _ = self._residual(B, x)
        if not np.all(res <= 1e3 * tol):
            bad = int(np.flatnonzero(~(res <= 1e3 * tol))[0])
            raise NumericalError(f"solve for class {bad} did not converge")
        return x, res, it, True

    def _conjugate_gradients(
        self, r: Array, x: Array, active: NDArray[np.bool_], tol: FloatArray, iterations: int
    ) -> tuple[Array, int]:
        """Preconditioned CG from ``x`` (residual ``r = b - H x``) for the ``active`` classes.

        To ``tol`` per class, in at most ``iterations`` steps.
        """
        bk = self._bk
        cap_inverse = self._capacitance_inverse()
        z = self._woodbury(r, cap_inverse)
        p = z
        rz = self._dots(r, z)
        it = 0
        while it < iterations and active.any():
            it += 1
            hp = self._matvec(p)
            php = self._dots(p, hp)
            mask = bk.asarray(active.astype(np.float64))
            alpha = bk.where(mask > 0, rz / bk.maximum(php, 1e-300), 0.0)[:, None, None]
            x = x + alpha * p
            r = r - alpha * hp
            active = active & ~(bk.to_numpy(bk.norms(r[:, :, 0], axis=1)) <= tol)
            if not active.any():  # converged: no preconditioner solve for a next direction
                break
            z = self._woodbury(r, cap_inverse)
            rz_new = self._dots(r, z)
            p = z + bk.where(rz > 0, rz_new / bk.maximum(rz, 1e-300), 0.0)[:, None, None] * p
            rz = rz_new
        return x, it

    def _dots(self, a: Array, b: Array) -> Array:
        """``a_k . b_k`` per class for single columns ``a``, ``b`` (K, d, 1)."""
        return self._bk.sum((a * b)[:, :, 0], axis=1)


def _rows_term(rows: Array, coef: Array, X: Array) -> Array:
    """``sum_j coef[j, k] rows_j rows_j^T X_k`` for every class k (``X``: K, d, c).

    Two products with all classes' columns side by side, so ``rows`` (m, d) is read twice,
    not twice per class (a batched product per class read 10k rows 20 times at K = 10).
    """
    k, d, c = X.shape
    flat = X.swapaxes(0, 1).reshape(d, k * c)
    inner = (rows @ flat).reshape(-1, k, c) * coef[:, :, None]
    return (rows.T @ inner.reshape(-1, k * c)).reshape(d, k, c).swapaxes(0, 1)


def _as_is(x: Array) -> Array:
    return x


def _per_class(arrays: Array | list[Array], bk: Backend) -> list[FloatArray]:
    """A (K, ...) array (or an unpickled per-class list) as K numpy arrays, one read-back."""
    if isinstance(arrays, list):
        return [bk.to_numpy(a) for a in arrays]
    return list(bk.to_numpy(arrays))
