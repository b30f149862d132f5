"""DP-FedAvg of the extractor: sample-level DP-SGD on every client, one accountant per client.

Each client's ``ClientUpdate`` (McMahan et al. 2017, Algorithm 1) is DP-SGD (Abadi et al.,
CCS 2016, Algorithm 1): Poisson-sampled minibatches of expected size ``B`` (sampling rate
``q = 1 / ceil(n_c / B)``), per-sample gradients clipped to ``C = max_grad_norm``, Gaussian
noise of std ``noise_multiplier * C`` added to their sum, the noisy mean handed to Adam
(DP-Adam, as the ``dpsgd`` baseline). The per-sample gradients, clipping, noise and the
accounting are opacus' (an optional extra: ``pip install .[dpsgd]``).

**Every trained parameter is noised.** The network trained is the whole
:class:`~simulator.models.ExtractorWithHead`: the backbone *and* the temporary classifier
layer on top of it go through the same DP optimiser, so no parameter (Guo et al.'s un-noised
auxiliary head) is fitted on private rows without noise; a module opacus cannot compute
per-sample gradients for, or any non-parameter state (a BatchNorm's running statistics), is
refused before training (:func:`check_dp_trainable`).

**One accountant per client over all rounds.** A client's rounds are an adaptive composition
of subsampled Gaussian mechanisms on *its* rows; each client keeps one opacus
``RDPAccountant`` (:class:`ClientAccountants`) that every DP-SGD step of every round is
recorded in (Mironov 2017, RDP composes additively; Mironov et al. 2019 for the subsampled
Gaussian). Flower's opacus example builds a privacy engine per round, so its epsilon covers
one round only; here the accountant is never rebuilt, and ``epsilon`` grows with the rounds.

**The per-row guarantee is the max over clients.** A row lives on exactly one client, and
only that client's DP-SGD reads it; the other clients' updates do not depend on it, and
FedAvg and everything after it are post-processing of the clients' outputs. Changing one row
of client ``c`` therefore changes the released extractor by at most client ``c``'s
``(epsilon_c, delta)`` (parallel composition over disjoint shards, McSherry 2009); since the
row may be on any client, the extractor is ``(max_c epsilon_c, delta)``-DP per row.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from simulator.errors import ConfigError, DataUnavailableError, InputError, NumericalError
from simulator.models.backbones import ExtractorWithHead
from simulator.models.device import seeded_rng
from simulator.models.fedavg import (
    LocalEpochs,
    LocalUpdate,
    StateArrays,
    _as_tensor,
    _labels,
    client_generator,
    fedavg_rounds,
    load_arrays,
    state_to_arrays,
)
from simulator.seeds import child_torch

#: One accountant entry: ``(noise_multiplier, sample_rate, steps)`` (opacus' RDP history).
HistoryEntry = tuple[float, float, int]


@dataclass(frozen=True)
class DpSgdSettings:
    """DP-SGD's noise multiplier ``z``, clipping norm ``C`` and the accounted ``delta``."""

    noise_multiplier: float = 1.0
    max_grad_norm: float = 1.0
    delta: float = 1e-5

    def __post_init__(self) -> None:
        if not self.noise_multiplier > 0 or not math.isfinite(self.noise_multiplier):
            raise InputError(f"noise_multiplier must be > 0, got {self.noise_multiplier}")
        if not self.max_grad_norm > 0 or not math.isfinite(self.max_grad_norm):
            raise InputError(f"max_grad_norm must be > 0, got {self.max_grad_norm}")
        if not 0 < self.delta < 1:
            raise InputError(f"delta must lie in (0, 1), got {self.delta}")


def import_opacus(needed_by: str = "model.extractor_data: dp") -> Any:
    """The ``opacus`` module, or a clear error naming what needs it and how to install it."""
    try:
        import opacus
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise DataUnavailableError(
            f"{needed_by} needs opacus: pip install '.[dpsgd]' (torch stays at 2.13.0)"
        ) from exc
    return opacus


@dataclass
class ClientAccountants:
    """One RDP accountant per client, kept for every round of the extractor's training.

    ``histories`` is the plain-data form (client -> opacus RDP history), what a checkpoint or
    a Flower message carries; :meth:`accountant` hands out the live accountant of a client.
    """

    histories: dict[int, list[HistoryEntry]] = field(default_factory=dict)
    _live: dict[int, Any] = field(default_factory=dict, repr=False)

    def accountant(self, client: int) -> Any:
        """Client ``client``'s opacus ``RDPAccountant`` (created empty at its first round)."""
        if client not in self._live:
            acc = import_opacus().accountants.RDPAccountant()
            acc.history = [tuple(h) for h in self.histories.get(client, [])]
            self._live[client] = acc
        return self._live[client]

    def history(self, client: int) -> list[HistoryEntry]:
        """Client ``client``'s accountant history (empty: it never trained)."""
        if client in self._live:
            return [tuple(h) for h in self._live[client].history]
        return list(self.histories.get(client, []))

    def set_history(self, client: int, history: list[HistoryEntry]) -> None:
        """Replace client ``client``'s accountant by one with ``history`` (a remote client's)."""
        self._live.pop(client, None)
        self.histories[client] = [(float(z), float(q), int(k)) for z, q, k in history]

    def clients(self) -> list[int]:
        """Every client with an accountant."""
        return sorted(set(self.histories) | set(self._live))

    def epsilon(self, client: int, delta: float) -> float:
        """Client ``client``'s epsilon at ``delta`` over every step it took (RDP -> DP)."""
        acc = self.accountant(client)
        return float(acc.get_epsilon(delta)) if acc.history else 0.0

    def epsilons(self, delta: float) -> dict[int, float]:
        """Every client's epsilon at ``delta``."""
        return {c: self.epsilon(c, delta) for c in self.clients()}

    def max_epsilon(self, delta: float) -> float:
        """The extractor's per-row epsilon: the max over clients (module docstring)."""
        return max(self.epsilons(delta).values(), default=0.0)


def history_to_json(history: list[HistoryEntry]) -> str:
    """An accountant history as a JSON string (what a Flower message carries)."""
    return json.dumps([[float(z), float(q), int(k)] for z, q, k in history])


def history_from_json(text: str) -> list[HistoryEntry]:
    """The inverse of :func:`history_to_json`.

    Raises
    ------
    InputError
        Not a list of ``[noise_multiplier, sample_rate, steps]`` entries.
    """
    try:
        entries = json.loads(text)
        out = [(float(z), float(q), int(k)) for z, q, k in entries]
    except (ValueError, TypeError) as exc:
        raise InputError(f"not an accountant history: {text[:80]!r}") from exc
    if any(not (z > 0 and 0 < q <= 1 and k >= 0) for z, q, k in out):
        raise InputError(f"accountant history out of range: {text[:80]!r}")
    return out


def check_dp_trainable(model: nn.Module) -> None:
    """Refuse a network whose trained state opacus would not all noise.

    Raises
    ------
    ConfigError
        A module without per-sample gradients in opacus (BatchNorm, a plain LSTM or
        attention), or state that is not a trainable parameter (a buffer such as running
        statistics would be fitted on private rows without noise).
    """
    opacus = import_opacus()
    problems = opacus.validators.ModuleValidator.validate(model, strict=False)
    if problems:
        raise ConfigError(
            f"extractor_data dp: opacus cannot train this backbone: {problems[0]}",
            "model.backbone",
        )
    params = {name for name, p in model.named_parameters() if p.requires_grad}
    other = sorted(set(model.state_dict()) - params)
    if other:
        raise ConfigError(
            f"extractor_data dp: state {other[:3]} is not a noised parameter", "model.backbone"
        )


@contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]ecure RNG.*")
        warnings.filterwarnings("ignore", message=".*full backward hook.*")
        warnings.filterwarnings("ignore", message=".*Optimal order.*")
        yield


@dataclass(frozen=True)
class DpLocalRun:
    """One client's DP-SGD round: its update and the parameters its optimiser noised."""

    update: LocalUpdate
    noised: tuple[str, ...]


def dp_local_train(  # noqa: PLR0913 (keyword-only hyperparameters, generators, accountant)
    model: ExtractorWithHead,
    x: NDArray[Any],
    y: NDArray[Any],
    *,
    schedule: LocalEpochs,
    settings: DpSgdSettings,
    accountant: Any,
    generator: torch.Generator,
    noise_generator: torch.Generator,
    device: torch.device,
) -> DpLocalRun:
    """DP-SGD ``ClientUpdate`` of one client in place on ``model``; steps go to ``accountant``.

    Poisson sampling (``q = 1 / ceil(n / batch_size)``) and dropout draw from ``generator``,
    the Gaussian noise from ``noise_generator``; torch's global RNG is left unchanged. Every
    optimiser step is recorded in the client's ``accountant`` (kept across rounds by
    :class:`ClientAccountants`): it is attached to this round's optimiser, never rebuilt.

    Raises
    ------
    InputError
        Empty shard.
    ConfigError
        A network opacus cannot noise entirely (:func:`check_dp_trainable`).
    NumericalError
        The loss became non-finite.
    """
    n = len(x)
    if n == 0:
        raise InputError("dp_local_train needs at least one example")
    epochs, batch_size, lr = schedule.epochs, schedule.batch_size, schedule.lr
    check_dp_trainable(model)
    opacus = import_opacus()
    model.to(device).train()
    data = TensorDataset(
        _as_tensor(x, model.input_kind, device), _labels(y, n, model.num_classes, device)
    )
    loader = DataLoader(data, batch_size=min(batch_size, n))
    sample_rate = 1.0 / len(loader)
    wrapped = opacus.GradSampleModule(model)
    optimizer = opacus.optimizers.DPOptimizer(
        torch.optim.Adam(wrapped.parameters(), lr=lr),
        noise_multiplier=settings.noise_multiplier,
        max_grad_norm=settings.max_grad_norm,
        expected_batch_size=max(1, round(sample_rate * n)),
        generator=noise_generator,
    )
    optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=sample_rate))
    poisson = opacus.data_loader.DPDataLoader.from_data_loader(loader, generator=generator)
    names = {id(p): name for name, p in model.named_parameters()}
    noised = tuple(sorted(names[id(p)] for p in optimizer.params))
    loss_sum, seen = 0.0, 0
    try:
        with _quiet(), seeded_rng(generator, device):
            for _ in range(epochs):
                loss_sum, seen = 0.0, 0
                for xb, yb in poisson:
                    optimizer.zero_grad(set_to_none=True)
                    # the batch mean (0 for an empty Poisson batch: still a noised, counted step)
                    total = nn.functional.cross_entropy(wrapped(xb), yb, reduction="sum")
                    (total / max(len(yb), 1)).backward()  # type: ignore[no-untyped-call]
                    optimizer.step()
                    loss_sum += float(total.detach())
                    seen += len(yb)
    finally:
        wrapped._close()
    mean_loss = loss_sum / max(seen, 1)
    if not np.isfinite(mean_loss):
        raise NumericalError(f"DP local training diverged (loss {mean_loss}); lower lr")
    return DpLocalRun(LocalUpdate(state_to_arrays(model), n, mean_loss), noised)


@dataclass(frozen=True)
class DpFedAvgConfig:
    """DP-FedAvg of an extractor: ``rounds`` of ``local_epochs`` DP-SGD epochs on every client."""

    rounds: int
    local_epochs: int
    sgd: DpSgdSettings = field(default_factory=DpSgdSettings)

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.local_epochs < 1:
            raise InputError(
                f"need rounds >= 1 and local_epochs >= 1, got {self.rounds}, {self.local_epochs}"
            )


@dataclass(frozen=True, eq=False)
class DpFedAvgResult:
    """What :func:`train_dp_federated` released: the accountants and each round's loss.

    ``epsilon`` is the extractor's per-row guarantee at ``delta`` (the max over clients of
    their accountants over all rounds, module docstring).
    """

    accountants: ClientAccountants
    delta: float
    round_losses: tuple[float, ...]
    seconds: float

    @property
    def epsilon(self) -> float:
        """The extractor's per-row epsilon at :attr:`delta` (the max over clients)."""
        return self.accountants.max_epsilon(self.delta)


def train_dp_federated(  # noqa: PLR0913 (keyword-only DP-FedAvg hyperparameters)
    model: ExtractorWithHead,
    client_data: Sequence[tuple[NDArray[Any], NDArray[Any]]],
    *,
    config: DpFedAvgConfig,
    batch_size: int,
    lr: float,
    seed: int,
    device: torch.device,
) -> DpFedAvgResult:
    """In-process DP-FedAvg from fresh accountants; ``model`` ends with the final weights.

    Every non-empty client runs :func:`dp_local_train` each round from the global weights,
    with the generators of the streaming path's ``ClientUpdate``
    (``client_generator(seed, round, client)`` for sampling and dropout,
    ``child_torch(seed, "dp-noise", round, client)`` for the noise), its steps recorded in
    its own accountant of one :class:`ClientAccountants` kept over every round; the server
    averages (:func:`~simulator.models.fedavg.fedavg_rounds`).

    Raises
    ------
    InputError
        No client has any row.
    """
    if not any(len(x) for x, _ in client_data):
        raise InputError("no client has any training rows")
    schedule = LocalEpochs(config.local_epochs, batch_size, lr)
    accountants = ClientAccountants()

    def local_round(r: int, global_arrays: StateArrays) -> list[LocalUpdate]:
        updates = []
        for c, (x, y) in enumerate(client_data):
            if not len(x):
                continue
            load_arrays(model, global_arrays)
            run = dp_local_train(
                model,
                x,
                y,
                schedule=schedule,
                settings=config.sgd,
                accountant=accountants.accountant(c),
                generator=client_generator(seed, r, c),
                noise_generator=child_torch(seed, "dp-noise", r, c),
                device=device,
            )
            updates.append(run.update)
        return updates

    losses, seconds = fedavg_rounds(model, config.rounds, local_round, device=device)
    return DpFedAvgResult(accountants, config.sgd.delta, losses, seconds)
