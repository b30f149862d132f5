"""``cu``: certified unlearning for deep networks (Zhang, Dong, Wang and Li, ICML 2024).

Training minimises the mean cross-entropy plus ``(l2 / 2) ||theta||^2`` with Adam and projects
the parameters onto the ball ``||theta|| <= radius`` after every step (the paper's bounded
parameter norm, radius 20). A removal takes one Newton step on the whole network towards the
retained objective ``L_r``:

    theta <- theta - (H_r + gamma I)^{-1} grad L_r(theta),

with ``grad L_r`` computed exactly over the retained rows and the inverse-Hessian-vector
product estimated stochastically by the LiSSA recursion (Agarwal et al. 2017) on minibatches
of retained rows, ``h_0 = g``, ``h_j = g + h_{j-1} - (H_j h_{j-1} + gamma h_{j-1}) / scale``,
``(H_r + gamma I)^{-1} g ~ h_J / scale``. ``gamma`` is the paper's convexifying damping; then
Gaussian noise of std ``noise_std`` is added to every parameter (the output perturbation that
turns the approximation error bound into an (eps, delta) certificate). Defaults follow
``method.md``: gamma 0.01, scale 1000, noise 1e-3, radius 20.

With ``scale = 1000`` the recursion's contraction is ``1 - (lambda + gamma) / scale``: for
``depth`` steps far below ``scale / gamma`` the estimate is close to ``depth / scale`` times
the gradient, i.e. a damped gradient step rather than a full Newton step. We keep the paper's
constants and report this rather than tuning them per dataset. The certificate's constants
(Lipschitz bounds of the network) are not computed here: ``guarantee`` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from simulator.errors import NumericalError
from simulator.models import ExtractorWithHead, seeded_rng
from simulator.seeds import child_rng, child_torch
from simulator.unlearners.base import BaseUnlearner, FitReport, FloatArray, IntArray, TrainingSet
from simulator.unlearners.networks import as_input, build_network, device_of, network_proba
from simulator.unlearners.option_checks import (
    require_non_negative,
    require_positive,
    require_positive_int,
)


@dataclass(frozen=True)
class CuConfig:
    """Hyperparameters of CU (Zhang et al. 2024; defaults from ``method.md`` section 4)."""

    radius: float = 20.0
    l2: float = 5e-4
    damping: float = 0.01
    scale: float = 1000.0
    depth: int = 100
    hvp_batch: int = 128
    noise_std: float = 1e-3

    def __post_init__(self) -> None:
        require_positive(self, "cu", "radius", "scale")
        require_non_negative(self, "cu", "l2", "damping", "noise_std")
        require_positive_int(self, "cu", "depth", "hvp_batch")


@dataclass
class CuState:
    """The network, the seed of every removal's draws and the number of removals so far."""

    model: ExtractorWithHead
    seed: int
    removals: int


def squared_norm(tensors: Sequence[Tensor]) -> Tensor:
    """``sum_i ||t_i||^2`` over a list of tensors (a 0-d tensor)."""
    return torch.stack([(t * t).sum() for t in tensors]).sum()


def project_to_ball(model: nn.Module, radius: float) -> float:
    """Scale all parameters so that their joint L2 norm is at most ``radius``; returns the norm."""
    with torch.no_grad():
        params = list(model.parameters())
        norm = float(torch.sqrt(squared_norm(params)))
        if norm > radius:
            for p in params:
                p.mul_(radius / norm)
    return min(norm, radius)


def lissa(
    hvp: Callable[[list[Tensor]], list[Tensor]],
    g: list[Tensor],
    *,
    damping: float,
    scale: float,
    depth: int,
) -> list[Tensor]:
    """LiSSA estimate of ``(H + damping I)^{-1} g`` (Agarwal, Bullins and Hazan, JMLR 2017).

    ``h_0 = g``, ``h_j = g + h_{j-1} - (hvp(h_{j-1}) + damping h_{j-1}) / scale``; returns
    ``h_depth / scale``. ``hvp`` may use a fresh minibatch Hessian at every call. The recursion
    converges when ``scale`` exceeds the largest eigenvalue of ``H + damping I``; the error
    after ``depth`` steps shrinks like ``(1 - (mu + damping) / scale)^depth`` for the smallest
    eigenvalue ``mu``.
    """
    h = [t.clone() for t in g]
    for _ in range(depth):
        Hh = hvp(h)
        h = [gi + hi - (Hhi + damping * hi) / scale for gi, hi, Hhi in zip(g, h, Hh, strict=True)]
    return [t / scale for t in h]


class CertifiedUnlearning(BaseUnlearner[CuConfig]):
    """Projected training, then a LiSSA Newton step plus Gaussian noise per removal."""

    name: ClassVar[str] = "cu"
    guarantee: ClassVar[str] = "approximate Newton + noise (certificate constants not computed)"
    options_type: ClassVar[type[CuConfig]] = CuConfig

    # ------------------------------------------------------------------ training
    def _fit(self, train: TrainingSet, seed: int) -> tuple[CuState, FitReport]:
        settings, device = self.settings, device_of(self.settings)
        model = build_network(settings, train, child_torch(seed, "cu", "init")).to(device)
        x = as_input(train.x, device)
        y = torch.as_tensor(train.y, dtype=torch.int64, device=device)
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
        generator = child_torch(seed, "cu", "train")
        model.train()
        with seeded_rng(generator, device):  # dropout masks
            for _ in range(settings.epochs):
                order = torch.randperm(train.n, generator=generator).to(device)
                for start in range(0, train.n, settings.batch_size):
                    idx = order[start : start + settings.batch_size]
                    optimizer.zero_grad(set_to_none=True)
                    self._objective(model, x[idx], y[idx]).backward()  # type: ignore[no-untyped-call]
                    optimizer.step()
                    project_to_ball(model, self.options.radius)
        model.eval()
        norm = project_to_ball(model, self.options.radius)
        return CuState(model, seed, 0), FitReport(0.0, {"parameter_norm": norm})

    def _objective(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        penalty = squared_norm(list(model.parameters()))
        loss: Tensor = nn.functional.cross_entropy(model(x), y) + 0.5 * self.options.l2 * penalty
        return loss

    # ------------------------------------------------------------------- removal
    def _remove(self, ids: IntArray) -> tuple[bool, dict[str, float]]:
        state: CuState = self._state
        state.removals += 1
        rows = self.retained_ids
        if rows.size == 0:
            return False, {"step_norm": 0.0}
        device = device_of(self.settings)
        model = state.model
        model.eval()
        params: list[Tensor] = [p for p in model.parameters() if p.requires_grad]
        g = self._retained_gradient(model, params, rows, device)
        rng = child_rng(state.seed, "cu", "lissa", state.removals)
        v = self._lissa(model, params, g, rows, rng, device)
        step = float(torch.sqrt(squared_norm(v)))
        if not np.isfinite(step):
            raise NumericalError("CU's LiSSA recursion diverged; raise cu.scale")
        noise = child_torch(state.seed, "cu", "noise", state.removals)
        with torch.no_grad():
            for p, t in zip(params, v, strict=True):
                p.sub_(t)
                if self.options.noise_std > 0:
                    z = torch.randn(p.shape, generator=noise, dtype=p.dtype).to(p.device)
                    p.add_(self.options.noise_std * z)
        return False, {"step_norm": step}

    def _retained_gradient(
        self, model: nn.Module, params: list[Tensor], rows: IntArray, device: torch.device
    ) -> list[Tensor]:
        """``grad L_r`` exactly: mean cross-entropy over the retained rows plus the L2 term."""
        train = self.train
        total = [torch.zeros_like(p) for p in params]
        batch = 1024
        for start in range(0, rows.size, batch):
            part = rows[start : start + batch]
            x = as_input(train.x[part], device)
            y = torch.as_tensor(train.y[part], dtype=torch.int64, device=device)
            loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
            for acc, gr in zip(total, torch.autograd.grad(loss, params), strict=True):
                acc += gr
        l2 = self.options.l2
        return [acc / rows.size + l2 * p.detach() for acc, p in zip(total, params, strict=True)]

    def _lissa(
        self,
        model: nn.Module,
        params: list[Tensor],
        g: list[Tensor],
        rows: IntArray,
        rng: np.random.Generator,
        device: torch.device,
    ) -> list[Tensor]:
        """``(H_r + gamma I)^{-1} g`` with minibatch Hessians of the retained objective."""
        o, train = self.options, self.train

        def hvp(h: list[Tensor]) -> list[Tensor]:
            part = rng.choice(rows, size=min(o.hvp_batch, rows.size), replace=False)
            x = as_input(train.x[part], device)
            y = torch.as_tensor(train.y[part], dtype=torch.int64, device=device)
            grads = torch.autograd.grad(self._objective(model, x, y), params, create_graph=True)
            dot = torch.stack([(gr * hv).sum() for gr, hv in zip(grads, h, strict=True)]).sum()
            return [t.detach() for t in torch.autograd.grad(dot, params)]

        return lissa(hvp, g, damping=o.damping, scale=o.scale, depth=o.depth)

    def _predict_proba(self, x: NDArray[Any]) -> FloatArray:
        state: CuState = self._state
        return network_proba(state.model, x, device_of(self.settings))
