"""A small labelled table with numeric, gapped and categorical columns (provenance tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: Rows of the table.
ROWS = 300


def write_table(path: Path, *, perturb: np.ndarray | None = None) -> None:
    """A labelled table with numeric (one with gaps) and categorical columns.

    ``perturb``: raw row ids whose features (never their labels) are replaced.
    """
    import pandas as pd

    rng = np.random.default_rng(0)
    label = rng.integers(0, 2, ROWS)
    frame = pd.DataFrame(
        {
            "x1": rng.normal(label, 1.0),
            "x2": np.where(rng.random(ROWS) < 0.1, np.nan, rng.normal(0, 2, ROWS)),
            "kind": rng.choice(["a", "b", "c"], ROWS),
            "label": label,
        }
    )
    if perturb is not None:
        frame.loc[perturb, "x1"] = frame.loc[perturb, "x1"] * 7 + 100
        frame.loc[perturb, "x2"] = np.nan
        frame.loc[perturb, "kind"] = "only-in-client-rows"
    frame.to_csv(path, index=False)
