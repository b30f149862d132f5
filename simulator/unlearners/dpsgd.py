"""``dpsgd``: a network trained with DP-SGD; removal is a no-op.

Abadi et al., "Deep Learning with Differential Privacy", CCS 2016: per-sample gradients
clipped to ``max_grad_norm``, Gaussian noise of std ``noise_multiplier * max_grad_norm`` added
to their sum, Poisson-sampled batches and an RDP accountant. The guarantee comes from training:
an (eps, delta)-DP model is, by definition, close in distribution to one trained without any
single sample, so a deletion changes nothing (``method.md`` section 4). The per-sample
gradients, noise and accounting are opacus' (``pip install opacus`` with torch pinned); the
optimiser is Adam with the settings' learning rate (DP-Adam), which trains these small
networks in few epochs. ``delta`` is the head's ``delta``, so all methods report one ``delta``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from numpy.typing import NDArray
from torch.utils.data import DataLoader, TensorDataset

from simulator.errors import ConfigError
from simulator.models import ExtractorWithHead, load_arrays, seeded_rng, state_to_arrays
from simulator.models.dp_fedavg import import_opacus
from simulator.seeds import child_torch
from simulator.unlearners.base import BaseUnlearner, FitReport, FloatArray, IntArray, TrainingSet
from simulator.unlearners.networks import as_input, build_network, device_of, network_proba
from simulator.unlearners.option_checks import require_non_negative, require_positive


@dataclass(frozen=True)
class DpsgdConfig:
    """Noise multiplier ``z`` and clipping norm ``C`` of DP-SGD (Abadi et al. 2016, Alg. 1)."""

    noise_multiplier: float = 1.0
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        require_non_negative(self, "dpsgd", "noise_multiplier")
        require_positive(self, "dpsgd", "max_grad_norm")


@dataclass
class DpsgdState:
    """The DP-trained network and the epsilon its training spent."""

    model: ExtractorWithHead
    epsilon: float


def _opacus() -> Any:
    return import_opacus("method 'dpsgd'")


class DpSgd(BaseUnlearner[DpsgdConfig]):
    """DP-SGD training (opacus); :meth:`remove` only records the deletion."""

    name: ClassVar[str] = "dpsgd"
    guarantee: ClassVar[str] = "(eps, delta)-DP training; removal is a no-op"
    options_type: ClassVar[type[DpsgdConfig]] = DpsgdConfig

    def _fit(self, train: TrainingSet, seed: int) -> tuple[DpsgdState, FitReport]:
        opacus = _opacus()
        settings, device = self.settings, device_of(self.settings)
        model = build_network(settings, train, child_torch(seed, "dpsgd", "init"))
        problems = opacus.validators.ModuleValidator.validate(model, strict=False)
        if problems:
            raise ConfigError(f"opacus cannot train this backbone: {problems[0]}", "model.backbone")
        model.to(device).train()
        data = TensorDataset(
            as_input(train.x, device), torch.as_tensor(train.y, dtype=torch.int64, device=device)
        )
        loader = DataLoader(data, batch_size=min(settings.batch_size, train.n), shuffle=True)
        optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Ss]ecure RNG.*")
            warnings.filterwarnings("ignore", message=".*full backward hook.*")
            engine = opacus.PrivacyEngine(accountant="rdp")
            private, optimizer, loader = engine.make_private(
                module=model,
                optimizer=optimizer,
                data_loader=loader,
                noise_multiplier=self.options.noise_multiplier,
                max_grad_norm=self.options.max_grad_norm,
                noise_generator=child_torch(seed, "dpsgd", "noise"),
            )
            # Poisson sampling draws from torch's global generator: seed it for this block only.
            with seeded_rng(child_torch(seed, "dpsgd", "batches"), device):
                for _ in range(settings.epochs):
                    for xb, yb in loader:
                        if len(yb) == 0:
                            continue
                        optimizer.zero_grad(set_to_none=True)
                        loss = torch.nn.functional.cross_entropy(private(xb), yb)
                        loss.backward()  # type: ignore[no-untyped-call]
                        optimizer.step()
        epsilon = float(engine.get_epsilon(settings.head.delta))
        clean = build_network(settings, train, child_torch(seed, "dpsgd", "init"))
        load_arrays(clean, state_to_arrays(model))  # drop opacus' hooks and wrappers
        clean.eval()
        info = {"epsilon": epsilon, "delta": settings.head.delta}
        return DpsgdState(clean, epsilon), FitReport(0.0, info)

    def _remove(self, ids: IntArray) -> tuple[bool, dict[str, float]]:
        return False, {}

    def _predict_proba(self, x: NDArray[Any]) -> FloatArray:
        state: DpsgdState = self._state
        return network_proba(state.model, x, device_of(self.settings))
