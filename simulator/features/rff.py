"""Random Fourier features for the linear head (DecoRemoval section 3.2, StableNet).

The extractor output ``h`` (n x p) is lifted by a fixed random map

    z = sqrt(2 / m) * cos(h @ Omega + phi),   Omega ~ N(0, 1 / sigma^2),  phi ~ U(0, 2 pi),

so that ``z(x) . z(y)`` approximates the Gaussian kernel ``exp(-||x - y||^2 / (2 sigma^2))``
(Rahimi & Recht, NIPS 2007; the paper's RFF equation; StableNet, Zhang et al. CVPR 2021).
The map is drawn once from a seeded generator and then frozen (and persisted with
:meth:`RandomFourierFeatures.to_arrays`), because the certified head is only defined for a
fixed feature map.

:class:`FourierLift` is the per-column map ``u(t) = sqrt(2) cos(omega t + phi)`` through
which the decorrelation objective measures dependence between feature columns.
:func:`clip_to_unit_ball` enforces ``||x|| <= 1`` row by row, the assumption of the
certified-removal bounds (Guo et al., ICML 2020, section 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError

__all__ = ["FourierLift", "RandomFourierFeatures", "clip_to_unit_ball", "median_bandwidth"]


def _as_finite_matrix(
    x: NDArray[np.floating] | NDArray[np.integer], name: str
) -> NDArray[np.float64]:
    """Return ``x`` as a float64 2-D array, or raise :class:`InputError`."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise InputError(f"{name} must be a 2-D array (rows x columns), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise InputError(f"{name} has {bad} non-finite value(s) (NaN or inf)")
    return arr


def _frozen(x: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.array(x, dtype=np.float64, copy=True)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class RandomFourierFeatures:
    """A frozen random Fourier feature map ``R^p -> R^m``.

    Attributes
    ----------
    omega : NDArray[np.float64]
        Frequencies, shape ``(p, m)``; drawn ``N(0, 1 / bandwidth^2)``.
    phase : NDArray[np.float64]
        Phases, shape ``(m,)``; drawn ``U(0, 2 pi)``.
    """

    omega: NDArray[np.float64]
    phase: NDArray[np.float64]

    def __post_init__(self) -> None:
        omega = _as_finite_matrix(self.omega, "omega")
        phase = np.asarray(self.phase, dtype=np.float64)
        if phase.ndim != 1 or phase.shape[0] != omega.shape[1]:
            raise InputError(
                f"phase must have shape ({omega.shape[1]},) to match omega {omega.shape}, "
                f"got {phase.shape}"
            )
        if not np.all(np.isfinite(phase)):
            raise InputError("phase has non-finite value(s)")
        if omega.shape[0] < 1 or omega.shape[1] < 1:
            raise InputError(f"omega must have at least one row and column, got {omega.shape}")
        object.__setattr__(self, "omega", _frozen(omega))
        object.__setattr__(self, "phase", _frozen(phase))

    @property
    def input_dim(self) -> int:
        """Dimension ``p`` of the input ``h``."""
        return int(self.omega.shape[0])

    @property
    def output_dim(self) -> int:
        """Number ``m`` of random features."""
        return int(self.omega.shape[1])

    @classmethod
    def draw(
        cls, input_dim: int, output_dim: int, *, bandwidth: float, rng: np.random.Generator
    ) -> RandomFourierFeatures:
        """Draw a map for the Gaussian kernel of width ``bandwidth``.

        Parameters
        ----------
        input_dim, output_dim : int
            ``p`` and ``m``, both >= 1.
        bandwidth : float
            Kernel width ``sigma`` > 0 (see :func:`median_bandwidth`).
        rng : numpy.random.Generator
            The only source of randomness; ``omega`` is drawn before ``phase``.
        """
        if input_dim < 1 or output_dim < 1:
            raise InputError(
                f"input_dim and output_dim must be >= 1, got {input_dim} and {output_dim}"
            )
        if not (np.isfinite(bandwidth) and bandwidth > 0):
            raise InputError(f"bandwidth must be a finite positive number, got {bandwidth}")
        omega = rng.normal(0.0, 1.0 / bandwidth, size=(input_dim, output_dim))
        phase = rng.uniform(0.0, 2.0 * np.pi, size=output_dim)
        return cls(omega=omega, phase=phase)

    def transform(self, h: NDArray[np.floating]) -> NDArray[np.float64]:
        """Return ``sqrt(2 / m) * cos(h @ omega + phase)``, shape ``(n, m)``.

        The phase, cosine and scale are applied in place on the product, so the map holds
        one ``(n, m)`` array at a time (the same floats as the expression: each step is one
        rounding either way).

        Raises
        ------
        InputError
            If ``h`` is not ``(n, p)`` or has non-finite values.
        """
        arr = _as_finite_matrix(h, "h")
        if arr.shape[1] != self.input_dim:
            raise InputError(
                f"h has {arr.shape[1]} columns but the feature map expects {self.input_dim}"
            )
        out: NDArray[np.float64] = arr @ self.omega
        out += self.phase
        np.cos(out, out=out)
        out *= np.sqrt(2.0 / self.output_dim)
        return out

    def to_arrays(self) -> dict[str, NDArray[np.float64]]:
        """Arrays to persist (e.g. with ``numpy.savez``); inverse of :meth:`from_arrays`."""
        return {"omega": np.array(self.omega), "phase": np.array(self.phase)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, NDArray[np.float64]]) -> RandomFourierFeatures:
        """Rebuild a map saved with :meth:`to_arrays` (any mapping with both keys)."""
        missing = {"omega", "phase"} - set(arrays)
        if missing:
            raise InputError(f"RFF arrays lack key(s) {sorted(missing)}; have {sorted(arrays)}")
        return cls(omega=np.asarray(arrays["omega"]), phase=np.asarray(arrays["phase"]))


@dataclass(frozen=True, eq=False)
class FourierLift:
    """Per-column random Fourier functions ``u(t) = sqrt(2) cos(omega t + phi)`` (paper eq. 3).

    The decorrelation objective (:mod:`simulator.features.decorrelation`) measures the
    dependence between columns of the head features ``Z`` through these functions.

    Attributes
    ----------
    columns : NDArray[np.int64]
        The ``k`` columns of ``Z`` that are lifted (sorted, distinct).
    omega, phase : NDArray[np.float64]
        Shape ``(k, q)``; ``omega ~ N(0, 1)``, ``phase ~ U(0, 2 pi)``.
    standardize : bool
        Standardise each column over the rows passed to :meth:`apply` before ``u``.
    """

    columns: NDArray[np.int64]
    omega: NDArray[np.float64]
    phase: NDArray[np.float64]
    standardize: bool = True

    def __post_init__(self) -> None:
        cols = np.asarray(self.columns, dtype=np.int64)
        omega = _as_finite_matrix(self.omega, "omega")
        phase = _as_finite_matrix(self.phase, "phase")
        if cols.ndim != 1 or omega.shape != phase.shape or omega.shape[0] != cols.size:
            raise InputError(
                f"columns {cols.shape}, omega {omega.shape} and phase {phase.shape} must be "
                "(k,), (k, q) and (k, q)"
            )
        if (
            cols.size == 0
            or omega.shape[1] < 1
            or cols.min() < 0
            or np.unique(cols).size != cols.size
        ):
            raise InputError("columns must be distinct non-negative indices, q >= 1")
        object.__setattr__(self, "columns", cols)
        object.__setattr__(self, "omega", _frozen(omega))
        object.__setattr__(self, "phase", _frozen(phase))

    @classmethod
    def draw(
        cls,
        n_columns: int,
        *,
        features: int | None,
        functions: int,
        standardize: bool = True,
        rng: np.random.Generator,
    ) -> FourierLift:
        """Draw ``min(features, n_columns)`` columns (None: all), then ``omega``, then ``phase``."""
        if n_columns < 1 or functions < 1 or (features is not None and features < 1):
            raise InputError(
                f"need n_columns, functions and features >= 1, got {n_columns}, {functions}, "
                f"{features}"
            )
        k = n_columns if features is None else min(features, n_columns)
        if k == n_columns:
            cols = np.arange(n_columns, dtype=np.int64)
        else:
            cols = np.sort(rng.choice(n_columns, size=k, replace=False)).astype(np.int64)
        omega = rng.normal(0.0, 1.0, size=(k, functions))
        phase = rng.uniform(0.0, 2.0 * np.pi, size=(k, functions))
        return cls(cols, omega, phase, standardize)

    @property
    def block(self) -> int:
        """``q``, the width of one column's block in ``U``."""
        return int(self.omega.shape[1])

    def apply(self, Z: NDArray[np.floating]) -> NDArray[np.float64]:
        """Return ``U`` (n x kq); column ``a``'s functions occupy ``U[:, a*q:(a+1)*q]``."""
        arr = _as_finite_matrix(Z, "Z")
        if int(self.columns.max()) >= arr.shape[1]:
            raise InputError(
                f"Z has {arr.shape[1]} columns; the lift uses column {int(self.columns.max())}"
            )
        sel = arr[:, self.columns]
        if self.standardize:
            std = sel.std(axis=0)
            sel = (sel - sel.mean(axis=0)) / np.where(std > 0.0, std, 1.0)
        u = np.sqrt(2.0) * np.cos(sel[:, :, None] * self.omega[None] + self.phase[None])
        out: NDArray[np.float64] = u.reshape(arr.shape[0], -1)
        return out


def median_bandwidth(
    h: NDArray[np.floating], *, rng: np.random.Generator, max_samples: int = 1000
) -> float:
    """Median pairwise Euclidean distance of the rows of ``h`` (the median heuristic).

    At most ``max_samples`` rows, drawn without replacement from ``rng``, are used, so the
    cost is ``O(max_samples^2 p)``. Falls back to 1.0 when the median is 0 (e.g. more
    than half of the rows coincide).
    """
    arr = _as_finite_matrix(h, "h")
    if arr.shape[0] < 2:
        raise InputError(f"median_bandwidth needs at least 2 rows, got {arr.shape[0]}")
    if max_samples < 2:
        raise InputError(f"max_samples must be >= 2, got {max_samples}")
    if arr.shape[0] > max_samples:
        arr = arr[np.sort(rng.choice(arr.shape[0], size=max_samples, replace=False))]
    sq = np.sum(arr * arr, axis=1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (arr @ arr.T)
    iu = np.triu_indices(arr.shape[0], k=1)
    median = float(np.median(np.sqrt(np.maximum(d2[iu], 0.0))))
    return median if median > 0.0 else 1.0


def median_bandwidth_of_rows(
    X: NDArray[np.floating],
    rows: NDArray[np.int64],
    *,
    rng: np.random.Generator,
    max_samples: int = 1000,
) -> float:
    """:func:`median_bandwidth` of ``X[rows]``, bit for bit, without copying ``X[rows]``.

    The same draw of ``max_samples`` positions is made on ``rows`` first, so only the sampled
    rows are read (the copy of 60,000 x 1,024 features and its finiteness check took 0.9 s
    before the first batch of the benchmark stream).
    """
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size > max_samples >= 2:
        rows = rows[np.sort(rng.choice(rows.size, size=max_samples, replace=False))]
    return median_bandwidth(X[rows], rng=rng, max_samples=max_samples)


def _row_norms(x: NDArray[np.float64], rows: int = 4096) -> NDArray[np.float64]:
    """``np.linalg.norm(x, axis=1)``, bit for bit, ``rows`` rows at a time.

    The norm squares its whole input first; a block of rows bounds that temporary (each row's
    sum is the same reduction of the same contiguous row whatever the block).
    """
    out = np.empty(x.shape[0], dtype=np.float64)
    for start in range(0, x.shape[0], rows):
        out[start : start + rows] = np.linalg.norm(x[start : start + rows], axis=1)
    return out


def clip_to_unit_ball(x: NDArray[np.floating], *, in_place: bool = False) -> NDArray[np.float64]:
    """Divide each row by ``max(1, ||row||)`` so that every row has norm <= 1.

    Rows are treated independently (a row's result never depends on other rows, so a
    deletion does not change the retained rows); rows already inside the ball and zero
    rows are unchanged. Rounding is corrected so that the computed norms are <= 1 exactly.
    ``in_place``: ``x`` (a writable float64 matrix) is overwritten and returned, the same
    floats without a second ``(n, m)`` array (a million rows of 1,024 features are 8 GB).

    Raises
    ------
    InputError
        If ``x`` is not a matrix, has non-finite values, or (``in_place``) is not a writable
        float64 array.
    """
    arr = _as_finite_matrix(x, "x")
    norms = _row_norms(arr)
    if in_place:
        if arr is not x or not arr.flags.writeable:
            raise InputError("clip_to_unit_ball(in_place=True) needs a writable float64 matrix")
        out: NDArray[np.float64] = arr
        out /= np.maximum(norms, 1.0)[:, None]
    else:
        out = arr / np.maximum(norms, 1.0)[:, None]
    for _ in range(4):  # a row divided by its norm may still round to 1 + ulp
        new_norms = _row_norms(out)
        over = new_norms > 1.0
        if not np.any(over):
            break
        out[over] *= np.nextafter(1.0, 0.0) / new_norms[over, None]
    return out
