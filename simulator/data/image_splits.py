"""The common result of the image-file readers (IDX, CIFAR-10)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.data.dataset import check_rows
from simulator.data.raw import Splits
from simulator.errors import InputError


@dataclass(frozen=True)
class ImageSplits(Splits[NDArray[np.uint8]]):
    """Raw uint8 images ``(n, C, H, W)`` with int64 labels, as read from disk."""

    def __post_init__(self) -> None:
        pairs = [("train", self.x_train, self.y_train)]
        if self.x_test is not None and self.y_test is not None:
            pairs.append(("test", self.x_test, self.y_test))
        for split, x, y in pairs:
            check_rows(f"{split} images", x, y, "(n, C, H, W)")
            if y.size and (y.min() < 0 or y.max() >= len(self.class_names)):
                raise InputError(
                    f"{split} labels outside 0..{len(self.class_names) - 1} "
                    f"(min {y.min()}, max {y.max()})"
                )

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image."""
        c, h, w = self.x_train.shape[1:]
        return int(c), int(h), int(w)
