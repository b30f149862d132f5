"""The vmapped per-sample gradients (SSD's importances) equal one backward pass per sample:
the vectorised path is checked against its loop fallback, as opacus checks its grad samplers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simulator.head import HeadConfig
from simulator.models import BackboneConfig
from simulator.unlearners import ModelConfig, TrainingSet
from simulator.unlearners.networks import build_network, mean_squared_gradients


def mlp_settings(hidden: tuple[int, ...]) -> ModelConfig:
    """A small MLP classifier's settings (only the network matters here)."""
    return ModelConfig(
        backbone=BackboneConfig("mlp", feature_dim=4, hidden=hidden),
        epochs=1,
        batch_size=16,
        lr=1e-2,
        rff_dim=8,
        head=HeadConfig(),
        device="cpu",
    )


@pytest.mark.parametrize("hidden", [(), (7,), (9, 5)])
def test_vmap_equals_the_loop(hidden: tuple[int, ...]) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(70, 6)).astype(np.float32)  # more than one gradient chunk (64)
    y = rng.integers(0, 3, size=70).astype(np.int64)
    settings = mlp_settings(hidden)
    model = build_network(settings, TrainingSet(x, y, 3), torch.Generator().manual_seed(0))
    device = torch.device("cpu")
    fast = mean_squared_gradients(model, x, y, device, per_sample="vmap")
    slow = mean_squared_gradients(model, x, y, device, per_sample="loop")
    assert fast.keys() == slow.keys() and fast
    for name in fast:
        torch.testing.assert_close(fast[name], slow[name], rtol=1e-5, atol=1e-8)
    assert any(float(v.abs().sum()) > 0 for v in fast.values())


def test_the_check_can_fail() -> None:
    """A different batch gives different importances: the comparison above is not vacuous."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(20, 6)).astype(np.float32)
    y = rng.integers(0, 2, size=20).astype(np.int64)
    settings = mlp_settings((5,))
    model = build_network(settings, TrainingSet(x, y, 2), torch.Generator().manual_seed(0))
    device = torch.device("cpu")
    a = mean_squared_gradients(model, x, y, device, per_sample="vmap")
    b = mean_squared_gradients(model, x[:10], y[:10], device, per_sample="loop")
    assert any(not torch.allclose(a[k], b[k]) for k in a)
