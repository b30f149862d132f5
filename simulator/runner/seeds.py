"""Every random choice of a run derives from ``scenario.seed`` through named child streams.

Named streams keep runs reproducible when a stage is added or removed: each stage's generator
depends only on the root seed and the stage's name, never on how much randomness earlier
stages consumed.
"""

from __future__ import annotations

import hashlib

import numpy as np

STAGES = (
    "data",
    "partition",
    "public",
    "extractor",
    "rff",
    "decorrelation",
    "head",
    "stream",
    "shift",
    "ood",
    "shift_split",
    "evaluation",
)


def stage_seed(root: int, stage: str) -> int:
    """A 63-bit seed for ``stage``, a pure function of (root, stage)."""
    digest = hashlib.sha256(f"{root}:{stage}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def stage_rng(root: int, stage: str) -> np.random.Generator:
    """The generator of one stage."""
    return np.random.default_rng(stage_seed(root, stage))
