"""``ssd``: Selective Synaptic Dampening (Foster, Schoepf and Brintrup, AAAI 2024).

A network trained normally on every row. Parameter importances are the diagonal of the
empirical Fisher information, ``I_D = E_{i in D}[(d loss_i / d theta)^2]`` over the training
data (computed once, at the trained model, as SSD does) and ``I_Df`` over the samples to forget
(at the current model). Parameters far more important to the forget set than to the data,
``I_Df > alpha I_D``, are dampened: ``theta <- min(lambda I_D / I_Df, 1) theta``. One shot, no
gradient step and no retraining; defaults ``lambda = 1``, ``alpha = 10`` (the paper's). Applied
to a stream, every batch is dampened with its own forget set. There is no formal guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from simulator.models import ExtractorWithHead
from simulator.seeds import child_torch
from simulator.unlearners.base import BaseUnlearner, FitReport, FloatArray, IntArray, TrainingSet
from simulator.unlearners.networks import (
    build_network,
    device_of,
    mean_squared_gradients,
    network_proba,
    train_network,
)
from simulator.unlearners.option_checks import require_positive


@dataclass(frozen=True)
class SsdConfig:
    """``dampening`` lambda and ``selection`` alpha of SSD (Foster et al. 2024, eq. 4-5)."""

    dampening: float = 1.0
    selection: float = 10.0

    def __post_init__(self) -> None:
        require_positive(self, "ssd", "dampening", "selection")


@dataclass
class SsdState:
    """The network and the parameter importances ``I_D`` on the training data."""

    model: ExtractorWithHead
    importance: dict[str, Tensor]


def dampen(
    model: torch.nn.Module,
    importance: dict[str, Tensor],
    forget_importance: dict[str, Tensor],
    *,
    dampening: float,
    selection: float,
) -> tuple[int, int]:
    """Apply SSD's rule in place; returns (parameters dampened, parameters in total)."""
    changed, total = 0, 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            i_d, i_f = importance[name], forget_importance[name]
            selected = i_f > selection * i_d
            factor = torch.clamp(dampening * i_d / torch.where(selected, i_f, 1.0), max=1.0)
            p.mul_(torch.where(selected, factor, 1.0))
            changed += int(selected.sum())
            total += p.numel()
    return changed, total


class Ssd(BaseUnlearner[SsdConfig]):
    """Selective Synaptic Dampening of a network trained on every row."""

    name: ClassVar[str] = "ssd"
    guarantee: ClassVar[str] = "none (heuristic dampening)"
    options_type: ClassVar[type[SsdConfig]] = SsdConfig

    def _fit(self, train: TrainingSet, seed: int) -> tuple[SsdState, FitReport]:
        device = device_of(self.settings)
        model = build_network(self.settings, train, child_torch(seed, "ssd", "init"))
        rows = np.arange(train.n, dtype=np.int64)
        train_network(
            model, train, rows, self.settings, generator=child_torch(seed, "ssd", "train")
        )
        importance = mean_squared_gradients(model, train.x, train.y, device)
        return SsdState(model, importance), FitReport(0.0)

    def _remove(self, ids: IntArray) -> tuple[bool, dict[str, float]]:
        state: SsdState = self._state
        train = self.train
        forget = mean_squared_gradients(
            state.model, train.x[ids], train.y[ids], device_of(self.settings)
        )
        changed, total = dampen(
            state.model,
            state.importance,
            forget,
            dampening=self.options.dampening,
            selection=self.options.selection,
        )
        return False, {"dampened_fraction": changed / max(total, 1)}

    def _predict_proba(self, x: NDArray[Any]) -> FloatArray:
        state: SsdState = self._state
        return network_proba(state.model, x, device_of(self.settings))
