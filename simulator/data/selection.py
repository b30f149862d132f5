"""Label-only row selection: stratified splits, stratified subsamples, class restriction.

Everything here looks at labels only and returns row indices, so the same code serves image
arrays, sentence lists and data frames; the sources apply the indices before featurising
(embedding 10,000 sentences to keep 500 would be wasteful).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError, InputError

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class TrainTestIndices:
    """Row indices of a train/test split of one labelled pool (each sorted ascending)."""

    train: IntArray
    test: IntArray


@dataclass(frozen=True)
class ClassSelection:
    """Which rows stay in-distribution after restricting a source to some classes.

    Attributes
    ----------
    classes : tuple of int
        The kept original labels; original ``classes[k]`` becomes label ``k``.
    train, test : IntArray
        Kept rows of the train and test splits (sorted).
    ood_train, ood_test : IntArray
        Rows of the other classes in each split; they form the OOD set.
    """

    classes: tuple[int, ...]
    train: IntArray
    test: IntArray
    ood_train: IntArray
    ood_test: IntArray

    def relabel(self, original: IntArray) -> IntArray:
        """Map kept original labels to ``0 .. k-1`` in the order of :attr:`classes`."""
        lookup = {c: k for k, c in enumerate(self.classes)}
        return np.fromiter((lookup[int(v)] for v in original), dtype=np.int64, count=len(original))


def largest_remainder(weights: NDArray[np.float64], total: int) -> IntArray:
    """Integer counts proportional to ``weights`` that sum exactly to ``total``.

    Ties in the fractional parts go to the lower index, so the result is deterministic.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise InputError(f"weights must be a non-empty, non-negative, finite vector (got {w})")
    quota = w / w.sum() * total
    counts: IntArray = np.floor(quota).astype(np.int64)
    short = int(total - counts.sum())
    order = np.argsort(-(quota - counts), kind="stable")
    counts[order[:short]] += 1
    return counts


def stratified_split(
    labels: IntArray, test_fraction: float, rng: np.random.Generator
) -> TrainTestIndices:
    """Split rows into train/test keeping each class's proportion (seeded by ``rng``).

    Each class with at least two rows puts ``round(test_fraction * n_c)`` rows (at least one,
    at most ``n_c - 1``) into the test split; a singleton class stays in train.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(f"test_fraction must lie in (0, 1), got {test_fraction}", "test_fraction")
    train: list[IntArray] = []
    test: list[IntArray] = []
    for c in np.unique(labels):
        rows = np.flatnonzero(labels == c).astype(np.int64)
        shuffled = rng.permutation(rows)
        n_test = (
            0 if len(rows) < 2 else min(max(round(test_fraction * len(rows)), 1), len(rows) - 1)
        )
        test.append(shuffled[:n_test])
        train.append(shuffled[n_test:])
    return TrainTestIndices(train=_sorted_concat(train), test=_sorted_concat(test))


def stratified_sample(labels: IntArray, n: int, rng: np.random.Generator) -> IntArray:
    """Choose ``n`` rows without replacement, class counts proportional to the class sizes.

    Returns all rows (``arange``) when ``n >= len(labels)``; the result is sorted so the kept
    rows keep their source order.
    """
    if n < 1:
        raise ConfigError(f"a subsample size must be >= 1, got {n}", "max_train/max_test")
    if n >= len(labels):
        return np.arange(len(labels), dtype=np.int64)
    classes, sizes = np.unique(labels, return_counts=True)
    counts = largest_remainder(sizes.astype(np.float64), n)
    picked = [
        rng.choice(np.flatnonzero(labels == c), size=int(k), replace=False)
        for c, k in zip(classes, counts, strict=True)
    ]
    return _sorted_concat(picked)


def select_classes(
    y_train: IntArray, y_test: IntArray, classes: Sequence[int], num_classes: int
) -> ClassSelection:
    """Keep ``classes`` in-distribution and send every other class to the OOD set.

    This is the paper's MNIST setting ("digits 3 and 8 are selected as in-distribution classes
    and the remaining digits are treated as out-of-distribution data", Sec. "Datasets").
    """
    kept = tuple(int(c) for c in classes)
    if len(kept) < 2 or len(set(kept)) != len(kept):
        raise ConfigError(
            f"classes must list at least two distinct labels, got {list(kept)}", "classes"
        )
    bad = [c for c in kept if not 0 <= c < num_classes]
    if bad:
        raise ConfigError(f"classes {bad} not in 0..{num_classes - 1}", "classes")
    in_train = np.isin(y_train, kept)
    in_test = np.isin(y_test, kept)
    return ClassSelection(
        classes=kept,
        train=np.flatnonzero(in_train).astype(np.int64),
        test=np.flatnonzero(in_test).astype(np.int64),
        ood_train=np.flatnonzero(~in_train).astype(np.int64),
        ood_test=np.flatnonzero(~in_test).astype(np.int64),
    )


def _sorted_concat(parts: list[IntArray]) -> IntArray:
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.concatenate(parts)).astype(np.int64)
