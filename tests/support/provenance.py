"""What the provenance tests share: a small labelled table, and what is fitted before the head."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

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


def fitted_before_the_head(fed: Any) -> dict[str, np.ndarray]:
    """Every array fitted before the head: the extractor's weights and the RFF map."""
    torch.set_num_threads(1)
    out = {
        f"extractor.{k}": v.detach().cpu().numpy()
        for k, v in fed.featurizer.model.state_dict().items()
    }
    out.update({f"rff.{k}": v for k, v in fed.featurizer.rff.to_arrays().items()})
    return out
