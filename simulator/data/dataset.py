"""The one in-memory dataset type every other layer consumes.

Sample ids are row indices ``0 .. n_train - 1`` of :attr:`Dataset.x_train`; the runner and the
deletion stream rely on that, so nothing here ever reorders a finished dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError

Modality = Literal["image", "tabular", "embedding", "tokens"]
MODALITIES: tuple[str, ...] = get_args(Modality)


@dataclass(frozen=True)
class Dataset:
    """Train/test arrays of one classification task plus an optional out-of-distribution set.

    Attributes
    ----------
    name : str
        Registry name of the source (``"mnist"``, ``"synthetic"``...).
    x_train, x_test : NDArray
        ``float32`` features of shape ``(n, d)`` (images are stored flat, ``d = C*H*W``, values
        in ``[0, 1]``), or ``int64`` token ids of shape ``(n, seq_len)`` for ``"tokens"``.
    y_train, y_test : NDArray[np.int64]
        Labels in ``0 .. num_classes - 1``.
    num_classes : int
        Number of in-distribution classes.
    modality : {"image", "tabular", "embedding", "tokens"}
        What the rows are; backbones are chosen from it.
    class_names : tuple of str
        One name per in-distribution class, in label order.  When a source was restricted to
        some classes (``classes=[3, 8]``) the names are the original ones (``("3", "8")``).
    class_labels : tuple of int
        The source's own label of each class index, in label order (``classes=[7, 0]`` gives
        ``(7, 0)``; no restriction gives ``(0, 1, ..., num_classes - 1)``).  Scenario class ids
        are these labels; :func:`simulator.data.labels.class_index` maps one to its index.
    image_shape : (C, H, W) or None
        Required for ``"image"``; ``x`` rows are the C-order flattening of that shape.
    vocab_size : int or None
        Required for ``"tokens"``: ids lie in ``0 .. vocab_size - 1`` (0 = padding, 1 = unknown).
    ood_x, ood_y : NDArray or None
        Out-of-distribution inputs (e.g. the MNIST digits other than 3 and 8, paper Sec.
        "Datasets") and their labels.  ``ood_y`` holds the *original* label of each row in the
        source's own label space (not ``0 .. num_classes - 1``); a source that has no such
        label uses ``-1``.  For ``synthetic`` it holds the true labels of the shifted test set.
    public_rows : NDArray[np.int64] or None
        Training rows that came from a declared public source rather than the source's own
        training split (``model.public_source``: ``test_share``, ``digits``), appended after
        them (ids ``n .. n_train - 1``): the public pool, which no client ever holds.  None
        when there is no such pool (a ``train_share`` pool is drawn by the runner instead).
    """

    name: str
    x_train: NDArray[Any]
    y_train: NDArray[np.int64]
    x_test: NDArray[Any]
    y_test: NDArray[np.int64]
    num_classes: int
    modality: Modality
    class_names: tuple[str, ...]
    class_labels: tuple[int, ...]
    image_shape: tuple[int, int, int] | None = None
    vocab_size: int | None = None
    ood_x: NDArray[Any] | None = None
    ood_y: NDArray[np.int64] | None = None
    public_rows: NDArray[np.int64] | None = None

    def __post_init__(self) -> None:
        if self.modality not in MODALITIES:
            raise InputError(
                f"Dataset {self.name!r}: modality {self.modality!r} not in {MODALITIES}"
            )
        if self.num_classes < 1 or len(self.class_names) != self.num_classes:
            raise InputError(
                f"Dataset {self.name!r}: num_classes={self.num_classes} but "
                f"{len(self.class_names)} class name(s)"
            )
        labels = self.class_labels
        if (
            len(labels) != self.num_classes
            or len(set(labels)) != len(labels)
            or any(not isinstance(c, int) or c < 0 for c in labels)
        ):
            raise InputError(
                f"Dataset {self.name!r}: class_labels should be {self.num_classes} distinct "
                f"source labels >= 0, got {labels}"
            )
        _check_labels(self.name, "y_train", self.y_train, self.num_classes)
        _check_labels(self.name, "y_test", self.y_test, self.num_classes)
        if len(self.y_train) == 0:
            raise InputError(f"Dataset {self.name!r}: the training split is empty")
        self._check_public_rows()
        splits = [("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)]
        if (self.ood_x is None) != (self.ood_y is None):
            raise InputError(f"Dataset {self.name!r}: ood_x and ood_y must be given together")
        if self.ood_x is not None and self.ood_y is not None:
            _check_labels(self.name, "ood_y", self.ood_y, None)
            splits.append(("ood", self.ood_x, self.ood_y))
        for split, x, y in splits:
            check_rows(f"Dataset {self.name!r}: x_{split}", x, y, "(n, d)")
            if x.shape[1] != self.x_train.shape[1]:
                raise InputError(
                    f"Dataset {self.name!r}: x_{split} has {x.shape[1]} columns, x_train has "
                    f"{self.x_train.shape[1]}"
                )
            self._check_values(split, x)

    def _check_public_rows(self) -> None:
        rows = self.public_rows
        if rows is None:
            return
        n = len(self.y_train)
        if rows.ndim != 1 or rows.size == 0 or rows.size >= n:
            raise InputError(
                f"Dataset {self.name!r}: public_rows should be 1..{n - 1} training row ids, "
                f"got {rows.size}"
            )
        if not np.array_equal(rows, np.arange(n - rows.size, n)):
            raise InputError(
                f"Dataset {self.name!r}: public_rows should be the last {rows.size} training rows"
            )

    def _check_values(self, split: str, x: NDArray[Any]) -> None:
        if self.modality == "tokens":
            if self.vocab_size is None or not np.issubdtype(x.dtype, np.integer):
                raise InputError(
                    f"Dataset {self.name!r}: tokens need integer ids and vocab_size "
                    f"(got dtype {x.dtype}, vocab_size={self.vocab_size})"
                )
            if x.size and (x.min() < 0 or x.max() >= self.vocab_size):
                raise InputError(
                    f"Dataset {self.name!r}: token ids of x_{split} outside "
                    f"0..{self.vocab_size - 1}"
                )
            return
        if not np.issubdtype(x.dtype, np.floating):
            raise InputError(f"Dataset {self.name!r}: x_{split} must be floating, got {x.dtype}")
        if not np.all(np.isfinite(x)):
            raise InputError(f"Dataset {self.name!r}: x_{split} has non-finite values")
        if self.modality == "image":
            if self.image_shape is None or int(np.prod(self.image_shape)) != x.shape[1]:
                raise InputError(
                    f"Dataset {self.name!r}: image_shape {self.image_shape} does not match "
                    f"{x.shape[1]} columns"
                )
            if x.size and (x.min() < 0.0 or x.max() > 1.0):
                raise InputError(f"Dataset {self.name!r}: image pixels of x_{split} not in [0, 1]")

    @property
    def n_train(self) -> int:
        """Number of training rows (= number of sample ids)."""
        return len(self.y_train)

    @property
    def n_features(self) -> int:
        """Row width: features, flattened pixels or sequence length."""
        return int(self.x_train.shape[1])


def check_rows(subject: str, x: NDArray[Any], y: NDArray[Any], layout: str) -> None:
    """``x`` has the dimensions ``layout`` names (``"(n, d)"``) and one row per label in ``y``.

    Raises
    ------
    InputError
        Naming ``subject``, its shape and the expected one.
    """
    if x.ndim != layout.count(",") + 1 or x.shape[0] != y.shape[0]:
        raise InputError(
            f"{subject} has shape {x.shape}, expected {layout} with n = {y.shape[0]} labels"
        )


def _check_labels(name: str, field: str, y: NDArray[Any], num_classes: int | None) -> None:
    if not isinstance(y, np.ndarray) or y.dtype != np.int64 or y.ndim != 1:
        shape = getattr(y, "shape", None)
        dtype = getattr(y, "dtype", type(y).__name__)
        raise InputError(
            f"Dataset {name!r}: {field} must be a 1-D int64 array (got {dtype} {shape})"
        )
    if num_classes is None:
        if y.size and y.min() < -1:
            raise InputError(f"Dataset {name!r}: {field} has labels below -1")
        return
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise InputError(
            f"Dataset {name!r}: {field} has labels outside 0..{num_classes - 1} "
            f"(min {y.min()}, max {y.max()})"
        )
