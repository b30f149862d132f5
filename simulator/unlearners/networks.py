"""Torch helpers shared by the deep baselines (SISA, DP-SGD, SSD, CU) and the extractors.

A "network" is the project's :class:`~simulator.models.ExtractorWithHead`: the scenario's
backbone with a linear classifier on top, trained end to end with cross-entropy. The deep
baselines unlearn from that whole network; the head-based methods (retrain, CR, DecoRemoval)
use it only to train the extractor and then discard its linear layer (``features.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from simulator.errors import InputError
from simulator.models import (
    ExtractorWithHead,
    LocalEpochs,
    backbones,
    local_train,
    resolve_device,
)
from simulator.unlearners.base import FloatArray, IntArray, ModelConfig, TrainingSet

#: Rows per forward pass at inference and per vmapped chunk of per-sample gradients.
INFERENCE_BATCH = 1024
GRADIENT_CHUNK = 64


def device_of(settings: ModelConfig) -> torch.device:
    """The torch device the settings name (``auto`` falls back to the CPU)."""
    name = settings.device
    if name not in ("auto", "cpu", "cuda"):
        raise InputError(f"unknown device {name!r}")
    return resolve_device(name)  # type: ignore[arg-type]


def build_network(
    settings: ModelConfig, train: TrainingSet, generator: torch.Generator
) -> ExtractorWithHead:
    """The scenario's backbone plus a linear classifier, initialised from ``generator``."""
    return backbones.build_network(
        settings.backbone,
        train.x,
        tokens=train.tokens,
        vocab_size=train.vocab_size,
        num_classes=train.num_classes,
        generator=generator,
    )


def as_input(x: NDArray[Any], device: torch.device) -> Tensor:
    """Token ids as int64, anything else as float32, on ``device``."""
    arr = np.asarray(x)
    if np.issubdtype(arr.dtype, np.integer):
        return torch.as_tensor(arr.astype(np.int64), device=device)
    return torch.as_tensor(arr.astype(np.float32), device=device)


def train_network(
    model: ExtractorWithHead,
    train: TrainingSet,
    rows: IntArray,
    settings: ModelConfig,
    *,
    generator: torch.Generator,
    reweigh: Callable[[int], FloatArray | None] | None = None,
) -> float:
    """Train ``model`` in place on ``rows`` (Adam, cross-entropy); returns the last epoch's loss.

    A thin call of the project's :func:`~simulator.models.local_train` with the settings'
    epochs, batch size and learning rate; ``reweigh`` (epoch -> one weight per row of ``rows``,
    or None) re-weights each epoch's loss.
    """
    if rows.size == 0:
        raise InputError("cannot train a network on zero rows")
    update = local_train(
        model,
        train.x[rows],
        train.y[rows],
        schedule=LocalEpochs(settings.epochs, settings.batch_size, settings.lr),
        generator=generator,
        device=device_of(settings),
        reweigh=reweigh,
    )
    return update.loss


def network_proba(model: nn.Module, x: NDArray[Any], device: torch.device) -> FloatArray:
    """Softmax probabilities ``(n, K)`` of ``model`` in eval mode (mode restored afterwards)."""
    was_training = model.training
    model.eval()
    parts: list[FloatArray] = []
    try:
        with torch.no_grad():
            for start in range(0, len(x), INFERENCE_BATCH):
                logits = model(as_input(x[start : start + INFERENCE_BATCH], device))
                parts.append(torch.softmax(logits.double(), dim=1).cpu().numpy())
    finally:
        model.train(was_training)
    if not parts:
        k = int(getattr(model, "num_classes", 0))
        return np.zeros((0, k))
    return np.concatenate(parts)


def mean_squared_gradients(
    model: nn.Module,
    x: NDArray[Any],
    y: IntArray,
    device: torch.device,
    *,
    per_sample: Literal["auto", "vmap", "loop"] = "auto",
) -> dict[str, Tensor]:
    """Diagonal empirical Fisher ``E_i[(d loss_i / d theta)^2]`` of every parameter.

    Per-sample gradients of the cross-entropy come from ``torch.func`` (vmap of grad) in eval
    mode; token models, whose padding compaction is data dependent, fall back to one backward
    pass per sample (``per_sample="loop"`` forces the fallback, which tests compare with the
    vmap path, as opacus does for its grad samplers). This is the importance of Foster et al.
    (AAAI 2024, SSD, eq. 2-3).
    """
    if len(x) == 0:
        raise InputError("importances need at least one sample")
    was_training = model.training
    model.eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    total = {k: torch.zeros_like(v) for k, v in params.items()}
    inputs, targets = as_input(x, device), torch.as_tensor(y, dtype=torch.int64, device=device)
    try:
        vectorised = per_sample == "vmap" or (
            per_sample == "auto" and not np.issubdtype(x.dtype, np.integer)
        )
        batched = _per_sample_fn(model) if vectorised else None
        for start in range(0, len(x), GRADIENT_CHUNK):
            xb, yb = inputs[start : start + GRADIENT_CHUNK], targets[start : start + GRADIENT_CHUNK]
            if batched is not None:
                grads = batched(params, xb, yb)
                for k in total:
                    total[k] += (grads[k] ** 2).sum(dim=0)
            else:
                for i in range(len(xb)):
                    model.zero_grad(set_to_none=True)
                    nn.functional.cross_entropy(model(xb[i : i + 1]), yb[i : i + 1]).backward()  # type: ignore[no-untyped-call]
                    for k, p in model.named_parameters():
                        if p.grad is not None:
                            total[k] += p.grad.detach() ** 2
                model.zero_grad(set_to_none=True)
    finally:
        model.train(was_training)
    return {k: v / len(x) for k, v in total.items()}


def _per_sample_fn(
    model: nn.Module,
) -> Callable[[dict[str, Tensor], Tensor, Tensor], dict[str, Tensor]]:
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def loss(p: dict[str, Tensor], xi: Tensor, yi: Tensor) -> Tensor:
        out = functional_call(model, (p, buffers), (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(out, yi.unsqueeze(0))

    fn: Callable[[dict[str, Tensor], Tensor, Tensor], dict[str, Tensor]] = vmap(
        grad(loss), in_dims=(None, 0, 0)
    )
    return fn
