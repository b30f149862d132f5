"""Tabular data: a labelled-table type, the CSV reader and a train-fitted encoder.

Encoding (fitted on the training rows only, so no test statistics leak into training):
numeric columns are imputed with the training median and standardised with the training
mean/std; other columns are imputed with the training mode and one-hot encoded over the
training categories (an unseen test category encodes as all zeros).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.data.raw import FeatureSet, RawSource
from simulator.errors import ConfigError, InputError


@dataclass(frozen=True)
class LabelledTable:
    """Raw feature columns (a pandas ``DataFrame``), int64 labels ``0..k-1`` and their names."""

    features: Any
    labels: NDArray[np.int64]
    label_names: tuple[str, ...]


@dataclass(frozen=True)
class NumericColumn:
    """Training statistics of one numeric column."""

    name: str
    median: float
    mean: float
    std: float


@dataclass(frozen=True)
class CategoricalColumn:
    """Training mode and sorted categories of one non-numeric column."""

    name: str
    mode: str
    categories: tuple[str, ...]


@dataclass(frozen=True)
class TableEncoder:
    """Column-wise imputation, standardisation and one-hot encoding fitted on training rows."""

    numeric: tuple[NumericColumn, ...]
    categorical: tuple[CategoricalColumn, ...]

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Output column names (``col`` for numeric, ``col=value`` for one-hot)."""
        return tuple(c.name for c in self.numeric) + tuple(
            f"{c.name}={v}" for c in self.categorical for v in c.categories
        )

    def transform(self, frame: Any) -> NDArray[np.float32]:
        """Encode ``frame`` (which must have the training columns) as float32 ``(n, d)``."""
        names = [c.name for c in self.numeric] + [c.name for c in self.categorical]
        missing = [name for name in names if name not in frame.columns]
        if missing:
            raise InputError(f"table lacks the training columns {missing}")
        blocks: list[NDArray[np.float64]] = []
        for col in self.numeric:
            values = frame[col.name].astype(float).fillna(col.median).to_numpy(dtype=np.float64)
            blocks.append(((values - col.mean) / col.std)[:, None])
        for cat in self.categorical:
            values = frame[cat.name].astype(object).where(frame[cat.name].notna(), cat.mode)
            strings = values.astype(str).to_numpy()
            blocks.append(
                (strings[:, None] == np.asarray(cat.categories)[None, :]).astype(np.float64)
            )
        if not blocks:
            return np.zeros((len(frame), 0), dtype=np.float32)
        return np.hstack(blocks).astype(np.float32)


def _is_numeric(series: Any) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series))


def fit_table_encoder(train: Any) -> TableEncoder:
    """Fit a :class:`TableEncoder` on the training frame ``train``."""
    numeric: list[NumericColumn] = []
    categorical: list[CategoricalColumn] = []
    for name in train.columns:
        series = train[name]
        if _is_numeric(series):
            values = series.astype(float)
            median = float(values.median()) if values.notna().any() else 0.0
            filled = values.fillna(median).to_numpy(dtype=np.float64)
            std = float(filled.std())
            numeric.append(
                NumericColumn(str(name), median, float(filled.mean()), std if std > 0 else 1.0)
            )
        else:
            present = series.dropna().astype(str)
            mode = (
                str(present.value_counts().sort_index(kind="stable").idxmax())
                if len(present)
                else "missing"
            )
            categories = tuple(sorted(set(present) | {mode}))
            categorical.append(CategoricalColumn(str(name), mode, categories))
    return TableEncoder(tuple(numeric), tuple(categorical))


@dataclass(frozen=True)
class TableRawEncoder:
    """RawEncoder fitting a :class:`TableEncoder` on the selected training rows (or ``fit``)."""

    def __call__(self, train: Any, test: Any, ood: Any | None, *, fit: Any = None) -> FeatureSet:
        """Encode the three splits with the encoder fitted on ``fit`` (default ``train``)."""
        encoder = fit_table_encoder(train if fit is None else fit)
        if not encoder.feature_names:
            raise InputError("the table has no feature columns besides the label")
        return FeatureSet(
            encoder.transform(train),
            encoder.transform(test),
            None if ood is None else encoder.transform(ood),
        )


@dataclass(frozen=True)
class LabelCodes:
    """Integer codes ``0..k-1`` of a label column and the value each code stands for."""

    codes: NDArray[np.int64]
    names: tuple[str, ...]


def label_codes(values: Any, source: str) -> LabelCodes:
    """Map a label column to ``0..k-1`` over its sorted distinct values (numbers numerically)."""
    if values.isna().any():
        raise InputError(f"{source}: {int(values.isna().sum())} row(s) have no label")
    distinct = sorted(
        values.unique(), key=lambda v: (0, float(v), "") if _number(v) else (1, 0.0, str(v))
    )
    lookup = {v: k for k, v in enumerate(distinct)}
    codes = values.map(lookup).to_numpy(dtype=np.int64)
    return LabelCodes(codes=codes, names=tuple(str(v) for v in distinct))


def _number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def read_csv_table(path: str | Path, label_column: str) -> LabelledTable:
    """Read a CSV file whose ``label_column`` holds the class of each row.

    Labels are mapped to ``0..k-1`` in sorted order of their values; the other columns are the
    raw features (encoded later by :class:`TableRawEncoder`).

    Raises
    ------
    ConfigError
        If ``label_column`` is not a column (the message lists the columns found).
    InputError
        If the file cannot be read or a row has no label.
    """
    import pandas as pd

    file = Path(path)
    try:
        frame = pd.read_csv(file)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read CSV file {file}: {exc}") from exc
    if label_column not in frame.columns:
        raise ConfigError(
            f"label column {label_column!r} not in {file}; columns found: {list(frame.columns)}",
            "label_column",
        )
    labels = label_codes(frame[label_column], str(file))
    features = frame.drop(columns=[label_column])
    return LabelledTable(features=features, labels=labels.codes, label_names=labels.names)


def table_source(name: str, train: LabelledTable, test: LabelledTable | None = None) -> RawSource:
    """Wrap tables as a tabular :class:`RawSource` (``test=None``: split with test_fraction)."""
    return RawSource(
        name=name,
        x_train=train.features,
        y_train=train.labels,
        x_test=None if test is None else test.features,
        y_test=None if test is None else test.labels,
        class_names=train.label_names,
        modality="tabular",
        encoder=TableRawEncoder(),
    )
