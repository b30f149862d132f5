"""Natural distribution shifts: the same label space from another source.

* :func:`digits_as_mnist` — scikit-learn's 8x8 handwritten digits (UCI "optical recognition of
  handwritten digits": 43 other writers, another scanner, 4x4-block counts 0..16) drawn into
  MNIST's format: scaled to [0, 1], upscaled bilinearly to 20x20 and centred in a 28x28 frame
  (MNIST digits are size-normalised to a 20x20 box, LeCun et al. 1998). A classifier trained on
  MNIST sees the same ten digit classes in a different style: a natural covariate shift.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError

#: MNIST's digit box and frame (pixels).
MNIST_BOX = 20
MNIST_FRAME = 28


def digits_as_mnist(
    labels: list[int] | None = None,
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """scikit-learn digits as flat 28x28 images in [0, 1] with their digit labels.

    Parameters
    ----------
    labels
        Digits to keep (all ten when None), in the returned label space of the digits
        themselves (0..9).

    Returns
    -------
    x : (n, 784) float32, y : (n,) int64 digit labels.
    """
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float64) / 16.0
    y = np.asarray(bunch.target, dtype=np.int64)
    if labels is not None:
        keep = np.isin(y, np.asarray(labels))
        if not keep.any():
            raise InputError(f"scikit-learn digits has no rows of labels {labels}")
        images, y = images[keep], y[keep]
    big = zoom(images, (1, MNIST_BOX / 8, MNIST_BOX / 8), order=1)
    pad = (MNIST_FRAME - MNIST_BOX) // 2
    frame = np.zeros((len(y), MNIST_FRAME, MNIST_FRAME))
    frame[:, pad : pad + MNIST_BOX, pad : pad + MNIST_BOX] = np.clip(big, 0.0, 1.0)
    return frame.reshape(len(y), -1).astype(np.float32), y
