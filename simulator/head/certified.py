"""The certified head: training, certified batch removal, budget accounting and retraining.

Implements certified removal (Guo et al., ICML 2020) of DecoRemoval's linear head
(``decoremoval.tex`` section 3.3 and Algorithm 1): one Newton step on the retained data per
removal batch, the residual of that step bounded two ways (and optionally measured exactly),
a charge against the budget ``eps' = sigma * epsilon / c`` (:mod:`simulator.head.accounting`),
and a retrain from scratch with a fresh perturbation ``b`` whenever the next removal would
exceed the budget. The K columns are one mechanism on the stacked d*K parameter with one
Gaussian ``b``: every residual is the L2 norm of the stacked per-class residuals.

The Newton step targets the objective *after* the deletion, including sample weights that the
data side recomputes (DecoRemoval's decorrelation weights, refitted cold on the retained rows,
change for every retained row), so the gradient is

    g = carried - removed.gradient - lam * m * W + reweighted.gradient

where ``carried`` is the exactly known gradient of the current model: under ``exact``
accounting after every step, under ``anchored`` right after an anchor (training or an exact
pass); otherwise it is bounded by the charge so far. The aggregate Hessian is kept at a
reference head ``W_ref`` and downdated by the removed rows and the weight changes, both
evaluated at ``W_ref``; it is rebuilt over all retained rows only at (re)training, on
``refresh_every``, after ``rereference_after`` exact passes, or in ``hessian_mode="rebuild"``
(the naive reference path).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError, InputError, UnknownSampleError
from simulator.head import anderson
from simulator.head.accounting import RULES, Charge, anchor
from simulator.head.backend import Array, Backend, make_backend
from simulator.head.certificate import (
    GAMMA_LOGISTIC_TIGHT,
    StepResiduals,
    StepTerms,
    certificate_constant,
    data_dependent_bound,
    epsilon_spent,
    gram_rounding,
    removal_gradient_bound,
    stacked_norm,
    tight_bound,
    worst_case_bound,
)
from simulator.head.config import HeadConfig, Release, RemovalReport
from simulator.head.data import DeletionStatistics, HeadData
from simulator.head.gram import GramMatrix
from simulator.head.logistic import (
    IntArray,
    StatisticsRequest,
    objective_gradient,
    objective_hessian,
    predict_classes,
)
from simulator.head.solver import HessianSolver, SolveResult
from simulator.head.training import (
    TrainResult,
    WarmRetrainConfig,
    WarmStart,
    retrain_head,
    statistics_in,
    train_head,
    train_head_from_zero,
)
from simulator.threads import all_blas_threads, single_threaded_blas

FloatArray = NDArray[np.float64]
#: Batches up to this size run their O(d^2) kernels single-threaded (see ``threads.py``),
#: unless the solver holds bulk rows: its conjugate-gradient steps then read every bulk row
#: (80 MB at 10,000 rows of d = 1,024), and one thread took 206 ms for a 27-row batch's solve
#: that two threads did in 120 ms (the Kafka stream benchmark's last batch).
SMALL_BATCH = 64
#: Version of :meth:`CertifiedHead.state_dict`'s layout (2: ``anchor_fresh``; 3: ``pairs``;
#: 4: ``reference_passes``).
STATE_VERSION = 4
#: Correction steps bring a measured residual below this share of the budget
#: (:meth:`CertifiedHead._correct`). The whole budget: the released head's gradient is known,
#: so the next step corrects it and its charge starts afresh (the anchor's proof,
#: ``docs/certified-head.md``); a residual left below the budget costs no later step any room,
#: and a pass to lower it further buys nothing. At 0.5 the benchmark stream's class purge made
#: 7 correction passes where 1.0 makes 5 (``docs/benchmarks.md``).
CORRECTION_TARGET = 1.0
#: Relative residual of a correction step's solve. The step's error is measured, not bounded
#: (:meth:`CertifiedHead._correct`), and the Hessian it solves with is the reference point's,
#: itself only an approximation of the current one: a tighter solve buys nothing but
#: conjugate-gradient steps (with bulk rows, ``solver.py``). Looser is not better: at 0.1 and
#: 0.5 the benchmark's class purge saved 40-100 ms per pass, but 0.5 lost the first correction
#: of a 40-row batch in a 300-row problem, and the GPU path (folds) and numpy (bulk rows) no
#: longer took the same decisions (``tests/support/head_backend.py``).
CORRECTION_RTOL = 1e-3
#: A re-reference rebuilds the fewest classes that hold this share of the squared gap
#: ``sum_k ||X' (w_ref,k - w_k)||^2`` (:meth:`CertifiedHead._refresh_if_due`). After the
#: benchmark's class purge (4,000 rows of class 1) class 1 held 68% of it and class 3 13%: two
#: classes of ten, a fifth of a full rebuild's pass, remove 81% (``docs/certified-head.md``).
REREFERENCE_SHARE = 0.8
#: A correction step that does not bring the residual below this share of the lowest so far
#: makes the following steps solve against the bulk rows too (conjugate gradients,
#: :meth:`CertifiedHead._correct`): the factored matrix alone then lacks too much curvature.
CORRECTION_CONTRACTION = 0.5
#: Newton steps a trained head whose residual is above the budget may take towards it
#: (:meth:`CertifiedHead._within_budget`). Newton converges quadratically from the training
#: tolerance; a residual that these steps cannot bring within the budget is at the floating-
#: point floor of the gradient, and no head can be certified at that budget.
TRAINING_STEPS = 8


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _kernels_only(
    method: Callable[Concatenate[CertifiedHead, _P], _R],
) -> Callable[Concatenate[CertifiedHead, _P], _R]:
    """Run a method that writes the head's arrays in its backend's ``kernels_only`` block.

    On torch that is inference mode (``backend.TorchBackend.kernels_only``): the tensors the
    head makes there may be written in place only inside such a block, so every method that
    writes them is decorated.
    """

    @functools.wraps(method)
    def wrapped(self: CertifiedHead, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._bk.kernels_only():
            return method(self, *args, **kwargs)

    return wrapped


@dataclass(frozen=True)
class _ColumnTerms:
    """The per-class (K,) norms of one step's bounds (:meth:`CertifiedHead._column_terms`)."""

    head_norms: FloatArray
    reference_gaps: FloatArray
    step_norms: FloatArray
    projected_steps: FloatArray
    projected_gaps: FloatArray
    carried_norms: FloatArray | None


@dataclass(frozen=True)
class _Release:
    """The head a removal would release, with what is known about it.

    Its weights ``W``, their exact gradient on the retained rows (None: not measured, or a
    diagnostic that must not steer the decision), the step's residuals (``exact``: the
    residual of ``W``) and the correction passes made; the old head and its exact gradient
    under the new objective where known (``start``), and the secant pairs the corrections
    measured (``pairs``, newest first), both for the mixing (:meth:`CertifiedHead._correct`).
    """

    W: Array
    gradient: Array | None
    residuals: StepResiduals
    corrections: int = 0
    start: tuple[Array, Array] | None = None
    pairs: tuple[anderson.Pair, ...] = ()


@dataclass(frozen=True)
class StepOutcome:
    """What one removal measured and decided, for its report.

    The step's ``residuals`` (zero bounds and the retrained head's residual when the rows were
    retrained away instead), what it ``charged`` (0 then), why the head was retrained
    (``budget``, ``method``, ``empty``; None when the step was released), the refinements
    of the step's solve, whether its exact residual re-anchored the charge (``anchored``) and
    the correction passes made (``corrections``).
    """

    residuals: StepResiduals
    charged: float
    retrain_reason: str | None
    solver_iterations: int
    anchored: bool = False
    corrections: int = 0


class CertifiedHead:
    """One-vs-rest perturbed logistic heads (one column for a binary task), certified removal.

    Parameters
    ----------
    data : where the rows live (:class:`~simulator.head.data.HeadData`).
    config : hyperparameters.
    rng : the generator that draws every perturbation ``b ~ N(0, sigma^2 I)``.
    """

    _W: Array
    _W_ref: Array
    _b: Array
    _carried: Array
    #: a class default too: a head pickled before the pairs existed loads without them
    _pairs: tuple[anderson.Pair, ...] = ()
    _solver: HessianSolver
    _gram: GramMatrix
    #: rows summed into the Gram matrix's base at the last training from scratch (its rounding
    #: allowance, :func:`~simulator.head.certificate.gram_rounding`); 0 in a head pickled
    #: before it was kept, which :meth:`load_state_dict` reads as unknown
    _gram_rows: int = 0
    #: exact passes (anchors, correction steps) since the Hessian was last built at the head
    #: (:meth:`_refresh_if_due`); 0 in a head pickled before it was kept
    _reference_passes: int = 0

    def __init__(self, data: HeadData, config: HeadConfig, *, rng: np.random.Generator) -> None:
        self.data = data
        self.config = config
        # on the CPU torch's small arrays are numpy's on the same memory (Backend.small_work)
        self._bk: Backend = make_backend(config.device, config.backend).small_work
        self._rng = rng
        self.model_version = 0
        self.retrains = 0
        self.removals = 0
        certificate_constant(config.delta)  # refuses a delta outside (0, 1) now
        self._warm_start_ok = False
        self._fit("initial")

    # ------------------------------------------------------------------ state
    @property
    def W(self) -> FloatArray:
        """The current head (d x columns), a numpy copy."""
        return self._bk.to_numpy(self._W).copy()

    @property
    def b(self) -> FloatArray:
        """The current perturbation (d x columns), a copy."""
        return self._bk.to_numpy(self._b).copy()

    @property
    def cumulative_residual(self) -> float:
        """The charge of the released head (monotone between retrains, except at an anchor)."""
        return self._cumulative

    @property
    def epsilon_spent(self) -> float:
        """``c * charge / sigma``, with ``delta = config.delta``."""
        return epsilon_spent(self._cumulative, sigma=self.config.sigma, delta=self.config.delta)

    @property
    def budget(self) -> float:
        """The residual budget ``eps'`` (:attr:`HeadConfig.budget`)."""
        return self.config.budget

    def gradient_norms(self) -> FloatArray:
        """Exact per-class ``||grad L_b(W; D')||`` of the current model (one pass over rows)."""
        return self._bk.to_numpy(self._bk.norms(self._gradient_exact(self._W)))

    def exact_residual(self) -> float:
        """Exact residual of the current model: the norm of the stacked gradient."""
        return stacked_norm(self.gradient_norms())

    def predict(self, X: FloatArray) -> IntArray:
        """Class of every row of ``X`` (n, d) under the current head."""
        return predict_classes(np.asarray(X, dtype=np.float64) @ self.W)

    # ------------------------------------------------------------- save/load
    def state_dict(self, *, host: bool = True) -> dict[str, Any]:
        """The head's whole mutable state as plain data (numpy arrays and scalars).

        The model ``W``, its reference point, the perturbation ``b``, the carried gradient,
        the charge and counters, the solver's Hessians and factors, the Gram matrix and the
        state of the generator that draws future perturbations. The rows live in ``data``
        (their owners save them). Versioned (``STATE_VERSION``); see :meth:`load_state_dict`.
        ``host=False`` leaves the solver's and the Gram matrix's arrays (most of the state) as
        copies on the head's device, to be read back by whoever writes them
        (:func:`simulator.state_files.host_arrays`; a snapshot written on a thread).
        """
        bk = self._bk
        return {
            "version": STATE_VERSION,
            "W": bk.to_numpy(self._W).copy(),
            "W_ref": bk.to_numpy(self._W_ref).copy(),
            "b": bk.to_numpy(self._b).copy(),
            "carried": bk.to_numpy(self._carried).copy(),
            "pairs": [[bk.to_numpy(a).copy() for a in pair] for pair in self._pairs],
            "anchor_fresh": bool(self._anchor_fresh),
            "cumulative": float(self._cumulative),
            "spectral": float(self._spectral),
            "gram_rows": int(self._gram_rows),
            "since_refresh": int(self._since_refresh),
            "reference_passes": int(self._reference_passes),
            "warm_start_ok": bool(self._warm_start_ok),
            "model_version": int(self.model_version),
            "retrains": int(self.retrains),
            "removals": int(self.removals),
            "last_fit": {
                "reason": self.last_fit_reason,
                "iterations": int(self.last_fit_iterations),
                "newton_iterations": int(self.last_fit_newton_iterations),
            },
            "rng": _plain(self._rng.bit_generator.state),
            "solver": self._solver.state_dict(host=host),
            "gram": self._gram.state_dict(host=host),
        }

    @_kernels_only
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Install a :meth:`state_dict` (of this or an earlier version) into this head.

        Raises
        ------
        InputError
            Written by a newer version, or for another shape of head.
        """
        version = int(state.get("version", 0))
        if not 1 <= version <= STATE_VERSION:
            raise InputError(f"head state version {version} is not 1..{STATE_VERSION}")
        bk = self._bk
        W = np.asarray(state["W"], dtype=np.float64)
        if W.shape != (self.data.dim, self.data.columns):
            raise InputError(f"saved head {W.shape} != ({self.data.dim}, {self.data.columns})")
        self._W = bk.asarray(W)
        self._W_ref = bk.asarray(np.asarray(state["W_ref"], dtype=np.float64))
        self._b = bk.asarray(np.asarray(state["b"], dtype=np.float64))
        self._carried = bk.asarray(np.asarray(state["carried"], dtype=np.float64))
        # versions before 3 kept no secant pairs: the next correction starts without them
        pairs = [[np.asarray(a, dtype=np.float64) for a in pair] for pair in state.get("pairs", [])]
        self._pairs = tuple((bk.asarray(dW), bk.asarray(dG)) for dW, dG in pairs)
        # version 1 had no anchors: its carried gradient is not known to be current
        self._anchor_fresh = bool(state.get("anchor_fresh", False))
        self._cumulative = float(state["cumulative"])
        self._spectral = float(state["spectral"])
        # unknown in older states: the rows of this head's own training (all of them, where a
        # restore builds the head on its data before loading the state)
        self._gram_rows = int(state.get("gram_rows", 0)) or self._gram_rows
        self._since_refresh = int(state["since_refresh"])
        self._reference_passes = int(state.get("reference_passes", 0))  # 0 before version 4
        self._warm_start_ok = bool(state["warm_start_ok"])
        self.model_version = int(state["model_version"])
        self.retrains = int(state["retrains"])
        self.removals = int(state["removals"])
        fit = state["last_fit"]
        self.last_fit_reason = str(fit["reason"])
        self.last_fit_iterations = int(fit["iterations"])
        self.last_fit_newton_iterations = int(fit["newton_iterations"])
        self._rng.bit_generator.state = state["rng"]
        self._solver.load_state_dict(state["solver"])
        self._gram.load_state_dict(state["gram"])

    def release(self) -> Release:
        """What was released (the head, its perturbation and charge): small, plain data.

        A checkpoint's journal records it with every batch, so that a restart whose replay of
        a batch does not reproduce the head bit for bit can still install the head that was
        published (:meth:`install`).
        """
        return Release(
            W=self.W,
            b=self.b,
            cumulative=float(self._cumulative),
            model_version=int(self.model_version),
            retrains=int(self.retrains),
            removals=int(self.removals),
            rng=_plain(self._rng.bit_generator.state),
        )

    @_kernels_only
    def install(self, release: Release) -> None:
        """Make ``release`` the current head: its ``W``, ``b``, charge, counters and generator.

        The rest of the state (reference head, solver, carried gradient) stays what it was: a
        caller follows the last install with :meth:`reanchor`.

        Raises
        ------
        InputError
            ``release`` is of another shape of head.
        """
        shape = (self.data.dim, self.data.columns)
        if release.W.shape != shape or release.b.shape != shape:
            raise InputError(f"released head {release.W.shape} != {shape}")
        self._W = self._bk.asarray(release.W.copy())
        self._b = self._bk.asarray(release.b.copy())
        self._cumulative = release.cumulative
        self.model_version = release.model_version
        self.retrains = release.retrains
        self.removals = release.removals
        self._rng.bit_generator.state = release.rng
        self._pairs = ()
        self._anchor_fresh = False

    @_kernels_only
    def reanchor(self) -> float:
        """Measure the current head where it is (one exact pass); the exact residual.

        After :meth:`install` the carried gradient and the charge may belong to another head:
        the exact gradient of ``W`` becomes the carried one, and the charge the larger of the
        installed charge and the measured residual, so it bounds the residual of the head on
        the rows held now and never falls below what was published. The solver's Hessian
        stays where it is: it is the retained rows' Hessian at the reference head, whatever
        ``W`` and ``b`` are (the bounds charge the gap between the two).
        """
        if self.data.retained_count == 0:
            return 0.0
        with all_blas_threads():
            self._carried = self._gradient_exact(self._W)
        exact = stacked_norm(self._norms(self._carried))
        self._cumulative = max(self._cumulative, exact)
        self._anchor_fresh = True
        return exact

    # --------------------------------------------------------------- training
    def _fit(self, reason: str) -> float:
        """Train from scratch with a fresh ``b``; returns seconds.

        The initial training starts from zero (``config.cold_solver``: L-BFGS preconditioned
        by the Hessian at zero, :func:`train_head_from_zero`, or damped Newton,
        :func:`train_head`). A retrain (``config.retrain == "warm"``) starts from the current
        head, preconditioned by the removal solver's Hessian (downdated to the retained rows),
        and builds the Hessians once at the end; it reaches the same unique minimiser to the
        same tolerance (:func:`retrain_head`).
        """
        d, k = self.data.dim, self.data.columns
        # drawn by numpy whatever the backend: the same b on every backend for one seed
        self._b = self._bk.asarray(self._rng.normal(0.0, self.config.sigma, size=(d, k)))
        self._pairs = ()
        if self.data.retained_count == 0:
            return self._empty(reason)
        with all_blas_threads():
            return self._train(reason)

    def _train(self, reason: str) -> float:
        cfg = self.config
        res: TrainResult
        if reason != "initial" and cfg.retrain == "warm" and self._warm_start_ok:
            solver = self._solver
            res = retrain_head(
                self.data,
                self._b,
                lam=cfg.lam,
                start=WarmStart(self._W, lambda g: solver.solve(g).step),
                settings=WarmRetrainConfig(tol=cfg.tol),
                backend=self._bk,
            )
            gram = self._gram.matrix()  # the retained rows' X^T X, kept by downdates
        else:
            from_zero = train_head_from_zero if cfg.cold_solver == "lbfgs" else train_head
            res = from_zero(self.data, self._b, lam=cfg.lam, tol=cfg.tol, backend=self._bk)
            assert res.gram is not None
            gram = res.gram
            self._gram_rows = self.data.retained_count  # summed afresh
        self._W = res.W
        self._W_ref = self._bk.copy(res.W if res.reference is None else res.reference)
        self._solver = HessianSolver(res.hessian, backend=self._bk, factors=res.factors)
        self._gram = GramMatrix(gram, backend=self._bk)
        self._spectral = _spectral_upper_bound(gram, self._bk)
        self._cumulative = stacked_norm(res.gradient_norms)
        self._carried = self._gradient_exact(self._W)
        self._within_budget(reason)
        self._anchor_fresh = True
        self._since_refresh = 0
        self._reference_passes = 0
        self._warm_start_ok = True
        self.model_version += 1
        self.last_fit_reason = reason
        self.last_fit_iterations = res.iterations
        self.last_fit_newton_iterations = res.newton_iterations
        return res.seconds

    def _within_budget(self, reason: str) -> None:
        """Bring a trained head's residual within the budget by Newton steps, or refuse it.

        The training residual is the trained head's charge, and Guo et al.'s Theorem 3 needs
        ``||grad L_b(w; D)|| <= eps'`` of every head released, the trained one included.
        Training stops at ``||grad L_b(w_k)|| <= tol * n`` per class, which a small budget
        (a small ``sigma * epsilon``) may lie below. Newton steps ``w <- w - H_ref^{-1} grad``
        on the Hessian the training built then bring it down (quadratically), each measured
        by an exact pass: at most :data:`TRAINING_STEPS`, stopping at the first that does not
        lower it. The head moves away from the reference point, whose gap the bounds charge
        as after a warm retrain's polish.

        Raises
        ------
        ConfigError
            The residual is still above the budget (the floating-point floor of the gradient
            lies above it): no head can be certified with this ``head.sigma`` and
            ``head.epsilon``.
        """
        floor = self.config.lam * self.data.retained_count  # H >= lam n' I (solver.py)
        steps = 0
        while self._cumulative > self.budget and steps < TRAINING_STEPS:
            steps += 1
            W = self._W - self._solver.solve(self._carried, floor=floor).step
            gradient = self._gradient_exact(W)
            residual = stacked_norm(self._norms(gradient))
            if not residual < self._cumulative:  # no progress (or NaN): the floor
                break
            self._W, self._carried, self._cumulative = W, gradient, residual
        if not self._cumulative <= self.budget:
            raise ConfigError(
                f"the head trained on {self.data.retained_count} rows ({reason}) keeps a "
                f"gradient residual of {self._cumulative:.3g} after {steps} Newton step(s), "
                f"above the residual budget sigma * epsilon / c = {self.budget:.3g}: no head "
                "can be certified at this budget; raise head.sigma or head.epsilon",
                "head.sigma",
            )

    def _empty(self, reason: str) -> float:
        """No rows left: the objective is the unbounded ``b . w``; the head is reset to 0."""
        d, k = self.data.dim, self.data.columns
        bk = self._bk
        self._W = bk.zeros((d, k))
        self._W_ref = bk.zeros((d, k))
        identities = bk.zeros((k, d, d)) + bk.eye(d)[None, :, :]
        self._solver = HessianSolver(identities, backend=bk)
        self._gram = GramMatrix(bk.zeros((d, d)), backend=bk)
        self._gram_rows = 0
        self._spectral = 0.0
        self._cumulative = 0.0
        self._carried = bk.zeros((d, k))
        self._anchor_fresh = False
        self._since_refresh = 0
        self._reference_passes = 0
        self._warm_start_ok = False  # the identity is no preconditioner: train cold
        self.model_version += 1
        self.last_fit_reason = f"{reason} (no rows left: head reset to zero)"
        self.last_fit_iterations = 0
        self.last_fit_newton_iterations = 0
        return 0.0

    def _gradient_exact(self, W: Array) -> Array:
        stats = statistics_in(self.data, StatisticsRequest(W), self._bk)
        return objective_gradient(stats, W, self._b, lam=self.config.lam)

    def _norms(self, x: Array) -> FloatArray:
        """Per-class (column) norms as numpy, for the bounds (``certificate.py``)."""
        return self._bk.to_numpy(self._bk.norms(x))

    def _refresh(self, classes: tuple[int, ...] | None = None) -> None:
        """Rebuild the aggregate Hessian at the current head (the expensive, exact path).

        Of every class, or of ``classes`` alone, whose reference point then moves to the head
        (the others keep theirs: each class's bounds read its own, ``certificate.py``).
        """
        k = int(self._W.shape[1])
        if classes is not None and len(classes) == k:
            classes = None
        request = StatisticsRequest(self._W, hessian=True, columns=classes)
        stats = statistics_in(self.data, request, self._bk)
        hessians = objective_hessian(stats, lam=self.config.lam)
        if classes is None:
            self._solver.replace(hessians)
            self._W_ref = self._bk.copy(self._W)
            self._since_refresh = 0
        else:
            self._solver.replace_columns(classes, hessians)
            W_ref = self._bk.copy(self._W_ref)
            W_ref[:, list(classes)] = self._W[:, list(classes)]
            self._W_ref = W_ref
        self._spectral = _spectral_upper_bound(self._gram.matrix(), self._bk)  # kept current
        self._reference_passes = 0

    # ---------------------------------------------------------------- removal
    @_kernels_only
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
            delta = _moved(self.data.delete(ids, W=self._W, W_ref=self._W_ref), self._bk)
            if self.data.retained_count:  # keep Gram and preconditioner on the retained rows
                self._downdate(delta, len(ids))
            return self._retrained(ids, "method", t0)
        # a GPU head's kernels run on the device: the host's thread pools stay as they are
        small = len(ids) <= SMALL_BATCH and self._bk.device == "cpu" and not self._solver.bulk_rows
        with single_threaded_blas(small):
            return self._remove(ids, t0)

    def _remove(self, ids: list[int], t0: float) -> RemovalReport:
        """One certified Newton step for the batch ``ids``, or a retrain past the budget."""
        timings: dict[str, float] = {}
        self._refresh_if_due(timings)
        with _timed(timings, "statistics"):
            delta = _moved(self.data.delete(ids, W=self._W, W_ref=self._W_ref), self._bk)
        retained = self.data.retained_count
        if retained == 0:
            return self._retrained(ids, "empty", t0)
        known = self._folds_carried()  # then g below is the exact gradient at the old head
        with _timed(timings, "solve"):
            solved, g = self._newton_step(delta, len(ids))
            W_new = self._W - solved.step
        with _timed(timings, "bounds"):
            bounds = self._step_bounds(delta, solved, len(ids), retained)
        residuals, gradient = self._with_exact(bounds, W_new, timings)
        start = (self._W, g) if known else None
        step, release = self._charge(_Release(W_new, gradient, residuals, start=start), timings)
        self.removals += 1
        reason = self._settle(step, release, timings)
        timings["total"] = time.perf_counter() - t0
        anchored = RULES[self.config.accounting].anchors and release.gradient is not None
        outcome = StepOutcome(
            release.residuals,
            step.charged,
            reason,
            solved.refinements,
            anchored,
            release.corrections,
        )
        return self._report(ids, outcome, timings)

    def _folds_carried(self) -> bool:
        """Whether the exact gradient of the current head enters the next step (``carried``)."""
        rule = RULES[self.config.accounting]
        return rule.knows_gradient or (rule.anchors and self._anchor_fresh)

    def _charge(self, release: _Release, timings: dict[str, float]) -> tuple[Charge, _Release]:
        """The step's charge under the accounting mode (:mod:`simulator.head.accounting`).

        A step that corrected the carried gradient starts the sum afresh. ``anchored``
        re-anchors at the exact residual of the new head only when the summed charge would
        cross the budget (one exact pass, timed as ``exact``, unless ``report_exact`` made it
        already); a residual measured for ``report_exact`` alone stays a diagnostic, so the
        decisions do not depend on it (the same on every transport, whatever its default).
        Where the exact gradient decides (at an anchor; ``exact`` always), correction steps
        may move the head first (:meth:`_correct`); the charge is then the exact residual of
        the head they release.
        """
        rule = RULES[self.config.accounting]
        previous = 0.0 if rule.anchors and self._anchor_fresh else self._cumulative
        if rule.knows_gradient:
            release = self._correct(release, timings)
            return rule.charge(previous, release.residuals), release
        step = rule.charge(previous, release.residuals)
        if not rule.anchors:
            return step, release
        if step.cumulative <= self.budget:
            return step, dataclasses.replace(release, gradient=None)
        if release.gradient is None:
            with _timed(timings, "exact"):
                gradient = self._gradient_exact(release.W)
            exact = stacked_norm(self._norms(gradient))
            residuals = dataclasses.replace(release.residuals, exact=exact)
            release = dataclasses.replace(release, gradient=gradient, residuals=residuals)
        release = self._correct(release, timings)
        return anchor(release.residuals), release

    def _correct(self, release: _Release, timings: dict[str, float]) -> _Release:
        """Correction steps from a head whose exact gradient ``r`` is known.

        ``w <- w - H_ref'^{-1} r``: the Newton step of the anchor's proof
        (``docs/certified-head.md``) with no row removed, on the Hessian the solver holds. Its
        error is not bounded but measured: one exact pass at the new head gives its gradient
        (the next ``carried``) and its residual (the charge), so the charge is the released
        head's exact residual whatever the stale Hessian's error. Steps are taken while the
        residual is above ``CORRECTION_TARGET`` times the budget, up to
        ``config.correction_steps``, and stop at the first that does not lower it: the head
        released is the best measured one (timed as ``correction``). Each step starts from
        the Anderson mixing (:mod:`simulator.head.anderson`) of the last measured iterates:
        the combination whose linearised gradient is smallest, which the measurement then
        checks like any other. The iterates include the removal's old head where its exact
        gradient under the new objective is known (``release.start``: the Newton step itself
        is then a secant pair), and the first step also mixes the secant pairs that the last
        correcting removal left (``self._pairs``): the curvature the reference Hessian lacks
        along the directions a class purge keeps moving in. On the benchmark's class purge
        (1,804 rows) they cut the passes from three to two (``docs/certified-head.md``).

        Where the solver holds bulk rows, a step first solves with the factored matrix alone
        (no conjugate gradients, ``solver.py``): a preconditioned gradient step whose matrix
        has more curvature than ``H_ref'`` (the bulk rows and ``lam m`` not subtracted), at
        ``O(K d^2)`` where each conjugate-gradient step reads every bulk row twice. Once a
        step fails to bring the residual below ``CORRECTION_CONTRACTION`` of the lowest so far
        (and a step without progress is retried so), the later steps solve against the bulk
        rows too, and so does the last step allowed (``config.correction_steps``). Either way
        the step's error is measured, so the choice moves the head, never what is charged for
        it.
        """
        assert release.gradient is not None and release.residuals.exact is not None
        target = CORRECTION_TARGET * self.budget
        limit = self.config.correction_steps
        if release.residuals.exact <= target or limit == 0:
            return release
        floor = self.config.lam * self.data.retained_count  # H >= lam n' I (solver.py)
        best, lowest, passes = release, release.residuals.exact, 0
        heads, gradients = [release.W], [release.gradient]  # measured iterates, for mixing
        if release.start is not None:
            heads, gradients = [release.start[0], *heads], [release.start[1], *gradients]
        thorough = not self._solver.bulk_rows  # solve against the bulk rows too (docstring)
        with _timed(timings, "correction"):
            while passes < limit and lowest > target:
                passes += 1
                mixing = anderson.differences(heads, gradients)[::-1]  # newest first
                if passes == 1:  # earlier removals' pairs only propose the first step
                    mixing = [*mixing, *self._pairs][: anderson.PAIRS]
                W_hat, g_hat = anderson.mixed(heads[-1], gradients[-1], mixing, self._bk)
                thorough = thorough or passes == limit  # the last step allowed: the best one
                solved = self._solver.solve(
                    g_hat, floor=floor, rtol=CORRECTION_RTOL, conjugate_gradients=thorough
                )
                W = W_hat - solved.step
                gradient = self._gradient_exact(W)
                exact = stacked_norm(self._norms(gradient))
                heads = [*heads, W][-anderson.DEPTH :]
                gradients = [*gradients, gradient][-anderson.DEPTH :]
                rough = not thorough  # this step left the bulk rows out
                if rough and not exact <= CORRECTION_CONTRACTION * lowest:  # NaN: slow too
                    thorough = True  # the factored matrix lacks too much curvature here
                if not exact < lowest:  # no progress (or NaN)
                    if rough:
                        continue  # again, against the bulk rows
                    break  # keep the best measured head
                lowest = exact
                best = _Release(W, gradient, dataclasses.replace(best.residuals, exact=exact))
        pairs = tuple(anderson.differences(heads, gradients)[::-1][: anderson.PAIRS])
        return dataclasses.replace(best, corrections=passes, pairs=pairs)

    def _refresh_if_due(self, timings: dict[str, float]) -> None:
        """Rebuild the Hessian at the current head where due (timed as ``rereference``).

        Due every ``refresh_every`` removals (every class), and for the classes that moved once
        the exact passes made since the last build have cost about as much as rebuilding them
        (``rereference_after``; 0: never).

        The Newton steps solve with the Hessian at the reference point ``W_ref`` and the
        bounds charge the gap ``||X' (w_ref,k - w_k)||`` of every class k
        (``certificate.py``). A purge or a client withdrawal moves the head far from it: the
        Newton step is then less exact, the tight bound of every later removal carries the
        gap, and nearly every removal needs an exact pass (an anchor, often with a correction
        step). Every term of the bounds is per class, and so is the Hessian, so each class may
        have its own reference point: :meth:`_moved_classes` picks the fewest classes that
        hold ``REREFERENCE_SHARE`` of the squared gap (a class purge moves mostly its own
        head). Rebuilding ``s`` of the K classes costs one pass over the rows that forms ``s``
        d x d products, ``s / K`` of a full rebuild, which ``rereference_after`` states in
        exact passes (``docs/certified-head.md``): the classes are rebuilt once the passes
        since the last build reach ``rereference_after * s / K``. Rebuilding once the passes
        have cost as much (rent or buy) never costs more than twice the better of the two
        choices made in hindsight. The rule counts passes and reads the head's state, not
        seconds, so every run and every replay after a crash decides the same.
        """
        cfg = self.config
        if cfg.hessian_mode != "incremental":
            return
        if cfg.refresh_every and self._since_refresh >= cfg.refresh_every:
            with _timed(timings, "rereference"):
                self._refresh()
            return
        k = int(self._W.shape[1])
        after = cfg.rereference_after
        if not after or self._reference_passes * k < after:  # not due for even one class
            return
        classes = self._moved_classes()
        if not classes:  # the head is at its reference point: nothing to rebuild
            self._reference_passes = 0
        elif self._reference_passes * k >= after * len(classes):
            with _timed(timings, "rereference"):
                self._refresh(classes)

    def _moved_classes(self) -> tuple[int, ...]:
        """The fewest classes that hold ``REREFERENCE_SHARE`` of the squared gap, in order.

        The gap is ``sum_k ||X' (w_ref,k - w_k)||^2`` (the Gram matrix's quadratic forms,
        ``O(d^2 K)``); the classes are taken largest first and returned sorted; () when the
        head is at its reference point.
        """
        gaps = self._bk.to_numpy(self._gram.quadratic(self._W_ref - self._W))
        gaps = np.maximum(gaps, 0.0)
        total = float(gaps.sum())
        if not total > 0.0:
            return ()
        order = np.argsort(-gaps, kind="stable")
        held = np.cumsum(gaps[order])
        count = int(np.searchsorted(held, REREFERENCE_SHARE * total)) + 1
        return tuple(sorted(int(c) for c in order[: min(count, gaps.size)]))

    def _newton_step(self, delta: DeletionStatistics, m: int) -> tuple[SolveResult, Array]:
        """Bring the Hessian to the retained rows and solve for the step to the new optimum.

        Returns the solve and its right-hand side ``g`` (:meth:`_step_gradient`).
        """
        _HESSIAN_UPDATES[self.config.hessian_mode](self, delta, m)
        floor = self.config.lam * self.data.retained_count  # H >= lam n' I (solver.py)
        g = self._step_gradient(delta, m)
        return self._solver.solve(g, floor=floor), g

    def _step_gradient(self, delta: DeletionStatistics, m: int) -> Array:
        """``g = carried - removed.gradient - lam m W + reweighted.gradient`` (module docstring).

        ``carried`` enters only where it is known (``exact``, ``anchored`` after an anchor);
        otherwise the charge so far bounds it.
        """
        g = -delta.removed_gradient - self.config.lam * m * self._W
        if self._folds_carried():
            g = g + self._carried
        if delta.reweighted is not None:
            g = g + delta.reweighted.gradient
        return g

    def _downdate(self, delta: DeletionStatistics, m: int) -> None:
        """Gram matrix and Hessian (at ``W_ref``) of the retained rows after a deletion.

        The ``incremental`` Hessian mode: the removed rows' curvatures and ``lam m`` leave the
        Hessian as a low-rank downdate, the weight changes as a dense one.
        """
        rows = delta.removed_rows
        self._gram.downdate(rows)
        self._solver.downdate_rows(
            rows, delta.removed_curvature, diagonal=self.config.lam * m, nonnegative=True
        )
        if delta.reweighted is not None:
            assert delta.reweighted.hessian is not None
            self._solver.downdate_dense(-delta.reweighted.hessian)

    def _rebuild_hessian(self, delta: DeletionStatistics, m: int) -> None:
        """The ``rebuild`` Hessian mode: the Hessian over all retained rows at the current head.

        The naive reference path (one pass over the rows); ``m`` is not needed.
        """
        self._gram.downdate(delta.removed_rows)
        stats = statistics_in(self.data, StatisticsRequest(self._W, hessian=True), self._bk)
        self._solver.replace(objective_hessian(stats, lam=self.config.lam))
        self._W_ref = self._bk.copy(self._W)

    def _step_bounds(
        self, delta: DeletionStatistics, solved: SolveResult, m: int, retained: int
    ) -> StepResiduals:
        """Worst-case, data-dependent and tight bounds on the step's new error (``certificate.py``).

        The per-class bounds are stacked (one mechanism on the stacked head); ``exact`` is left
        None (:meth:`_with_exact`). The O(d^2 K) terms are computed where the head lives and
        read back together, once (:meth:`_column_terms`); the O(K) arithmetic is numpy's.
        """
        cfg = self.config
        columns = self._column_terms(solved.step)
        gradient_bounds = removal_gradient_bound(
            batch=m,
            head_norms=columns.head_norms,
            lam=cfg.lam,
            max_weight=delta.max_weight,
            weight_change_l1=delta.weight_change_l1,
        )
        if columns.carried_norms is not None:
            gradient_bounds = gradient_bounds + columns.carried_norms
        terms = StepTerms(
            reference_gaps=columns.reference_gaps,
            solve_residuals=solved.residual_norms,
            max_weight=delta.max_weight,
        )
        worst = worst_case_bound(
            terms, gradient_bounds=gradient_bounds, retained=retained, lam=cfg.lam
        )
        data = data_dependent_bound(
            terms,
            spectral_norm=self._spectral,
            step_norms=columns.step_norms,
            projected_norms=columns.projected_steps,
        )
        tight = tight_bound(
            dataclasses.replace(terms, gamma=GAMMA_LOGISTIC_TIGHT),
            projected_gaps=columns.projected_gaps,
            projected_norms=columns.projected_steps,
        )
        return StepResiduals(
            worst=stacked_norm(worst),
            data=stacked_norm(data),
            tight=stacked_norm(tight),
            exact=None,
        )

    def _column_terms(self, step: Array) -> _ColumnTerms:
        """Every per-class norm the bounds need, in one read-back from the head's device.

        ``||w_k||``, ``||w_ref,k - w_k||``, ``||u_k||``, ``||X' u_k||`` and
        ``||X' (w_ref,k - w_k)||`` (the projections from the Gram matrix kept current by
        downdates, ``sqrt(v^T (X'^T X') v + c ||v||^2)`` with ``c`` the rounding allowance of
        :func:`~simulator.head.certificate.gram_rounding`, so that they are upper bounds in
        floating point: ``O(d^2 K)``, no pass over the rows) and, where the carried gradient
        enters the step, its norms.
        """
        bk = self._bk
        k = step.shape[1]
        gap = self._W_ref - self._W
        carried = self._folds_carried()
        columns = [step, gap, self._W] + ([self._carried] if carried else [])
        stacked = bk.concat(columns, axis=1)  # (d, 3K or 4K): one pass for every norm
        norms = bk.norms(stacked)
        quadratic = self._gram.quadratic(stacked[:, : 2 * k])  # steps and gaps together
        host = bk.to_numpy(bk.concat([norms, quadratic]))
        # the computed forms err by at most gram_rounding * ||v||^2 (certificate.py)
        rounding = gram_rounding(self._gram_rows, self.data.dim)
        projected = host[-2 * k :] + rounding * host[: 2 * k] ** 2
        return _ColumnTerms(
            step_norms=host[:k],
            reference_gaps=host[k : 2 * k],
            head_norms=host[2 * k : 3 * k],
            carried_norms=host[3 * k : 4 * k] if carried else None,
            projected_steps=np.sqrt(np.maximum(projected[:k], 0.0)),
            projected_gaps=np.sqrt(np.maximum(projected[k:], 0.0)),
        )

    def _with_exact(
        self, bounds: StepResiduals, W_new: Array, timings: dict[str, float]
    ) -> tuple[StepResiduals, Array | None]:
        """The step's bounds with, where configured, its exact residual at the new head.

        The exact residual costs one gradient round over the retained rows (timed as
        ``exact``); its gradient is returned too (the next ``carried``), None when not measured.
        """
        if not self.config.computes_exact:
            return bounds, None
        with _timed(timings, "exact"):
            grad_new = self._gradient_exact(W_new)
            exact = stacked_norm(self._norms(grad_new))
        return dataclasses.replace(bounds, exact=exact), grad_new

    def _settle(self, step: Charge, release: _Release, timings: dict[str, float]) -> str | None:
        """Release the head, or retrain when the charge exceeds the budget (returns ``budget``)."""
        if step.cumulative > self.budget:
            timings["retrain"] = self._fit("budget")
            self.retrains += 1
            return "budget"
        self._W = release.W
        self._cumulative = step.cumulative
        self._since_refresh += 1
        self.model_version += 1
        self._anchor_fresh = release.gradient is not None
        if release.gradient is not None:
            self._carried = release.gradient
        # the passes a stale reference point costs: anchors and correction steps
        anchored = RULES[self.config.accounting].anchors and release.gradient is not None
        self._reference_passes += int(anchored) + release.corrections
        if release.pairs:
            self._pairs = release.pairs
        return None

    def _report(
        self, ids: list[int], outcome: StepOutcome, timings: dict[str, float]
    ) -> RemovalReport:
        """What the removal of ``ids`` did, with the head's state after it."""
        cfg = self.config
        retrained = outcome.retrain_reason is not None
        residuals = outcome.residuals
        return RemovalReport(
            sample_ids=tuple(ids),
            accounting=cfg.accounting,
            residual_worst=residuals.worst,
            residual_data=residuals.data,
            residual_tight=residuals.tight,
            residual_exact=residuals.exact,
            charged=outcome.charged,
            cumulative=self._cumulative,
            budget=self.budget,
            budget_used_ratio=self._cumulative / self.budget,
            epsilon_spent=self.epsilon_spent,
            delta=cfg.delta,
            retrained=retrained,
            retrain_reason=outcome.retrain_reason,
            model_version=self.model_version,
            retained=self.data.retained_count,
            solver_iterations=outcome.solver_iterations,
            retrain_iterations=self.last_fit_iterations if retrained else 0,
            retrain_newton_iterations=self.last_fit_newton_iterations if retrained else 0,
            anchored=not retrained and outcome.anchored,
            corrections=outcome.corrections,
            timings=timings,
        )

    def _retrained(self, ids: list[int], reason: str, t0: float) -> RemovalReport:
        """Retrain after the rows were deleted (``retrain`` method, or no rows left).

        Nothing is charged; the residual reported as exact is the retrained head's.
        """
        self.removals += 1
        self.retrains += 1
        seconds = self._fit(reason)
        outcome = StepOutcome(StepResiduals(0.0, 0.0, 0.0, self._cumulative), 0.0, reason, 0)
        return self._report(ids, outcome, {"retrain": seconds, "total": time.perf_counter() - t0})

    def remove_sequentially(self, ids: Sequence[int]) -> list[RemovalReport]:
        """Remove samples one at a time (one certified step each)."""
        return [self.remove([i]) for i in ids]

    @_kernels_only
    def retrain(self, reason: str = "requested", *, cold: bool = False) -> float:
        """Retrain from scratch on the retained rows with a fresh perturbation.

        ``cold``: from zero, not preconditioned by the removal solver (after a failure in it).
        """
        self.retrains += 1
        if cold:
            self._warm_start_ok = False
        return self._fit(reason)


#: How each ``hessian_mode`` brings the Hessian to the retained rows after a deletion.
_HESSIAN_UPDATES: dict[str, Callable[[CertifiedHead, DeletionStatistics, int], None]] = {
    "incremental": CertifiedHead._downdate,
    "rebuild": CertifiedHead._rebuild_hessian,
}


@contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Record the seconds the block takes as ``timings[name]``."""
    start = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - start


def _as_ids(ids: Sequence[int]) -> list[int]:
    """Integer sample ids; floats, NaN, bools and strings are refused (nothing changes)."""
    arr = np.asarray(ids)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InputError(f"sample ids must be a flat sequence of integers, got dtype {arr.dtype}")
    return [int(i) for i in arr]


def _moved(delta: DeletionStatistics, bk: Backend) -> DeletionStatistics:
    """A deletion's statistics in the head's backend (no-op where they were computed)."""
    rw = delta.reweighted
    return dataclasses.replace(
        delta,
        removed_gradient=bk.asarray(delta.removed_gradient),
        removed_rows=bk.asarray(delta.removed_rows),
        removed_curvature=bk.asarray(delta.removed_curvature),
        reweighted=None if rw is None else rw.moved_to(bk),
    )


def _spectral_upper_bound(gram: Array, bk: Backend) -> float:
    """``||X||_2 = sqrt(lambda_max(X^T X))``, with a relative safety margin.

    Rows are only ever removed, so ``X'^T X' <= X^T X`` and the value at the last (re)training
    or refresh stays a valid upper bound until the next one; power iteration would give a
    *lower* estimate, which a bound must not use.
    """
    top = bk.top_eigenvalue(gram)
    return float(np.sqrt(max(top, 0.0)) * (1.0 + 1e-9) + 1e-12)


def _plain(value: Any) -> Any:
    """A generator's state as JSON data (numpy's PCG64 state holds Python ints and str)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
