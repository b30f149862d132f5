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

from collections.abc import Sequence
from functools import cache
from typing import Any, Literal

import numpy as np
import scipy.linalg as sla
from numpy.typing import NDArray

from simulator.errors import ConfigError

#: an array of the backend (numpy ndarray or torch tensor); typed loosely on purpose
Array = Any
DeviceName = Literal["cpu", "cuda", "auto"]
BackendName = Literal["numpy", "torch", "auto"]
DEVICES: tuple[DeviceName, ...] = ("cpu", "cuda", "auto")
BACKENDS: tuple[BackendName, ...] = ("numpy", "torch", "auto")


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

    def asarray(self, x: Array) -> Array:
        return to_numpy(x)

    def to_numpy(self, x: Array) -> NDArray[np.float64]:
        return to_numpy(x)

    def zeros(self, shape: Sequence[int]) -> Array:
        return np.zeros(tuple(shape))

    def eye(self, d: int) -> Array:
        return np.eye(d)

    def copy(self, x: Array) -> Array:
        return np.array(x, dtype=np.float64, copy=True)

    def concat(self, parts: Sequence[Array], axis: int = 0) -> Array:
        return np.concatenate(list(parts), axis=axis)

    def take_rows(self, x: Array, index: NDArray[Any]) -> Array:
        """``x[index]`` for a numpy integer or boolean index."""
        return x[index]

    def sum(self, x: Array, axis: int) -> Array:
        return np.sum(x, axis=axis)

    def norms(self, x: Array, axis: int = 0) -> Array:
        """Euclidean norms along ``axis`` (column norms by default)."""
        return np.linalg.norm(x, axis=axis)

    def norm(self, x: Array) -> float:
        return float(np.linalg.norm(x))

    def sqrt(self, x: Array) -> Array:
        return np.sqrt(x)

    def maximum(self, x: Array, floor: float) -> Array:
        return np.maximum(x, floor)

    def where(self, cond: Array, a: Array, b: Array) -> Array:
        return np.where(cond, a, b)

    def sigmoid(self, t: Array) -> Array:
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
        return bool(np.any(x))

    def all(self, x: Array) -> bool:
        return bool(np.all(x))

    def cholesky(self, A: Array) -> Array:
        """Lower Cholesky factor; raises ``np.linalg.LinAlgError`` if A is not SPD."""
        return sla.cholesky(A, lower=True, check_finite=False)

    def solve_triangular(self, L: Array, B: Array, *, trans: bool = False) -> Array:
        """``L^{-1} B`` (or ``L^{-T} B`` with ``trans``) for lower-triangular L."""
        mode = "T" if trans else "N"
        return sla.solve_triangular(L, B, lower=True, trans=mode, check_finite=False)

    def cho_solve(self, L: Array, B: Array) -> Array:
        """``(L L^T)^{-1} B`` by two triangular solves (LAPACK's potrs is ~6x slower here)."""
        return self.solve_triangular(L, self.solve_triangular(L, B), trans=True)

    def solve(self, A: Array, B: Array) -> Array:
        return np.linalg.solve(A, B)

    def top_eigenvalue(self, A: Array) -> float:
        """Largest eigenvalue of a symmetric matrix."""
        d = A.shape[0]
        top = sla.eigh(A, eigvals_only=True, subset_by_index=[d - 1, d - 1], check_finite=False)
        return float(top[0])


class TorchBackend:
    """torch tensors (float64) on ``device``; torch.linalg factorisations."""

    name = "torch"

    def __init__(self, device: str = "cpu") -> None:
        import torch

        self._torch = torch
        self.device = device
        self._dev = torch.device(device)

    def __getstate__(self) -> dict[str, object]:
        return {"device": self.device}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(str(state["device"]))  # type: ignore[misc]

    def asarray(self, x: Array) -> Array:
        t = self._torch
        if isinstance(x, t.Tensor):
            return x.to(device=self._dev, dtype=t.float64)
        return t.as_tensor(np.asarray(x, dtype=np.float64), device=self._dev)

    def to_numpy(self, x: Array) -> NDArray[np.float64]:
        return to_numpy(x)

    def zeros(self, shape: Sequence[int]) -> Array:
        return self._torch.zeros(tuple(shape), dtype=self._torch.float64, device=self._dev)

    def eye(self, d: int) -> Array:
        return self._torch.eye(d, dtype=self._torch.float64, device=self._dev)

    def copy(self, x: Array) -> Array:
        return self.asarray(x).clone()

    def concat(self, parts: Sequence[Array], axis: int = 0) -> Array:
        return self._torch.cat(list(parts), dim=axis)

    def take_rows(self, x: Array, index: NDArray[Any]) -> Array:
        return x[self._torch.as_tensor(np.asarray(index), device=self._dev)]

    def sum(self, x: Array, axis: int) -> Array:
        return self._torch.sum(x, dim=axis)

    def norms(self, x: Array, axis: int = 0) -> Array:
        return self._torch.linalg.vector_norm(x, dim=axis)

    def norm(self, x: Array) -> float:
        return float(self._torch.linalg.vector_norm(x))

    def sqrt(self, x: Array) -> Array:
        return self._torch.sqrt(x)

    def maximum(self, x: Array, floor: float) -> Array:
        return self._torch.clamp(x, min=floor)

    def where(self, cond: Array, a: Array, b: Array) -> Array:
        t = self._torch
        a = a if isinstance(a, t.Tensor) else t.as_tensor(a, dtype=t.float64, device=self._dev)
        b = b if isinstance(b, t.Tensor) else t.as_tensor(b, dtype=t.float64, device=self._dev)
        return t.where(cond, a, b)

    def sigmoid(self, t: Array) -> Array:
        return self._torch.sigmoid(t)

    def softplus(self, t: Array) -> Array:
        return self._torch.logaddexp(self._torch.zeros_like(t), t)

    def any(self, x: Array) -> bool:
        return bool(self._torch.any(self.asarray(x) != 0))

    def all(self, x: Array) -> bool:
        return bool(self._torch.all(self.asarray(x) != 0))

    def cholesky(self, A: Array) -> Array:
        L, info = self._torch.linalg.cholesky_ex(A)
        if int(info) != 0:
            raise np.linalg.LinAlgError("matrix is not positive definite")
        return L

    def solve_triangular(self, L: Array, B: Array, *, trans: bool = False) -> Array:
        vector = B.ndim == 1
        rhs = B[:, None] if vector else B
        A = L.mT if trans else L
        out = self._torch.linalg.solve_triangular(A, rhs, upper=trans)
        return out[:, 0] if vector else out

    def cho_solve(self, L: Array, B: Array) -> Array:
        return self.solve_triangular(L, self.solve_triangular(L, B), trans=True)

    def solve(self, A: Array, B: Array) -> Array:
        return self._torch.linalg.solve(A, B)

    def top_eigenvalue(self, A: Array) -> float:
        return float(self._torch.linalg.eigvalsh(A)[-1])


Backend = NumpyBackend | TorchBackend


def backend_of(x: Array) -> Backend:
    """The backend an array belongs to (numpy for anything that is not a torch tensor)."""
    if isinstance(x, np.ndarray) or not hasattr(x, "detach"):
        return NUMPY
    return TorchBackend(str(x.device))


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
