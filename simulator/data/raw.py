"""From a source's raw pools to a finished :class:`~simulator.data.dataset.Dataset`.

A loader returns a :class:`RawSource`: rows that may still be sentences or data-frame records,
their labels, and an encoder.  :func:`assemble` then does the steps every source shares, in a
fixed order so that one seed gives one dataset: split (when the source has no official test
split), restrict to ``classes`` (others become OOD), subsample, featurise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from simulator.data.dataset import Dataset, Modality
from simulator.data.selection import IntArray, select_classes, stratified_sample, stratified_split
from simulator.errors import ConfigError
from simulator.scenario.data_spec import DataSpec

Rows = TypeVar("Rows")


@dataclass(frozen=True)
class LoadRequest:
    """One call of :func:`simulator.data.sources.load_source`, as its loader receives it.

    Attributes
    ----------
    spec : DataSpec
        The scenario's ``data`` section: source, path, classes, caps, text, synthetic.
    rng : numpy.random.Generator
        Drives the split, the subsamples and the synthetic draw.
    cache_dir : str or None
        Embedding cache root of the text sources (None: ``~/.cache/unlearnsim``).
    fit_rows : callable or None
        Given the number of selected training rows, the ones an encoder may fit its statistics
        on (a public pool: ``model.extractor_data: public``); None: every training row.
    public_rows : PublicRows or None
        A public pool from a declared source other than the training rows
        (``model.public_source``: ``test_share``, ``digits``): appended after the training
        rows, and the only rows the encoder fits on (``fit_rows`` is then None).
    """

    spec: DataSpec
    rng: np.random.Generator
    cache_dir: str | None = None
    fit_rows: Callable[[int], IntArray] | None = None
    public_rows: PublicRows | None = None


#: Rows and their labels (``x`` an array or a data frame).
Labelled = tuple[Any, IntArray]


class PublicRows(Protocol):
    """Draws a public pool once the splits are selected (:mod:`simulator.data.public_pool`)."""

    def __call__(self, test: Labelled, class_labels: tuple[int, ...]) -> tuple[Labelled, Labelled]:
        """``(pool, test rows left)`` from the selected ``test`` rows (labels ``0..k-1``).

        ``class_labels``: the source's label of each class index.
        """
        ...


@dataclass(frozen=True)
class FeatureSet:
    """Featurised rows of the three splits (``x_ood`` is ``None`` when there is no OOD set)."""

    x_train: NDArray[Any]
    x_test: NDArray[Any]
    x_ood: NDArray[Any] | None
    vocab_size: int | None = None


class RawEncoder(Protocol):
    """Turns selected raw rows into arrays; fitted on training rows only.

    ``fit`` (a subset of ``train``: the public pool) is what an encoder that fits statistics
    (a vocabulary, column means) fits them on; None: all of ``train``.
    """

    def __call__(self, train: Any, test: Any, ood: Any | None, *, fit: Any = None) -> FeatureSet:
        """Featurise the selected rows of each split."""
        ...


@dataclass(frozen=True)
class Splits(Generic[Rows]):
    """Labelled rows as a reader returns them.

    ``x_test``/``y_test`` are ``None`` when the files hold no test split.
    """

    x_train: Rows
    y_train: IntArray
    x_test: Rows | None
    y_test: IntArray | None
    class_names: tuple[str, ...]


@dataclass(frozen=True)
class RawSource:
    """A source's rows before the shared selection steps.

    ``x_*`` are numpy arrays (rows first), object arrays of sentences or pandas data frames;
    ``x_test``/``y_test`` are ``None`` when the source has no official test split (it is then
    split with ``test_fraction``).  ``encoder`` is ``None`` when ``x_*`` are already the final
    float arrays.  ``ood_x``/``ood_y`` hold an OOD set the source builds itself (synthetic).
    ``y_train``/``y_test`` are the source's own label ids ``0..len(class_names) - 1`` (the label
    values of its files, or a table's codes), ``class_names[k]`` naming label ``k``: they become
    ``Dataset.class_labels``, the ids a scenario's classes are given in.
    """

    name: str
    x_train: Any
    y_train: IntArray
    class_names: tuple[str, ...]
    modality: Modality
    x_test: Any | None = None
    y_test: IntArray | None = None
    image_shape: tuple[int, int, int] | None = None
    encoder: RawEncoder | None = None
    ood_x: NDArray[Any] | None = None
    ood_y: IntArray | None = None


def raw_source(
    name: str,
    splits: Splits[Rows],
    rows: Callable[[Rows], Any],
    *,
    modality: Modality,
    encoder: RawEncoder,
    image_shape: tuple[int, int, int] | None = None,
) -> RawSource:
    """``splits`` as the :class:`RawSource` ``name``, each split's rows passed through ``rows``."""
    return RawSource(
        name=name,
        x_train=rows(splits.x_train),
        y_train=splits.y_train,
        x_test=None if splits.x_test is None else rows(splits.x_test),
        y_test=splits.y_test,
        class_names=splits.class_names,
        modality=modality,
        image_shape=image_shape,
        encoder=encoder,
    )


def require_path(spec: DataSpec, what: str) -> Path:
    """``spec.path`` as a :class:`~pathlib.Path`; a ConfigError naming ``what`` if unset."""
    if spec.path is None:
        raise ConfigError(f"source {spec.source!r} needs 'path': {what}", "path")
    return Path(spec.path).expanduser()


def take(rows: Any, index: IntArray) -> Any:
    """Rows ``index`` of an array or a data frame (frames get a fresh 0..n-1 index)."""
    if hasattr(rows, "iloc"):
        return rows.iloc[index].reset_index(drop=True)
    return rows[index]


def concat(first: Any, second: Any) -> Any:
    """Rows of ``first`` then rows of ``second`` (arrays, or frames with a fresh index)."""
    if hasattr(first, "iloc"):
        import pandas as pd

        return pd.concat([first, second], ignore_index=True)
    return np.concatenate([first, second])


def assemble(raw: RawSource, request: LoadRequest) -> Dataset:
    """Split, restrict to ``spec.classes``, subsample and featurise ``raw``.

    ``max_test`` caps the OOD set too.  The OOD set built from ``classes`` holds the rows of the
    other classes from *both* pools (none of them is ever trained on) with their original labels.
    """
    spec, rng = request.spec, request.rng
    x_train, y_train = raw.x_train, raw.y_train
    if raw.x_test is None or raw.y_test is None:
        split = stratified_split(y_train, spec.test_fraction, rng)
        x_test, y_test = take(x_train, split.test), y_train[split.test]
        x_train, y_train = take(x_train, split.train), y_train[split.train]
    else:
        x_test, y_test = raw.x_test, raw.y_test
    x_ood: Any | None = raw.ood_x
    y_ood: IntArray | None = raw.ood_y
    class_names = raw.class_names
    class_labels = tuple(range(len(raw.class_names)))  # a raw label is the source's own id
    if spec.classes is not None:
        if raw.ood_x is not None:
            raise ConfigError(
                f"source {raw.name!r} builds its own OOD set; drop 'classes'", "classes"
            )
        sel = select_classes(y_train, y_test, spec.classes, len(raw.class_names))
        x_ood = concat(take(x_train, sel.ood_train), take(x_test, sel.ood_test))
        y_ood = np.concatenate([y_train[sel.ood_train], y_test[sel.ood_test]]).astype(np.int64)
        x_train, y_train = take(x_train, sel.train), sel.relabel(y_train[sel.train])
        x_test, y_test = take(x_test, sel.test), sel.relabel(y_test[sel.test])
        class_names = tuple(raw.class_names[c] for c in sel.classes)
        class_labels = sel.classes
    if spec.max_train is not None:
        keep = stratified_sample(y_train, spec.max_train, rng)
        x_train, y_train = take(x_train, keep), y_train[keep]
    if spec.max_test is not None:
        keep = stratified_sample(y_test, spec.max_test, rng)
        x_test, y_test = take(x_test, keep), y_test[keep]
        if y_ood is not None and len(y_ood) > 0:
            keep = stratified_sample(y_ood, spec.max_test, rng)
            x_ood, y_ood = take(x_ood, keep), y_ood[keep]
    if y_ood is not None and len(y_ood) == 0:
        x_ood, y_ood = None, None
    public_rows = None
    if request.public_rows is not None:
        (x_train, y_train), (x_test, y_test), public_rows = _append_public(
            request.public_rows, (x_train, y_train), (x_test, y_test), class_labels
        )
    fit_rows = request.fit_rows
    fit = None if fit_rows is None else take(x_train, fit_rows(len(y_train)))
    if public_rows is not None:
        fit = take(x_train, public_rows)
    features = _featurise(raw, x_train, x_test, x_ood, fit)
    return Dataset(
        name=raw.name,
        x_train=features.x_train,
        y_train=y_train.astype(np.int64),
        x_test=features.x_test,
        y_test=y_test.astype(np.int64),
        num_classes=len(class_names),
        modality=raw.modality,
        class_names=class_names,
        class_labels=class_labels,
        image_shape=raw.image_shape,
        vocab_size=features.vocab_size,
        ood_x=features.x_ood,
        ood_y=None if y_ood is None else y_ood.astype(np.int64),
        public_rows=public_rows,
    )


def _append_public(
    draw: PublicRows, train: Labelled, test: Labelled, class_labels: tuple[int, ...]
) -> tuple[Labelled, Labelled, IntArray]:
    """The training rows with the drawn pool appended, the test rows left, and the pool's ids.

    The pool's ids are ``n .. n + k - 1`` after the ``n`` source training rows: sample ids of
    the source's rows do not move, and no client is ever given a pool row.
    """
    (x_pool, y_pool), rest = draw(test, class_labels)
    n = len(train[1])
    rows = np.arange(n, n + len(y_pool), dtype=np.int64)
    merged = (concat(train[0], x_pool), np.concatenate([train[1], y_pool]).astype(np.int64))
    return merged, rest, rows


def _featurise(raw: RawSource, train: Any, test: Any, ood: Any | None, fit: Any) -> FeatureSet:
    if raw.encoder is not None:
        return raw.encoder(train, test, ood, fit=fit)

    def as_float(x: Any) -> NDArray[np.float32]:
        return np.ascontiguousarray(x, dtype=np.float32)

    return FeatureSet(as_float(train), as_float(test), None if ood is None else as_float(ood))
