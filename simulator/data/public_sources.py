"""Public pools drawn from a declared source other than the training rows.

Under ``model.extractor_data: public`` the extractor, the RFF bandwidth and the encoder's
statistics are fitted on a public pool alone (docs/certified-head.md). ``model.public_source``
says where the pool comes from. ``train_share`` (the default) draws it from the training rows
(:func:`simulator.runner.federation.public_pool`); the two sources here draw it elsewhere, so
that the clients keep every training row. Both are :class:`~simulator.data.raw.PublicRows`:
:func:`simulator.data.raw.assemble` appends the pool after the source's training rows (ids
``n .. n + k - 1``, :attr:`~simulator.data.dataset.Dataset.public_rows`) and fits the encoder
on it alone.

* :func:`share_of_test_split`: a seeded share of the selected test split; those rows leave the test
  split, so no row is both in the pool and evaluated.
* :func:`digits_pool`: scikit-learn's 8x8 digits (in the wheel, offline) of the scenario's
  classes, resampled to MNIST's 28x28 layout and stored as MNIST's bytes are.
"""

from __future__ import annotations

import numpy as np

from simulator.data.raw import Labelled, take
from simulator.errors import ConfigError

#: Largest value of a byte pixel (the digit sources' encoder divides by it).
BYTE_MAX = 255.0


def share_of_test_split(
    test: Labelled, class_labels: tuple[int, ...], *, fraction: float, rng: np.random.Generator
) -> tuple[Labelled, Labelled]:
    """A seeded ``fraction`` of the ``test`` rows as the pool, and the test rows left.

    Raises
    ------
    ConfigError
        The share leaves the pool or the test split empty.
    """
    x, y = test
    n = len(y)
    k = round(fraction * n)
    if k < 1 or k >= n:
        raise ConfigError(
            f"model.public_source test_share: {fraction:g} of the {n} test rows leaves "
            f"{'no pool' if k < 1 else 'no test row to evaluate'}",
            "model.public_fraction",
        )
    pool = np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)
    rest = np.setdiff1d(np.arange(n, dtype=np.int64), pool)
    return (take(x, pool), y[pool]), (take(x, rest), y[rest])


def digits_pool(test: Labelled, class_labels: tuple[int, ...]) -> tuple[Labelled, Labelled]:
    """scikit-learn's digits of ``class_labels`` as 28x28 bytes; the test rows unchanged.

    The images are :func:`simulator.data.natural.digits_as_mnist`'s (the natural ``digits``
    shift's: resampled into MNIST's 20x20 box in a 28x28 frame, in [0, 1]) stored as bytes
    (``round(255 v)``), the way the digit sources' rows are, so their encoder (pixels / 255)
    scales them as it scales MNIST. Labels are the class indices of ``class_labels``; digits of
    other classes are left out.

    Raises
    ------
    ConfigError
        The source's rows are not 28x28 images.
    """
    from simulator.data.labels import class_index
    from simulator.data.natural import MNIST_FRAME, digits_as_mnist

    width = np.asarray(test[0]).shape[1]
    if width != MNIST_FRAME * MNIST_FRAME:
        raise ConfigError(
            f"public_source digits: the source's rows have {width} pixels, not "
            f"{MNIST_FRAME}x{MNIST_FRAME}",
            "model.public_source",
        )
    x, digit = digits_as_mnist(list(class_labels))
    labels = [class_index(class_labels, int(d), "model.public_source") for d in digit]
    pixels = np.rint(x.astype(np.float64) * BYTE_MAX).astype(np.uint8)
    return (pixels, np.asarray(labels, dtype=np.int64)), test
