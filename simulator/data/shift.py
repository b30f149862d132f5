"""OOD test construction and injected distribution shifts.

* :func:`label_swap_test` — the paper's OOD evaluation (Sec. "Experimental Setting"): "we
  randomly select 10% of samples from class A and assign them as test data for class B", i.e.
  a random ``fraction`` of class-A test rows is presented with label B; all else is unchanged.
* Covariate shifts with a ``severity`` (0 = none): additive Gaussian noise, image rotation.
* Label shift: resampling to a new class prior.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from simulator.data.dataset import Dataset
from simulator.data.selection import IntArray, largest_remainder
from simulator.errors import InputError

ShiftKind = Literal["gaussian_noise", "rotation", "class_prior"]
MAX_ROTATION_DEGREES = 90.0
"""``apply_shift(kind="rotation")`` rotates each image by U(-90·severity, 90·severity) degrees."""


@dataclass(frozen=True)
class OODSplit:
    """A test set with some class-A rows relabelled as class B.

    ``swapped`` holds the (sorted) row indices whose label was changed from A to B.
    """

    x: NDArray[Any]
    y: NDArray[np.int64]
    swapped: IntArray


@dataclass(frozen=True)
class ShiftedSet:
    """Shifted inputs and labels; ``indices`` are the source rows each output row came from."""

    x: NDArray[Any]
    y: NDArray[np.int64]
    indices: IntArray


def label_swap_test(
    x_test: NDArray[Any],
    y_test: NDArray[np.int64],
    *,
    source_class: int,
    target_class: int,
    fraction: float = 0.1,
    rng: np.random.Generator,
) -> OODSplit:
    """Relabel ``round(fraction * n_A)`` random class-``source_class`` rows as ``target_class``.

    The inputs are returned unchanged (not copied); labels are a new array.
    """
    y = np.asarray(y_test)
    if len(x_test) != len(y):
        raise InputError(f"x_test has {len(x_test)} rows but y_test has {len(y)}")
    if source_class == target_class:
        raise InputError(f"source_class and target_class are both {source_class}")
    if not 0.0 <= fraction <= 1.0:
        raise InputError(f"fraction must lie in [0, 1], got {fraction}")
    rows = np.flatnonzero(y == source_class)
    if len(rows) == 0:
        raise InputError(f"no test row has label {source_class}")
    swapped = np.sort(rng.choice(rows, size=round(fraction * len(rows)), replace=False))
    y_new = y.astype(np.int64, copy=True)
    y_new[swapped] = target_class
    return OODSplit(x=x_test, y=y_new, swapped=swapped.astype(np.int64))


def _check_severity(severity: float) -> None:
    if not (np.isfinite(severity) and severity >= 0):
        raise InputError(f"severity must be a finite number >= 0, got {severity}")


def gaussian_noise(
    x: NDArray[Any],
    severity: float,
    rng: np.random.Generator,
    *,
    clip: tuple[float, float] | None = None,
) -> NDArray[np.float32]:
    """Add ``N(0, (severity · std(x))²)`` noise to every entry (std over the whole array).

    ``clip`` bounds the result (``(0, 1)`` keeps images valid).  Integer inputs (token ids) are
    rejected.
    """
    _check_severity(severity)
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        raise InputError(f"gaussian_noise needs floating inputs, got {arr.dtype}")
    scale = float(arr.std()) if arr.size else 0.0
    noisy = arr + severity * scale * rng.standard_normal(arr.shape)
    if clip is not None:
        noisy = np.clip(noisy, clip[0], clip[1])
    return noisy.astype(np.float32)


def rotate_images(
    x: NDArray[Any],
    image_shape: tuple[int, int, int] | None,
    degrees: float,
    rng: np.random.Generator | None = None,
) -> NDArray[np.float32]:
    """Rotate flat images ``(n, C*H*W)`` about their centre (bilinear, zero fill).

    Positive angles turn counter-clockwise as displayed (``degrees=90`` equals ``np.rot90``
    on each ``(H, W)`` plane).

    Without ``rng`` every image turns by exactly ``degrees``; with ``rng`` each image turns by
    its own angle drawn from ``U(-degrees, degrees)``.
    """
    from scipy.ndimage import rotate

    if image_shape is None or len(image_shape) != 3:
        raise InputError(f"rotate_images needs an image_shape (C, H, W), got {image_shape}")
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[1] != int(np.prod(image_shape)):
        raise InputError(f"inputs of shape {arr.shape} are not flat images of shape {image_shape}")
    if not np.isfinite(degrees):
        raise InputError(f"degrees must be finite, got {degrees}")
    stack = arr.reshape((-1, *image_shape))
    if rng is None:
        turned = rotate(stack, degrees, axes=(3, 2), reshape=False, order=1, mode="constant")
    else:
        angles = rng.uniform(-abs(degrees), abs(degrees), size=len(stack))
        turned = np.empty_like(stack)
        for i, angle in enumerate(angles):
            turned[i] = rotate(
                stack[i], angle, axes=(2, 1), reshape=False, order=1, mode="constant"
            )
    return np.asarray(turned, dtype=np.float32).reshape(arr.shape)


def class_prior_shift(
    labels: NDArray[np.int64],
    target_prior: Mapping[int, float] | NDArray[np.float64],
    rng: np.random.Generator,
    *,
    size: int | None = None,
) -> IntArray:
    """Row indices (sorted, without replacement) whose class mix follows ``target_prior``.

    ``target_prior`` maps class -> weight (missing classes get 0) or is a vector indexed by
    class; it is normalised.  Without ``size`` the largest feasible sample is taken
    (``min_c count_c / p_c`` rows).
    """
    y = np.asarray(labels)
    top = int(y.max(initial=-1)) + 1
    if isinstance(target_prior, Mapping):
        if any(int(c) < 0 for c in target_prior):
            raise InputError(f"target_prior has negative classes: {dict(target_prior)}")
        top = max([top, *(int(c) + 1 for c in target_prior)])
        prior = np.zeros(top)
        for c, p in target_prior.items():
            prior[int(c)] = float(p)
    else:
        prior = np.asarray(target_prior, dtype=np.float64)
        if prior.ndim != 1 or len(prior) < top:
            raise InputError(f"target_prior needs one weight for each of the {top} classes")
    if np.any(prior < 0) or not np.isfinite(prior).all() or prior.sum() <= 0:
        raise InputError(f"target_prior must be non-negative with a positive sum, got {prior}")
    prior = prior / prior.sum()
    available = np.bincount(y, minlength=len(prior)).astype(np.float64)
    wanted = prior > 0
    feasible = int(np.floor(np.min(available[wanted] / prior[wanted]) + 1e-9))
    n = feasible if size is None else size
    if n > feasible or n < 0:
        raise InputError(f"cannot draw {n} rows with prior {prior.round(3)} (at most {feasible})")
    counts = largest_remainder(prior, n) if n > 0 else np.zeros(len(prior), dtype=np.int64)
    counts = np.minimum(counts, available.astype(np.int64))
    picked = [
        rng.choice(np.flatnonzero(y == c), size=int(k), replace=False)
        for c, k in enumerate(counts)
        if k > 0
    ]
    return np.sort(np.concatenate(picked)).astype(np.int64) if picked else np.zeros(0, np.int64)


def apply_shift(
    x: NDArray[Any],
    y: NDArray[np.int64],
    *,
    kind: ShiftKind,
    severity: float,
    dataset: Dataset,
    rng: np.random.Generator,
) -> ShiftedSet:
    """Inject a shift of ``kind`` and ``severity`` into the rows ``(x, y)`` of ``dataset``.

    * ``gaussian_noise`` — :func:`gaussian_noise` (clipped to [0, 1] for images).
    * ``rotation`` — images only: each rotated by ``U(-90·s, 90·s)`` degrees.
    * ``class_prior`` — ``s`` in [0, 1] moves the class prior linearly from the observed one
      (``s = 0``) to all mass on class 0 (``s = 1``); rows are resampled without replacement.
    """
    _check_severity(severity)
    if len(x) != len(y):
        raise InputError(f"x has {len(x)} rows but y has {len(y)}")
    everything = np.arange(len(y), dtype=np.int64)
    labels = np.asarray(y, dtype=np.int64)
    if kind == "gaussian_noise":
        if dataset.modality == "tokens":
            raise InputError("gaussian_noise does not apply to token ids")
        clip = (0.0, 1.0) if dataset.modality == "image" else None
        return ShiftedSet(gaussian_noise(x, severity, rng, clip=clip), labels, everything)
    if kind == "rotation":
        if dataset.modality != "image":
            raise InputError(
                f"rotation needs images; dataset {dataset.name!r} is {dataset.modality}"
            )
        turned = rotate_images(x, dataset.image_shape, MAX_ROTATION_DEGREES * severity, rng)
        return ShiftedSet(turned, labels, everything)
    if kind == "class_prior":
        if severity > 1:
            raise InputError(f"class_prior severity must lie in [0, 1], got {severity}")
        observed = np.bincount(labels, minlength=dataset.num_classes) / max(len(labels), 1)
        target = (1.0 - severity) * observed
        target[0] += severity
        rows = class_prior_shift(labels, target, rng)
        return ShiftedSet(np.asarray(x)[rows], labels[rows], rows)
    raise InputError(f"unknown shift kind {kind!r}; known: gaussian_noise, rotation, class_prior")
