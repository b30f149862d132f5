"""Small data makers shared by the head tests."""

from __future__ import annotations

import numpy as np


def planted_problem(
    n: int, d: int, k: int, *, seed: int, noise: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """Rows on the unit sphere and labels from a random linear model plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    W = rng.normal(size=(d, k)) * 4.0
    y = np.argmax(X @ W + noise * rng.normal(size=(n, k)), axis=1).astype(np.int64)
    return X, y
