"""Reader for the python version of CIFAR-10 (``cifar-10-batches-py/``).

The directory holds ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``: pickles (protocol
2, ``encoding="bytes"``) of dicts with ``b"data"`` (uint8, ``(10000, 3072)``, channel-first
rows: 1024 red, 1024 green, 1024 blue) and ``b"labels"``; ``batches.meta`` lists
``b"label_names"``.  Pickles can execute code, so they are loaded with an unpickler that only
accepts the numpy classes an array needs.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.data.image_splits import ImageSplits
from simulator.errors import InputError

TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
_ALLOWED = {
    ("_codecs", "encode"),  # how protocol-2 pickles written by Python 3 store bytes
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
}


class _ArrayOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")
        return super().find_class(module, name)


def _load_pickle(path: Path) -> dict[bytes, Any]:
    if not path.is_file():
        raise InputError(f"CIFAR-10 file {path} is missing")
    try:
        with path.open("rb") as fh:
            obj = _ArrayOnlyUnpickler(fh, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise InputError(f"CIFAR-10 file {path} is not a valid batch pickle: {exc}") from exc
    if not isinstance(obj, dict):
        raise InputError(f"CIFAR-10 file {path} holds a {type(obj).__name__}, expected a dict")
    return obj


def _read_batch(path: str | Path) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """Read one batch file into ``(n, 3, 32, 32)`` uint8 images and ``(n,)`` int64 labels."""
    path = Path(path)
    batch = _load_pickle(path)
    if b"data" not in batch or b"labels" not in batch:
        raise InputError(f"CIFAR-10 file {path} lacks b'data' or b'labels' (keys {sorted(batch)})")
    data = np.asarray(batch[b"data"])
    labels = np.asarray(batch[b"labels"], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise InputError(
            f"CIFAR-10 file {path}: b'data' is {data.dtype} {data.shape}, expected uint8 (n, 3072)"
        )
    if labels.shape != (data.shape[0],):
        raise InputError(f"CIFAR-10 file {path}: {data.shape[0]} images but {labels.size} labels")
    return data.reshape(-1, 3, 32, 32), labels


def read_cifar10(directory: str | Path) -> ImageSplits:
    """Read a ``cifar-10-batches-py/`` directory (5 train batches + ``test_batch``).

    Raises
    ------
    InputError
        If a batch is missing or malformed; the message names the file.
    """
    root = Path(directory)
    if not root.is_dir():
        raise InputError(f"CIFAR-10 directory {root} does not exist")
    parts = [_read_batch(root / name) for name in TRAIN_BATCHES]
    x_test, y_test = _read_batch(root / TEST_BATCH)
    names: tuple[str, ...] = CIFAR10_CLASSES
    if (root / "batches.meta").is_file():
        meta = _load_pickle(root / "batches.meta")
        if b"label_names" in meta:
            names = tuple(
                n.decode() if isinstance(n, bytes) else str(n) for n in meta[b"label_names"]
            )
    return ImageSplits(
        x_train=np.concatenate([p[0] for p in parts]),
        y_train=np.concatenate([p[1] for p in parts]),
        x_test=x_test,
        y_test=y_test,
        class_names=names,
    )
