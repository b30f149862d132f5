"""Type aliases of the numpy arrays the core passes around (float64 values, int64 ids)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

#: Float64 arrays: features, weights, heads, statistics.
FloatArray = NDArray[np.float64]
#: Int64 arrays: labels, sample ids, row indices.
IntArray = NDArray[np.int64]
