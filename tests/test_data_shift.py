"""OOD label swap (paper Sec. "Experimental Setting") and injected shifts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.data import (
    Dataset,
    apply_shift,
    class_prior_shift,
    gaussian_noise,
    label_swap_test,
    rotate_images,
)
from simulator.errors import InputError


def image_dataset(n: int = 40, side: int = 6) -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.random((n, side * side)).astype(np.float32)
    y = (np.arange(n) % 3).astype(np.int64)
    names, labels = ("a", "b", "c"), (0, 1, 2)
    return Dataset("img", x, y, x, y, 3, "image", names, labels, image_shape=(1, side, side))


@settings(max_examples=50, deadline=None)
@given(
    n_a=st.integers(1, 200),
    n_other=st.integers(0, 100),
    fraction=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
)
def test_label_swap_relabels_exactly_round_fraction(
    n_a: int, n_other: int, fraction: float, seed: int
) -> None:
    y = np.concatenate([np.full(n_a, 3), np.arange(n_other) % 3]).astype(np.int64)
    y = np.random.default_rng(seed).permutation(y)
    x = np.arange(len(y), dtype=np.float32)[:, None]
    split = label_swap_test(
        x, y, source_class=3, target_class=8, fraction=fraction, rng=np.random.default_rng(seed)
    )
    assert len(split.swapped) == round(fraction * n_a)
    assert np.all(y[split.swapped] == 3) and np.all(split.y[split.swapped] == 8)
    untouched = np.setdiff1d(np.arange(len(y)), split.swapped)
    np.testing.assert_array_equal(split.y[untouched], y[untouched])
    assert split.x is x and split.y.dtype == np.int64
    again = label_swap_test(
        x, y, source_class=3, target_class=8, fraction=fraction, rng=np.random.default_rng(seed)
    )
    np.testing.assert_array_equal(again.swapped, split.swapped)


def test_label_swap_default_is_ten_percent_and_validates() -> None:
    y = np.array([0] * 35 + [1] * 10, dtype=np.int64)
    split = label_swap_test(
        np.zeros((45, 2)), y, source_class=0, target_class=1, rng=np.random.default_rng(0)
    )
    assert len(split.swapped) == round(0.1 * 35) == 4
    assert np.bincount(split.y).tolist() == [31, 14]
    with pytest.raises(InputError, match="no test row has label 7"):
        label_swap_test(
            np.zeros((45, 2)), y, source_class=7, target_class=1, rng=np.random.default_rng(0)
        )


def test_gaussian_noise() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 5)).astype(np.float32) * 2.0
    np.testing.assert_array_equal(gaussian_noise(x, 0.0, np.random.default_rng(0)), x)
    noisy = gaussian_noise(x, 0.5, np.random.default_rng(0))
    assert abs(float((noisy - x).std()) - 0.5 * float(x.std())) < 0.03
    np.testing.assert_array_equal(noisy, gaussian_noise(x, 0.5, np.random.default_rng(0)))
    clipped = gaussian_noise(
        np.full((10, 3), 0.5, np.float32) + np.eye(10, 3, dtype=np.float32) * 0.4,
        5.0,
        rng,
        clip=(0.0, 1.0),
    )
    assert clipped.min() >= 0.0 and clipped.max() <= 1.0
    with pytest.raises(InputError, match="floating"):
        gaussian_noise(np.ones((2, 2), dtype=np.int64), 1.0, rng)
    with pytest.raises(InputError, match="severity"):
        gaussian_noise(x, -1.0, rng)


def test_rotation_matches_rot90_and_is_seeded() -> None:
    ds = image_dataset()
    planes = ds.x_test.reshape(-1, 6, 6)
    turned = rotate_images(ds.x_test, ds.image_shape, 90.0).reshape(-1, 6, 6)
    np.testing.assert_allclose(turned, np.rot90(planes, k=1, axes=(1, 2)), atol=1e-5)
    np.testing.assert_allclose(rotate_images(ds.x_test, ds.image_shape, 0.0), ds.x_test, atol=1e-6)
    a = rotate_images(ds.x_test, ds.image_shape, 30.0, np.random.default_rng(5))
    b = rotate_images(ds.x_test, ds.image_shape, 30.0, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, ds.x_test)
    with pytest.raises(InputError, match="image_shape"):
        rotate_images(ds.x_test, None, 10.0)
    with pytest.raises(InputError, match="not flat images"):
        rotate_images(ds.x_test[:, :10], ds.image_shape, 10.0)


def test_class_prior_shift_hits_the_target_prior() -> None:
    y = np.repeat(np.arange(3), [100, 200, 300]).astype(np.int64)
    rows = class_prior_shift(y, {0: 0.5, 1: 0.5}, np.random.default_rng(0))
    assert len(np.unique(rows)) == len(rows) and np.all(np.diff(rows) > 0)
    assert np.bincount(y[rows], minlength=3).tolist() == [100, 100, 0]  # largest feasible
    rows = class_prior_shift(y, np.array([0.2, 0.3, 0.5]), np.random.default_rng(0), size=100)
    assert np.bincount(y[rows]).tolist() == [20, 30, 50]
    with pytest.raises(InputError, match="cannot draw 1000 rows"):
        class_prior_shift(y, {0: 1.0}, np.random.default_rng(0), size=1000)
    with pytest.raises(InputError, match="non-negative"):
        class_prior_shift(y, {0: -1.0, 1: 2.0}, np.random.default_rng(0))


def test_apply_shift_kinds() -> None:
    ds = image_dataset(60)
    rng = np.random.default_rng(3)
    noisy = apply_shift(
        ds.x_test, ds.y_test, kind="gaussian_noise", severity=0.3, dataset=ds, rng=rng
    )
    assert noisy.x.shape == ds.x_test.shape and noisy.x.min() >= 0.0 and noisy.x.max() <= 1.0
    np.testing.assert_array_equal(noisy.y, ds.y_test)
    turned = apply_shift(ds.x_test, ds.y_test, kind="rotation", severity=0.5, dataset=ds, rng=rng)
    assert turned.x.shape == ds.x_test.shape and not np.allclose(turned.x, ds.x_test)
    same = apply_shift(ds.x_test, ds.y_test, kind="class_prior", severity=0.0, dataset=ds, rng=rng)
    assert len(same.y) == 60
    only0 = apply_shift(ds.x_test, ds.y_test, kind="class_prior", severity=1.0, dataset=ds, rng=rng)
    assert set(only0.y.tolist()) == {0} and len(only0.y) == 20
    np.testing.assert_array_equal(only0.x, ds.x_test[only0.indices])
    half = apply_shift(ds.x_test, ds.y_test, kind="class_prior", severity=0.5, dataset=ds, rng=rng)
    counts = np.bincount(half.y, minlength=3)
    assert counts[0] > 2 * counts[1] and counts[1] == counts[2]
    tab = Dataset(
        "tab", ds.x_test, ds.y_test, ds.x_test, ds.y_test, 3, "tabular", ("a", "b", "c"), (0, 1, 2)
    )
    with pytest.raises(InputError, match="rotation needs images"):
        apply_shift(tab.x_test, tab.y_test, kind="rotation", severity=0.5, dataset=tab, rng=rng)
    with pytest.raises(InputError, match="class_prior severity"):
        apply_shift(ds.x_test, ds.y_test, kind="class_prior", severity=1.5, dataset=ds, rng=rng)
