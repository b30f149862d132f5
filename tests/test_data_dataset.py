"""Dataset validation and the label-only selection helpers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.data import Dataset
from simulator.data.selection import largest_remainder, stratified_sample, stratified_split
from simulator.errors import ConfigError, InputError


def make(**overrides: Any) -> Dataset:
    x = np.zeros((4, 3), dtype=np.float32)
    y = np.array([0, 1, 0, 1], dtype=np.int64)
    kwargs: dict[str, Any] = dict(
        name="t", x_train=x, y_train=y, x_test=x, y_test=y, num_classes=2,
        modality="tabular", class_names=("a", "b"), class_labels=(0, 1),
    )  # fmt: skip
    kwargs.update(overrides)
    return Dataset(**kwargs)


def test_valid_dataset() -> None:
    ds = make()
    assert ds.n_train == 4 and ds.n_features == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"y_train": np.array([0, 1, 2, 1], dtype=np.int64)}, "y_train has labels outside 0..1"),
        ({"y_train": np.array([0, 1, 0, 1], dtype=np.int32)}, "1-D int64"),
        ({"y_test": np.array([0, 1], dtype=np.int64)}, "x_test has shape"),
        ({"x_train": np.full((4, 3), np.nan, dtype=np.float32)}, "non-finite"),
        ({"x_test": np.zeros((4, 2), dtype=np.float32)}, "x_test has 2 columns"),
        ({"class_names": ("a",)}, "1 class name"),
        ({"modality": "audio"}, "modality 'audio'"),
        ({"ood_x": np.zeros((1, 3), dtype=np.float32)}, "given together"),
        ({"modality": "image", "image_shape": (1, 2, 2)}, "image_shape"),
        (
            {
                "modality": "image",
                "image_shape": (1, 1, 3),
                "x_train": np.full((4, 3), 2.0, np.float32),
            },
            r"not in \[0, 1\]",
        ),
        ({"modality": "tokens", "x_train": np.zeros((4, 3), np.int64)}, "tokens need integer ids"),
        ({"x_train": np.zeros((4, 3), np.int64)}, "must be floating"),
    ],
)
def test_invalid_datasets_raise_input_error(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        make(**overrides)


def test_tokens_dataset_and_ood_labels() -> None:
    ids = np.array([[2, 3, 0], [1, 4, 0], [2, 2, 2], [0, 0, 0]], dtype=np.int64)
    ds = make(modality="tokens", x_train=ids, x_test=ids, vocab_size=5,
              ood_x=ids[:2], ood_y=np.array([-1, 7], dtype=np.int64))  # fmt: skip
    assert ds.vocab_size == 5
    with pytest.raises(InputError, match=r"outside 0\.\.3"):
        make(modality="tokens", x_train=ids, x_test=ids, vocab_size=4)


@settings(max_examples=50, deadline=None)
@given(weights=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=8), total=st.integers(0, 500))
def test_largest_remainder_sums_exactly(weights: list[float], total: int) -> None:
    w = np.array(weights)
    if w.sum() <= 0:
        with pytest.raises(InputError):
            largest_remainder(w, total)
        return
    counts = largest_remainder(w, total)
    assert counts.sum() == total and np.all(counts >= 0)
    assert np.all(np.abs(counts - w / w.sum() * total) < 1)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 50), min_size=1, max_size=5),
    fraction=st.floats(0.05, 0.95),
    seed=st.integers(0, 1000),
)
def test_stratified_split_partitions_each_class(
    sizes: list[int], fraction: float, seed: int
) -> None:
    labels = np.repeat(np.arange(len(sizes)), sizes).astype(np.int64)
    if len(labels) == 0:
        return
    split = stratified_split(labels, fraction, np.random.default_rng(seed))
    assert np.array_equal(
        np.sort(np.concatenate([split.train, split.test])), np.arange(len(labels))
    )
    for c, n in enumerate(sizes):
        n_test = int(np.sum(labels[split.test] == c))
        if n >= 2:
            assert n_test == min(max(round(fraction * n), 1), n - 1)
        else:
            assert n_test == 0
    again = stratified_split(labels, fraction, np.random.default_rng(seed))
    np.testing.assert_array_equal(again.test, split.test)


def test_stratified_sample_and_errors() -> None:
    labels = np.repeat(np.arange(3), [10, 30, 60]).astype(np.int64)
    rows = stratified_sample(labels, 20, np.random.default_rng(0))
    assert np.bincount(labels[rows]).tolist() == [2, 6, 12]
    assert np.array_equal(stratified_sample(labels, 500, np.random.default_rng(0)), np.arange(100))
    with pytest.raises(ConfigError, match="test_fraction"):
        stratified_split(labels, 0.0, np.random.default_rng(0))
