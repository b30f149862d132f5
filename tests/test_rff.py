"""Tests for simulator.features.rff: the RFF head map, the per-column lift, clipping."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from simulator.errors import InputError
from simulator.features.rff import (
    FourierLift,
    RandomFourierFeatures,
    _row_norms,
    clip_to_unit_ball,
    median_bandwidth,
)
from simulator.models.backbones import ExtractorWithHead, IdentityBackbone
from simulator.models.featurizer import Featurizer
from simulator.models.fedavg import extract_features


def test_draw_shapes_distribution_and_determinism() -> None:
    a = RandomFourierFeatures.draw(50, 400, bandwidth=2.0, rng=np.random.default_rng(3))
    b = RandomFourierFeatures.draw(50, 400, bandwidth=2.0, rng=np.random.default_rng(3))
    assert a.omega.shape == (50, 400) and a.phase.shape == (400,)
    assert (a.input_dim, a.output_dim) == (50, 400)
    np.testing.assert_array_equal(a.omega, b.omega)
    np.testing.assert_array_equal(a.phase, b.phase)
    # omega ~ N(0, 1/bandwidth^2): 20k draws, std 0.5 within 3%
    assert abs(a.omega.std() - 0.5) < 0.015
    assert a.phase.min() >= 0.0 and a.phase.max() < 2 * np.pi
    with pytest.raises(ValueError):
        a.omega[0, 0] = 1.0  # frozen arrays


def test_transform_shape_bounds_and_kernel_approximation() -> None:
    rng = np.random.default_rng(0)
    h = rng.normal(size=(6, 5))
    rff = RandomFourierFeatures.draw(5, 20_000, bandwidth=1.5, rng=rng)
    z = rff.transform(h)
    assert z.shape == (6, 20_000) and z.dtype == np.float64
    assert np.all(np.isfinite(z)) and np.abs(z).max() <= np.sqrt(2 / 20_000) + 1e-15
    d2 = ((h[:, None, :] - h[None, :, :]) ** 2).sum(-1)
    gauss = np.exp(-d2 / (2 * 1.5**2))
    assert np.abs(z @ z.T - gauss).max() < 0.05  # Rahimi & Recht: z.z -> Gaussian kernel


@pytest.mark.parametrize(
    "h",
    [np.zeros(3), np.zeros((2, 3, 3)), np.zeros((4, 2)), np.array([[0.0, np.nan, 1.0]])],
    ids=["1-D", "3-D", "wrong-width", "nan"],
)
def test_transform_rejects_bad_input(h: np.ndarray) -> None:
    rff = RandomFourierFeatures.draw(3, 8, bandwidth=1.0, rng=np.random.default_rng(0))
    with pytest.raises(InputError):
        rff.transform(h)


def test_constructor_and_draw_validation() -> None:
    with pytest.raises(InputError):
        RandomFourierFeatures(omega=np.zeros((3, 4)), phase=np.zeros(5))
    with pytest.raises(InputError):
        RandomFourierFeatures(omega=np.full((3, 4), np.inf), phase=np.zeros(4))
    for bw in (0.0, -1.0, np.nan):
        with pytest.raises(InputError):
            RandomFourierFeatures.draw(3, 4, bandwidth=bw, rng=np.random.default_rng(0))
    with pytest.raises(InputError):
        RandomFourierFeatures.draw(0, 4, bandwidth=1.0, rng=np.random.default_rng(0))


def test_save_load_roundtrip(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    rff = RandomFourierFeatures.draw(7, 32, bandwidth=0.7, rng=rng)
    saved = rff.to_arrays()
    np.savez(tmp_path / "rff.npz", omega=saved["omega"], phase=saved["phase"])
    with np.load(tmp_path / "rff.npz") as data:
        back = RandomFourierFeatures.from_arrays(dict(data))
    h = rng.normal(size=(5, 7))
    np.testing.assert_array_equal(back.transform(h), rff.transform(h))
    with pytest.raises(InputError):
        RandomFourierFeatures.from_arrays({"omega": rff.omega})


def test_median_bandwidth() -> None:
    pts = np.array([[0.0], [1.0], [3.0]])  # distances 1, 2, 3
    assert median_bandwidth(pts, rng=np.random.default_rng(0)) == pytest.approx(2.0)
    assert median_bandwidth(np.ones((5, 3)), rng=np.random.default_rng(0)) == 1.0  # zero median
    big = np.random.default_rng(2).normal(size=(3000, 4))
    a = median_bandwidth(big, rng=np.random.default_rng(5), max_samples=300)
    b = median_bandwidth(big, rng=np.random.default_rng(5), max_samples=300)
    assert a == b
    # E||x - y|| for independent N(0, I_4) is about sqrt(2 * 4) ~ 2.8; median close to it
    assert 2.4 < a < 3.0
    with pytest.raises(InputError):
        median_bandwidth(np.zeros((1, 3)), rng=np.random.default_rng(0))


@settings(max_examples=60, deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(1, 8), st.integers(1, 6)),
        elements=st.floats(-1e6, 1e6, allow_nan=False),
    )
)
def test_clip_to_unit_ball(x: np.ndarray) -> None:
    out = clip_to_unit_ball(x)
    norms = np.linalg.norm(x, axis=1)
    assert out.shape == x.shape
    assert np.all(np.linalg.norm(out, axis=1) <= 1.0)
    inside = norms <= 1.0
    np.testing.assert_array_equal(out[inside], x[inside])  # rows in the ball (and zeros) unchanged
    big = norms > 1.0
    np.testing.assert_allclose(out[big] * norms[big, None], x[big], rtol=1e-12, atol=1e-300)
    for i in range(x.shape[0]):  # per-row: the same result without the other rows
        np.testing.assert_array_equal(clip_to_unit_ball(x[i : i + 1])[0], out[i])


def test_clip_rejects_bad_input() -> None:
    with pytest.raises(InputError):
        clip_to_unit_ball(np.array([1.0, 2.0]))
    with pytest.raises(InputError):
        clip_to_unit_ball(np.array([[np.inf, 0.0]]))


def test_fourier_lift_draw_apply() -> None:
    rng = np.random.default_rng(0)
    lift = FourierLift.draw(10, features=4, functions=3, rng=rng)
    assert lift.columns.shape == (4,) and np.all(np.diff(lift.columns) > 0)
    assert lift.omega.shape == (4, 3) and lift.block == 3
    z = rng.normal(size=(50, 10))
    u = lift.apply(z)
    assert u.shape == (50, 12) and np.abs(u).max() <= np.sqrt(2) + 1e-15
    # block a holds column a's functions: check one entry by the formula
    s = z[:, lift.columns[1]]
    s = (s - s.mean()) / s.std()
    np.testing.assert_allclose(
        u[:, 3 + 2], np.sqrt(2) * np.cos(lift.omega[1, 2] * s + lift.phase[1, 2]), rtol=1e-12
    )
    # standardisation: invariant to positive affine maps of the columns
    np.testing.assert_allclose(lift.apply(3.0 * z - 7.0), u, atol=1e-12)
    all_cols = FourierLift.draw(10, features=None, functions=1, rng=rng)
    np.testing.assert_array_equal(all_cols.columns, np.arange(10))
    with pytest.raises(InputError):
        lift.apply(z[:, :3])  # lift uses columns beyond 3
    with pytest.raises(InputError):
        FourierLift(np.array([0, 0]), np.zeros((2, 1)), np.zeros((2, 1)))  # repeated column


@pytest.mark.parametrize("count", [1500, 700])
def test_median_bandwidth_of_rows_is_that_of_the_copied_rows(count: int) -> None:
    """Sampling positions of ``rows`` first gives the same draw, bit for bit, as sampling
    rows of ``X[rows]`` (the monitor's bandwidth without copying every retained row)."""
    from simulator.features.rff import median_bandwidth_of_rows

    X = np.random.default_rng(0).normal(size=(3000, 8))
    rows = np.sort(np.random.default_rng(1).choice(3000, size=count, replace=False))
    copied = median_bandwidth(X[rows], rng=np.random.default_rng(2), max_samples=1000)
    direct = median_bandwidth_of_rows(X, rows, rng=np.random.default_rng(2), max_samples=1000)
    assert direct == copied


def test_transform_is_the_formula_bit_for_bit() -> None:
    """The in-place steps give exactly the floats of ``sqrt(2/m) cos(h omega + phase)``."""
    rng = np.random.default_rng(5)
    rff = RandomFourierFeatures.draw(7, 33, bandwidth=0.8, rng=rng)
    h = rng.normal(size=(50, 7))
    expected = np.sqrt(2.0 / 33) * np.cos(h @ rff.omega + rff.phase)
    np.testing.assert_array_equal(rff.transform(h), expected)


def test_clip_in_place_gives_the_same_floats_and_overwrites_its_input() -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(scale=3.0, size=(40, 9))
    x[:5] *= 1e-3  # rows inside the ball
    expected = clip_to_unit_ball(x)
    out = clip_to_unit_ball(x, in_place=True)
    assert out is x
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    "x",
    [np.ones((3, 2), dtype=np.float32), np.ones((3, 2), dtype=np.int64)],
    ids=["float32", "int64"],
)
def test_clip_in_place_refuses_an_array_it_would_have_to_copy(x: np.ndarray) -> None:
    with pytest.raises(InputError, match="writable float64"):
        clip_to_unit_ball(x, in_place=True)
    frozen = np.ones((3, 2))
    frozen.setflags(write=False)
    with pytest.raises(InputError, match="writable float64"):
        clip_to_unit_ball(frozen, in_place=True)


def test_featurizer_holds_one_feature_matrix() -> None:
    """``clip(rff(h))`` peaks at about one ``(n, m)`` array, not three (numpy's allocations
    are traced): at a million rows of 1,024 features each copy is 8 GB."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(20_000, 8))
    rff = RandomFourierFeatures.draw(8, 256, bandwidth=1.0, rng=rng)
    model = ExtractorWithHead(IdentityBackbone(8), 2, generator=torch.Generator().manual_seed(0))
    featurize = Featurizer(model, rff, torch.device("cpu"))
    h = extract_features(model, x, device=torch.device("cpu"))
    expected = clip_to_unit_ball(np.sqrt(2.0 / 256) * np.cos(h @ rff.omega + rff.phase))
    tracemalloc.start()
    try:
        z = featurize(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(z, expected)
    assert peak < 1.3 * z.nbytes + 2 * x.nbytes, (peak, z.nbytes)


@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_row_norms_in_blocks_are_numpys_bit_for_bit(layout: str) -> None:
    x = np.random.default_rng(8).normal(size=(3000, 129))
    a = {"C": x, "F": np.asfortranarray(x), "strided": x[:, ::2]}[layout]
    np.testing.assert_array_equal(_row_norms(a, rows=777), np.linalg.norm(a, axis=1))
