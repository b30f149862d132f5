"""Tiny data and settings on which every unlearning method fits in a fraction of a second."""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.features.decorrelation import DecorrelationConfig
from simulator.head import HeadConfig
from simulator.models import BackboneConfig
from simulator.unlearners import ModelConfig, TrainingSet

#: Method options that keep each fit and removal well under a second.
FAST: dict[str, dict[str, Any]] = {"cu": {"depth": 5, "hvp_batch": 16}, "sisa": {"slices": 2}}
SETTINGS = ModelConfig(
    backbone=BackboneConfig("mlp", feature_dim=6, hidden=(12,)),
    epochs=2,
    batch_size=16,
    lr=1e-2,
    rff_dim=24,
    head=HeadConfig(),
    decorrelation=DecorrelationConfig(features=6, steps=5),
    device="cpu",
)


def tiny_data(n: int = 60, seed: int = 0) -> TrainingSet:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.7).astype(np.int64)
    return TrainingSet(x, y, 3, groups=np.arange(n) % 3)


DATA = tiny_data()
PROBE = np.random.default_rng(9).normal(size=(7, 5)).astype(np.float32)
