"""Named child seeds: every random choice derives from one root seed through a name path.

A run's stages (``child_rng(scenario.seed, "partition")``, ``"rff"``, ``"head"``, ``"stream"``
...) and an unlearner's (``child_rng(fit_seed, "sisa", shard, slice)``) each get a generator
that depends only on the root seed and its name path, never on how much randomness other
stages used: a run stays reproducible when a stage is added or removed, and e.g. SISA's shard
3 slice 2 is trained with the same generator whether it is trained at ``fit`` or retrained
after a deletion.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def child_seed(seed: int, *path: str | int) -> int:
    """A 63-bit seed, a pure function of ``(seed, *path)``."""
    text = ":".join(str(p) for p in (seed, *path))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def child_rng(seed: int, *path: str | int, index: int | None = None) -> np.random.Generator:
    """The numpy generator of one named stage.

    ``index``: the stage's ``index``-th generator, seeded with the two words
    ``[child_seed(seed, *path), index]`` (a :class:`numpy.random.SeedSequence` entropy list), not
    with a longer name path: how the evaluation's timed shifts and shift splits draw (one
    generator per shift), kept so that their committed results stay bit-identical.
    """
    root = child_seed(seed, *path)
    return np.random.default_rng(root if index is None else [root, index])


def child_torch(seed: int, *path: str | int) -> torch.Generator:
    """The CPU torch generator of one named stage."""
    return torch.Generator().manual_seed(child_seed(seed, *path))
