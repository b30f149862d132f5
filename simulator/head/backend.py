"""The array backend of the certified head: numpy (scipy.linalg) or torch (CPU or CUDA).

The head's maths (statistics, downdates, factorisations, solves, residuals, retrains) is written
once against the handful of operations below; arrays of either library support the operators
it uses besides (``@``, ``*``, ``+``, ``-``, ``/``, ``.T`` on matrices, slicing and slice
assignment). Everything is float64 (the certificate's tests hold to ~1e-9 relative between
backends). The bounds (:mod:`simulator.head.certificate`, :mod:`simulator.head.accounting`)
work on K-vectors and stay numpy; the head converts at that boundary and at its public API
(``W``, ``b``, ``predict`` take and return numpy).

Choice (``HeadConfig.device`` and ``HeadConfig.backend``, scenario keys ``head.device`` and
``head.backend``): ``device`` is ``cpu``, ``cuda`` or ``auto`` (cuda when torch sees a GPU,
else cpu); ``backend`` is ``numpy``, ``torch`` or ``auto`` (torch on cuda, numpy on cpu).
numpy on cuda is refused. ``backend: torch`` with ``device: cpu`` runs torch's CPU kernels,
the same code path as on a GPU, which is how the tests check the GPU maths without one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import cache
from typing import Any, Literal

import numpy as np
import scipy.linalg as sla
from numpy.typing import NDArray
from scipy.linalg import blas as sblas
from scipy.linalg.lapack import dpotrf

from simulator.errors import ConfigError

#: an array of the backend (numpy ndarray or torch tensor); typed loosely on purpose
Array = Any
DeviceName = Literal["cpu", "cuda", "auto"]
BackendName = Literal["numpy", "torch", "auto"]
DEVICES: tuple[DeviceName, ...] = ("cpu", "cuda", "auto")
BACKENDS: tuple[BackendName, ...] = ("numpy", "torch", "auto")


#: environment variable that makes torch on the CPU run the GPU's code path (``TorchBackend``)
GPU_PATH_VARIABLE = "UNLEARNSIM_TORCH_GPU_PATH"


class NotPositiveDefinite(np.linalg.LinAlgError):
    """A Cholesky factorisation of a batch failed; ``index`` is the first matrix that is not SPD."""

    def __init__(self, index: int) -> None:
        super().__init__(f"matrix {index} of the batch is not positive definite")
        self.index = index


#: floats per block of rows in the Hessian build (64 MB: 8,192 rows at d = 1,024). Measured
#: here at n = 60,000, d = 1,024, K = 10 (load 1.8): 2,048 rows per block 15.6 s, 8,192 rows
#: 9.9 s, 16,384 rows 15.0 s, one block 34.6 s, against 14.2 s for a scaled copy of X per class
BLOCK_FLOATS = 1 << 23


def weighted_grams_numpy(
    X: NDArray[np.float64], C: NDArray[np.float64], *, block: int | None = None
) -> NDArray[np.float64]:
    """``H_k = sum_i C_ik x_i x_i^T = X^T diag(C[:, k]) X`` for every column k of ``C >= 0``.

    One pass over the rows of ``X`` (n, d) in blocks of ``block`` rows (default
    ``BLOCK_FLOATS / d``); per block and class
    one symmetric rank-``block`` update (BLAS ``dsyrk``: ``block d^2`` flops, half a general
    product's ``2 block d^2``) of the upper triangle of ``H_k`` by ``sqrt(C_bk) * X_b``; rows
    whose curvature is zero in every class (deleted rows keep their place with weight 0) are
    skipped. ``K n d^2`` flops in all (the logistic Hessian of ``logistic.py``), and the
    temporary is one block (``block d`` floats) instead of a scaled copy of ``X`` per class.
    Returns (K, d, d), symmetric, C-ordered.
    """
    n, d = X.shape
    k = C.shape[1]
    block = max(256, BLOCK_FLOATS // max(1, d)) if block is None else block
    if np.any(C < 0):
        raise ValueError("weighted_grams needs non-negative curvatures (syrk of sqrt(C) X)")
    S = np.sqrt(C)
    acc = [np.zeros((d, d), order="F") for _ in range(k)]
    for start in range(0, n, block):
        Xb, Sb = X[start : start + block], S[start : start + block]
        live = Sb.any(axis=1)
        if not live.all():
            Xb, Sb = Xb[live], Sb[live]
        if Xb.shape[0] == 0:
            continue
        for c in range(k):
            Xs = Xb * Sb[:, c, None]
            # Xs is C-ordered (rows, d), i.e. Fortran-ordered Xs^T (d, rows): syrk with
            # trans=0 forms Xs^T Xs into the upper triangle of acc[c], in place
            acc[c] = sblas.dsyrk(1.0, Xs.T, beta=1.0, c=acc[c], trans=0, lower=0, overwrite_c=1)
    out = np.empty((k, d, d))
    for c in range(k):
        upper = np.triu(acc[c])
        out[c] = upper + np.triu(upper, 1).T
    return out


def to_numpy(x: Array) -> NDArray[np.float64]:
    """A numpy float64 array from a numpy array or a torch tensor on any device."""
    if isinstance(x, np.ndarray):
        return np.asarray(x, dtype=np.float64)
    if hasattr(x, "detach"):  # a torch tensor
        return np.asarray(x.detach().cpu().numpy(), dtype=np.float64)
    return np.asarray(x, dtype=np.float64)


class NumpyBackend:
    """numpy arrays, scipy.linalg factorisations (the default)."""

    name = "numpy"
    device = "cpu"
    #: solves with a factor by triangular solves (same memory traffic as a product with an
    #: inverse on the CPU, and no ``K d^3`` inverse per factorisation)
    prefers_products = False

    def kernels_only(self) -> AbstractContextManager[Any]:
        """A block of array work that no gradient is ever taken of (nothing to do for numpy)."""
        return nullcontext()

    @property
    def small_work(self) -> NumpyBackend:
        """The backend for small arrays (``TorchBackend.small_work``): this one."""
        return self

    def asarray(self, x: Array) -> Array:
        """Float64 array of this backend (on its device) holding ``x``; no copy where it is one."""
        return to_numpy(x)

    def to_numpy(self, x: Array) -> NDArray[np.float64]:
        """A numpy float64 copy (or view) of ``x``."""
        return to_numpy(x)

    def zeros(self, shape: Sequence[int]) -> Array:
        """Float64 zeros of ``shape``."""
        return np.zeros(tuple(shape))

    def eye(self, d: int) -> Array:
        """The ``d x d`` float64 identity."""
        return np.eye(d)

    def copy(self, x: Array) -> Array:
        """A float64 copy of ``x`` that shares no memory with it."""
        return np.array(to_numpy(x), dtype=np.float64, copy=True)

    def concat(self, parts: Sequence[Array], axis: int = 0) -> Array:
        """The ``parts`` joined along ``axis``."""
        return np.concatenate(list(parts), axis=axis)

    def index(self, index: NDArray[Any]) -> Array:
        """A numpy integer or boolean index as this backend's index (itself here)."""
        return index

    def take_rows(self, x: Array, index: NDArray[Any]) -> Array:
        """``x[index]`` for a numpy integer or boolean index."""
        return x[index]

    def sum(self, x: Array, axis: int) -> Array:
        """Sum along ``axis``."""
        return np.sum(x, axis=axis)

    def norms(self, x: Array, axis: int = 0) -> Array:
        """Euclidean norms along ``axis`` (column norms by default)."""
        return np.linalg.norm(x, axis=axis)

    def norm(self, x: Array) -> float:
        """Euclidean (Frobenius) norm of all of ``x``."""
        return float(np.linalg.norm(x))

    def sqrt(self, x: Array) -> Array:
        """Elementwise square root."""
        return np.sqrt(x)

    def maximum(self, x: Array, floor: float) -> Array:
        """Elementwise ``max(x, floor)``."""
        return np.maximum(x, floor)

    def where(self, cond: Array, a: Array, b: Array) -> Array:
        """``a`` where ``cond`` holds, else ``b`` (scalars broadcast)."""
        return np.where(cond, a, b)

    def sigmoid(self, t: Array) -> Array:
        """Numerically stable logistic function ``1 / (1 + exp(-t))``."""
        out = np.empty_like(t)
        pos = t >= 0
        out[pos] = 1.0 / (1.0 + np.exp(-t[pos]))
        e = np.exp(t[~pos])
        out[~pos] = e / (1.0 + e)
        return out

    def softplus(self, t: Array) -> Array:
        """``log(1 + exp(t))``, stable."""
        return np.logaddexp(0.0, t)

    def any(self, x: Array) -> bool:
        """Whether some entry is non-zero."""
        return bool(np.any(x))

    def weighted_grams(self, X: Array, C: Array) -> Array:
        """``X^T diag(C[:, k]) X`` for every column of ``C >= 0`` (:func:`weighted_grams_numpy`)."""
        return weighted_grams_numpy(np.ascontiguousarray(X), np.ascontiguousarray(C))

    def transposed_product(self, X: Array, C: Array) -> Array:
        """``X^T C`` for tall ``X`` (n, d) and ``C`` (n, c): the gradient's pass over the rows."""
        return X.T @ C

    def batched_product(self, A: Array, B: Array) -> Array:
        """``A_k B_k`` for a batch of square ``A`` (K, d, d) and narrow ``B`` (K, d, c)."""
        return A @ B

    def all(self, x: Array) -> bool:
        """Whether every entry is non-zero."""
        return bool(np.all(x))

    def cholesky(self, A: Array, *, out: Array | None = None) -> Array:
        """Lower Cholesky factors of a batch ``A`` (K, d, d); raises NotPositiveDefinite.

        ``out`` (K, d, d), C-contiguous, reuses the memory of factors no longer needed (a
        fresh 80 MB array costs its page faults: 0.1 s at d = 1,024, K = 10). Each class is
        factorised in place by LAPACK's ``potrf`` on the transposed view: a C-ordered
        symmetric ``A`` is the Fortran-ordered ``A^T = A``, whose upper factor ``U`` (``A =
        U^T U``) read back in C order is the lower ``L = U^T``; no Fortran copy is made
        (scipy's ``cholesky`` makes one: 0.3 s against 0.17 s for the batch above).
        """
        k, d = A.shape[0], A.shape[1]
        if out is None or out.shape != A.shape or not out.flags.c_contiguous:
            out = np.empty((k, d, d))
        for c in range(k):
            out[c] = A[c]
            _, info = dpotrf(out[c].T, lower=0, clean=1, overwrite_a=1)
            if info != 0:
                raise NotPositiveDefinite(c)
        return out

    def diagonals(self, A: Array) -> Array:
        """A writable (K, d) view of the diagonals of ``A`` (K, d, d): ``-=`` changes ``A``."""
        return np.einsum("kii->ki", A)

    def solve_triangular(self, L: Array, B: Array, *, trans: bool = False) -> Array:
        """``L_k^{-1} B_k`` (``L_k^{-T} B_k`` with ``trans``), class by class.

        ``L`` (K, d, d) lower-triangular, ``B`` (K, d, c).
        """
        mode = "T" if trans else "N"
        out = np.empty_like(B)
        for c in range(L.shape[0]):
            out[c] = sla.solve_triangular(L[c], B[c], lower=True, trans=mode, check_finite=False)
        return out

    def cho_solve(self, L: Array, B: Array) -> Array:
        """``(L_k L_k^T)^{-1} B_k`` for factors (K, d, d) and ``B`` (K, d, c).

        Two triangular solves (LAPACK's potrs is ~6x slower here).
        """
        return self.solve_triangular(L, self.solve_triangular(L, B), trans=True)

    def solve(self, A: Array, B: Array) -> Array:
        """``A^{-1} B`` for square, non-singular ``A`` (batches of matrices too)."""
        return np.linalg.solve(A, B)

    def cholesky_inverse(self, L: Array) -> Array:
        """``(L_k L_k^T)^{-1}`` for factors (K, d, d)."""
        eye = np.broadcast_to(np.eye(L.shape[1]), L.shape)
        return self.cho_solve(L, np.ascontiguousarray(eye))

    def stack(self, parts: Sequence[Array], axis: int = 0) -> Array:
        """The ``parts`` (same shape) stacked along a new ``axis``."""
        return np.stack(list(parts), axis=axis)

    def expand(self, x: Array, shape: Sequence[int]) -> Array:
        """``x`` broadcast to ``shape`` (a read-only view, no copy)."""
        return np.broadcast_to(x, tuple(shape))

    def top_eigenvalue(self, A: Array) -> float:
        """Largest eigenvalue of a symmetric matrix."""
        d = A.shape[0]
        top = sla.eigh(A, eigvals_only=True, subset_by_index=[d - 1, d - 1], check_finite=False)
        return float(top[0])


class TorchBackend:
    """torch tensors (float64) on ``device``; torch.linalg factorisations.

    On the CPU two row passes (``weighted_grams``, ``transposed_product``) go through numpy on
    the same memory (faster there); with the environment variable ``UNLEARNSIM_TORCH_GPU_PATH=1``
    they take the GPU's code path instead, so that the tests can run on the CPU exactly what a
    GPU runs (e.g. count its device-to-host transfers).
    """

    name = "torch"

    def __init__(self, device: str = "cpu") -> None:
        import torch

        self._torch = torch
        self.device = device
        self._dev = torch.device(device)
        #: the device as tensors report it (``cuda:0`` for ``cuda``), for identity checks
        self._home = torch.empty(0, device=self._dev).device

    def kernels_only(self) -> AbstractContextManager[Any]:
        """A block of tensor work that no gradient is ever taken of: ``torch.inference_mode``.

        The head never differentiates (its gradients and Hessians are closed forms), and
        inference mode skips autograd's bookkeeping on every operation: about a fifth of a
        single removal's time at d = 64, K = 10 on CPU torch, where the operations' dispatch
        is the cost (``bench/overhead.py``, issue 27). Tensors made inside are *inference
        tensors*: they may be read anywhere (copied, pickled, moved), but written in place only
        inside such a block, which is why every method of the head that writes its tensors
        runs in one (``CertifiedHead.remove``, ``retrain``, ``load_state_dict``).
        """
        return self._torch.inference_mode()

    @property
    def _numpy_fast_paths(self) -> bool:
        """Whether the CPU's numpy shortcuts apply (read at each call: tests switch them)."""
        gpu_path = os.environ.get(GPU_PATH_VARIABLE, "") not in ("", "0")
        return self._dev.type == "cpu" and not gpu_path

    @property
    def small_work(self) -> Backend:
        """The backend for small arrays: the head's own and a deletion's few rows.

        The head's arrays are ``W``, its gradients, the solver's and the Gram matrix's. On
        the CPU numpy, on the same memory (no copy either way): a single removal is a few
        hundred operations on (d, K) and (K, d, r) arrays, and each costs torch 5-10 us of
        dispatch against numpy's 1-2. At d = 64, K = 10 a single removal took 1.9-2.2 ms with
        torch's arrays and 0.8-1.1 ms with numpy's (``bench/overhead.py``, issue 27); the
        rows' passes went through numpy already (:meth:`transposed_product`,
        :meth:`weighted_grams`). On a GPU, and with ``UNLEARNSIM_TORCH_GPU_PATH=1``, this
        backend: everything stays on the device.
        """
        return NUMPY if self._numpy_fast_paths else self

    @property
    def prefers_products(self) -> bool:
        """Apply inverses by products rather than triangular solves (a GPU).

        There a batched triangular solve with one right-hand side is latency-bound
        (``solver.HessianSolver._solve_base``).
        """
        return not self._numpy_fast_paths

    def __getstate__(self) -> dict[str, object]:
        return {"device": self.device}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(str(state["device"]))  # type: ignore[misc]

    def asarray(self, x: Array) -> Array:
        """Float64 array of this backend (on its device) holding ``x``; no copy where it is one."""
        t = self._torch
        if isinstance(x, t.Tensor):
            if x.dtype is t.float64 and x.device == self._home:
                return x  # the common case on the removal path: no dispatch at all
            return x.to(device=self._dev, dtype=t.float64)
        return t.as_tensor(np.asarray(x, dtype=np.float64), device=self._dev)

    def to_numpy(self, x: Array) -> NDArray[np.float64]:
        """A numpy float64 copy (or view) of ``x``."""
        return to_numpy(x)

    def zeros(self, shape: Sequence[int]) -> Array:
        """Float64 zeros of ``shape``."""
        return self._torch.zeros(tuple(shape), dtype=self._torch.float64, device=self._dev)

    def eye(self, d: int) -> Array:
        """The ``d x d`` float64 identity."""
        return self._torch.eye(d, dtype=self._torch.float64, device=self._dev)

    def copy(self, x: Array) -> Array:
        """A float64 copy of ``x`` that shares no memory with it."""
        return self.asarray(x).clone()

    def concat(self, parts: Sequence[Array], axis: int = 0) -> Array:
        """The ``parts`` joined along ``axis``."""
        return self._torch.cat(list(parts), dim=axis)

    def index(self, index: NDArray[Any]) -> Array:
        """A numpy integer or boolean index as a tensor on the device (one upload, reusable)."""
        return self._torch.as_tensor(np.asarray(index), device=self._dev)

    def take_rows(self, x: Array, index: NDArray[Any] | Array) -> Array:
        """``x[index]`` for a numpy integer or boolean index, or one from :meth:`index`."""
        if isinstance(index, self._torch.Tensor):
            return x[index]
        return x[self.index(index)]

    def sum(self, x: Array, axis: int) -> Array:
        """Sum along ``axis``."""
        return self._torch.sum(x, dim=axis)

    def norms(self, x: Array, axis: int = 0) -> Array:
        """Euclidean norms along ``axis`` (column norms by default)."""
        return self._torch.linalg.vector_norm(x, dim=axis)

    def norm(self, x: Array) -> float:
        """Euclidean (Frobenius) norm of all of ``x``."""
        return float(self._torch.linalg.vector_norm(x))

    def sqrt(self, x: Array) -> Array:
        """Elementwise square root."""
        return self._torch.sqrt(x)

    def maximum(self, x: Array, floor: float) -> Array:
        """Elementwise ``max(x, floor)``."""
        return self._torch.clamp(x, min=floor)

    def where(self, cond: Array, a: Array, b: Array) -> Array:
        """``a`` where ``cond`` holds, else ``b`` (scalars broadcast)."""
        t = self._torch
        a = a if isinstance(a, t.Tensor) else t.as_tensor(a, dtype=t.float64, device=self._dev)
        b = b if isinstance(b, t.Tensor) else t.as_tensor(b, dtype=t.float64, device=self._dev)
        return t.where(cond, a, b)

    def sigmoid(self, t: Array) -> Array:
        """Numerically stable logistic function ``1 / (1 + exp(-t))``."""
        return self._torch.sigmoid(t)

    def softplus(self, t: Array) -> Array:
        """``log(1 + exp(t))``, stable."""
        return self._torch.logaddexp(self._torch.zeros_like(t), t)

    def any(self, x: Array) -> bool:
        """Whether some entry is non-zero."""
        return bool(self._torch.any(self.asarray(x) != 0))

    def weighted_grams(self, X: Array, C: Array) -> Array:
        """``X^T diag(C[:, k]) X`` for every column of ``C >= 0``, (K, d, d).

        On the CPU, the rows are handed to :func:`weighted_grams_numpy` without a copy (torch
        has no symmetric rank-k update, and a general product costs twice the flops: measured
        here 37 GF/s of useful work with MKL's dgemm against 66 with OpenBLAS's dsyrk). On a
        GPU, per class a product of ``sqrt(C_k) X`` with itself over blocks of rows, so the
        temporary stays below ~2^27 floats (1 GiB) whatever n.
        """
        t = self._torch
        if self._numpy_fast_paths:
            Xn = X.detach().contiguous().numpy()
            Cn = C.detach().contiguous().numpy()
            return t.from_numpy(weighted_grams_numpy(Xn, Cn))
        n, d = X.shape
        k = C.shape[1]
        S = t.sqrt(C)
        out = t.zeros((k, d, d), dtype=t.float64, device=self._dev)
        block = max(1, min(n, (1 << 27) // max(1, d)))
        for start in range(0, n, block):
            Xb, Sb = X[start : start + block], S[start : start + block]
            for c in range(k):
                Xs = Xb * Sb[:, c, None]
                out[c] += Xs.T @ Xs
        return out

    def transposed_product(self, X: Array, C: Array) -> Array:
        """``X^T C`` for tall ``X`` (n, d) and ``C`` (n, c): the gradient's pass over the rows.

        On the CPU through numpy on the same memory: torch's float64 ``X.T @ C`` with a
        C-ordered ``X`` took 525 ms at n = 60,000, d = 1,024, c = 10 (one thread) against
        numpy's 104 ms, which made the exact residual of a single removal 3x numpy's. On a GPU
        the product as written.
        """
        if self._numpy_fast_paths:
            Xn, Cn = X.detach().numpy(), C.detach().numpy()
            return self._torch.from_numpy(np.ascontiguousarray(Xn.T @ Cn))
        return X.T @ C

    def batched_product(self, A: Array, B: Array) -> Array:
        """``A_k B_k`` for a batch of square ``A`` (K, d, d) and narrow ``B`` (K, d, c).

        On the CPU through numpy on the same memory: torch's float64 batched product of
        (10, 64, 64) by (10, 64, 1) took 58 us against numpy's 11 us, three times per single
        removal (the solves' products with ``base^{-1}`` and the residual's with the base).
        On a GPU the product as written (one kernel).
        """
        if self._numpy_fast_paths:  # a narrow B made contiguous (a copy of K d c floats)
            Bn = np.ascontiguousarray(B.detach().numpy())
            return self._torch.from_numpy(np.matmul(A.detach().numpy(), Bn))
        return A @ B

    def all(self, x: Array) -> bool:
        """Whether every entry is non-zero."""
        return bool(self._torch.all(self.asarray(x) != 0))

    def cholesky(self, A: Array, *, out: Array | None = None) -> Array:
        """Lower Cholesky factors of a batch ``A`` (K, d, d) in one call.

        ``out`` is unused: the caching allocator reuses device memory. One read-back (the K
        status codes) checks them; raises :class:`NotPositiveDefinite`.
        """
        L, info = self._torch.linalg.cholesky_ex(A)
        failed = np.flatnonzero(info.cpu().numpy())
        if failed.size:
            raise NotPositiveDefinite(int(failed[0]))
        return L

    def diagonals(self, A: Array) -> Array:
        """A writable (K, d) view of the diagonals of ``A`` (K, d, d): ``-=`` changes ``A``."""
        return A.diagonal(dim1=-2, dim2=-1)

    def solve_triangular(self, L: Array, B: Array, *, trans: bool = False) -> Array:
        """``L_k^{-1} B_k`` (``L_k^{-T} B_k`` with ``trans``), one batched call for all K.

        ``L`` (K, d, d) lower-triangular, ``B`` (K, d, c).
        """
        A = L.mT if trans else L
        return self._torch.linalg.solve_triangular(A, B, upper=trans)

    def cho_solve(self, L: Array, B: Array) -> Array:
        """``(L_k L_k^T)^{-1} B_k`` for factors (K, d, d) and ``B`` (K, d, c).

        Two batched triangular solves.
        """
        return self.solve_triangular(L, self.solve_triangular(L, B), trans=True)

    def solve(self, A: Array, B: Array) -> Array:
        """``A^{-1} B`` for square, non-singular ``A`` (batches of matrices too).

        ``solve_ex`` does not check for singularity (``solve`` would wait for the device to
        report it): a singular ``A`` gives non-finite values, which the solver's residual
        check catches.
        """
        return self._torch.linalg.solve_ex(A, B)[0]

    def cholesky_inverse(self, L: Array) -> Array:
        """``(L_k L_k^T)^{-1}`` for factors (K, d, d), one batched call."""
        return self._torch.cholesky_inverse(L)

    def stack(self, parts: Sequence[Array], axis: int = 0) -> Array:
        """The ``parts`` (same shape) stacked along a new ``axis``."""
        return self._torch.stack(list(parts), dim=axis)

    def expand(self, x: Array, shape: Sequence[int]) -> Array:
        """``x`` broadcast to ``shape`` (a view, no copy)."""
        return x.expand(*shape)

    def top_eigenvalue(self, A: Array) -> float:
        """Largest eigenvalue of a symmetric matrix."""
        return float(self._torch.linalg.eigvalsh(A)[-1])


Backend = NumpyBackend | TorchBackend


def backend_of(x: Array) -> Backend:
    """The backend an array belongs to (numpy for anything that is not a torch tensor)."""
    if isinstance(x, np.ndarray) or not hasattr(x, "detach"):
        return NUMPY
    return _torch_backend(str(x.device))


@cache
def _torch_backend(device: str) -> TorchBackend:
    """One backend object per device (building one per call cost a few microseconds)."""
    return TorchBackend(device)


@cache
def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return bool(torch.cuda.is_available())


def resolve(device: str = "cpu", backend: str = "auto") -> tuple[str, str]:
    """``(device, backend)`` after ``auto`` (module docstring); raises ConfigError."""
    if device not in DEVICES:
        raise ConfigError(f"must be one of {', '.join(DEVICES)}, got {device!r}", "head.device")
    if backend not in BACKENDS:
        raise ConfigError(f"must be one of {', '.join(BACKENDS)}, got {backend!r}", "head.backend")
    if device == "auto":
        device = "cuda" if _cuda_available() else "cpu"
    if backend == "auto":
        backend = "torch" if device == "cuda" else "numpy"
    if device == "cuda" and backend == "numpy":
        raise ConfigError("numpy runs on the CPU only: use backend torch", "head.backend")
    return device, backend


def make_backend(device: str = "cpu", backend: str = "auto") -> Backend:
    """The backend for a (device, backend) setting."""
    device, backend = resolve(device, backend)
    if backend == "numpy":
        return NumpyBackend()
    return TorchBackend(device)


NUMPY = NumpyBackend()
