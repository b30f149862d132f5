"""Reader for the IDX format of MNIST and Fashion-MNIST (plain or gzip-compressed).

An IDX file starts with a 4-byte magic ``0x00 0x00 <dtype> <ndim>`` followed by ``ndim``
big-endian ``uint32`` dimensions and the data in C order.  Images are ``0x00000803`` (uint8,
``(N, rows, cols)``), labels ``0x00000801`` (uint8, ``(N,)``).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from simulator.data.image_splits import ImageSplits
from simulator.errors import InputError

IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801


@dataclass(frozen=True)
class IdxFiles:
    """The image/label files found in an IDX directory (``test_*`` are ``None`` if absent)."""

    train_images: Path
    train_labels: Path
    test_images: Path | None
    test_labels: Path | None


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read IDX file {path}: {exc}") from exc
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"IDX file {path} is a damaged or truncated gzip file: {exc}") from exc


def _read_idx(path: str | Path, magic: int, ndim: int) -> NDArray[np.uint8]:
    path = Path(path)
    data = _read_bytes(path)
    header = 4 + 4 * ndim
    if len(data) < 4:
        raise InputError(f"IDX file {path} is truncated: {len(data)} byte(s), no magic number")
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        raise InputError(
            f"IDX file {path} has magic number 0x{found:08x}, expected 0x{magic:08x} "
            f"({'images' if magic == IMAGES_MAGIC else 'labels'})"
        )
    if len(data) < header:
        raise InputError(f"IDX file {path} is truncated inside its header ({len(data)} bytes)")
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = int(np.prod(dims, dtype=np.int64))
    payload = len(data) - header
    if payload != expected:
        kind = "truncated" if payload < expected else "longer than its header says"
        raise InputError(
            f"IDX file {path} is {kind}: header dims {dims} need {expected} data bytes, "
            f"found {payload}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims).copy()


def read_idx_images(path: str | Path) -> NDArray[np.uint8]:
    """Read an ``idx3-ubyte`` image file (gzip or raw) into a ``(N, rows, cols)`` uint8 array.

    Raises
    ------
    InputError
        On a wrong magic number, a truncated file or damaged gzip data; the message names the file.
    """
    return _read_idx(path, IMAGES_MAGIC, 3)


def read_idx_labels(path: str | Path) -> NDArray[np.int64]:
    """Read an ``idx1-ubyte`` label file (gzip or raw) into an ``(N,)`` int64 array."""
    return _read_idx(path, LABELS_MAGIC, 1).astype(np.int64)


def find_idx_files(directory: str | Path) -> IdxFiles:
    """Find the ``train-*``/``t10k-*`` image and label files of an IDX directory.

    Names follow the MNIST convention (``train-images-idx3-ubyte[.gz]``,
    ``t10k-labels-idx1-ubyte[.gz]``; ``test-`` is accepted for ``t10k-``; a dot may replace the
    last hyphen as in ``train-images.idx3-ubyte``).

    Raises
    ------
    InputError
        If the directory does not exist or lacks the training pair.
    """
    root = Path(directory)
    if not root.is_dir():
        raise InputError(f"IDX directory {root} does not exist")

    def find(prefixes: tuple[str, ...], kind: str) -> Path | None:
        for prefix in prefixes:
            for sep in ("-", "."):
                for suffix in ("", ".gz"):
                    candidate = root / f"{prefix}-{kind.replace('-', sep, 1)}{suffix}"
                    if candidate.is_file():
                        return candidate
        return None

    train_images = find(("train",), "images-idx3-ubyte")
    train_labels = find(("train",), "labels-idx1-ubyte")
    if train_images is None or train_labels is None:
        listing = sorted(p.name for p in root.iterdir())
        raise InputError(
            f"IDX directory {root} needs train-images-idx3-ubyte[.gz] and "
            f"train-labels-idx1-ubyte[.gz]; found {listing}"
        )
    return IdxFiles(
        train_images=train_images,
        train_labels=train_labels,
        test_images=find(("t10k", "test"), "images-idx3-ubyte"),
        test_labels=find(("t10k", "test"), "labels-idx1-ubyte"),
    )


def read_idx_dir(directory: str | Path) -> ImageSplits:
    """Read the train (and, when present, t10k) pair of an IDX directory.

    Class names are the label values as strings (``"0" .. "9"`` for MNIST-like files).
    """
    files = find_idx_files(directory)
    x_train, y_train = _read_pair(files.train_images, files.train_labels)
    x_test: NDArray[np.uint8] | None = None
    y_test: NDArray[np.int64] | None = None
    if files.test_images is not None and files.test_labels is not None:
        x_test, y_test = _read_pair(files.test_images, files.test_labels)
    top = max(int(y_train.max(initial=0)), int(y_test.max(initial=0)) if y_test is not None else 0)
    return ImageSplits(
        x_train=x_train[:, None],
        y_train=y_train,
        x_test=None if x_test is None else x_test[:, None],
        y_test=y_test,
        class_names=tuple(str(c) for c in range(top + 1)),
    )


def _read_pair(images: Path, labels: Path) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    x = read_idx_images(images)
    y = read_idx_labels(labels)
    if x.shape[0] != y.shape[0]:
        raise InputError(f"{images} has {x.shape[0]} images but {labels} has {y.shape[0]} labels")
    return x, y
