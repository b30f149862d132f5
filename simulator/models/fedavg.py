"""Federated averaging of the extractor (McMahan et al., AISTATS 2017, Algorithm 1).

Pure functions on state dicts of numpy arrays, so that the in-process loop below and
the Flower client/server adapters share one implementation:

* :func:`local_train` - ``ClientUpdate``: a few local epochs from the global weights;
* :func:`fedavg` - the server's ``w <- sum_k (n_k / n) w_k``;
* :func:`train_federated` - the reference loop (every client takes part every round).

Local optimiser: Adam (Kingma & Ba 2015), re-created at every call of
:func:`local_train`, so no optimiser state crosses a round or leaves a client; only
the weights are averaged. ``weight_decay`` is Adam's coupled L2 penalty. Adam was
chosen over plain SGD because it trains the small extractors here in few rounds
without per-dataset learning-rate tuning.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from simulator.errors import InputError, NumericalError
from simulator.models.backbones import Backbone, ExtractorWithHead, InputKind
from simulator.models.device import seeded_rng
from simulator.seeds import child_torch

StateArrays = dict[str, NDArray[np.float32]]


@dataclass(frozen=True)
class LocalEpochs:
    """A client's local training: ``epochs`` passes over its shard, ``batch_size`` rows a step.

    FedAvg's ``E`` and ``B`` (McMahan et al. 2017), and the optimiser's learning rate ``lr``;
    the same for plain and DP-SGD local training.

    Raises
    ------
    InputError
        ``epochs < 1``, ``batch_size < 1`` or ``lr`` not positive.
    """

    epochs: int
    batch_size: int
    lr: float

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or not self.lr > 0:
            raise InputError(
                f"need epochs >= 1, batch_size >= 1, lr > 0; got "
                f"{self.epochs}, {self.batch_size}, {self.lr}"
            )


@dataclass(frozen=True)
class LocalUpdate:
    """One client's result: new weights (CPU numpy copies), its sample count, its loss.

    ``loss`` is the mean cross-entropy over the examples of the last local epoch.
    """

    state: StateArrays
    num_examples: int
    loss: float


@dataclass(frozen=True)
class FedAvgResult:
    """Outcome of :func:`train_federated`.

    ``round_losses[r]`` is the example-weighted mean of the clients' ``loss`` in round
    ``r``; ``skipped_clients`` lists the indices of clients with no rows.
    """

    arrays: StateArrays
    round_losses: tuple[float, ...]
    seconds: float
    skipped_clients: tuple[int, ...]


def state_to_arrays(model: nn.Module) -> StateArrays:
    """Copy a model's state dict to CPU float32 numpy arrays (the wire format)."""
    arrays: StateArrays = {}
    for name, tensor in model.state_dict().items():
        if not tensor.is_floating_point():
            raise InputError(f"state entry {name!r} is {tensor.dtype}, not floating point")
        arrays[name] = tensor.detach().to("cpu", torch.float32).numpy().copy()
    return arrays


def load_arrays(model: nn.Module, arrays: Mapping[str, NDArray[Any]]) -> None:
    """Copy ``arrays`` into ``model``'s parameters in place (keys and shapes must match)."""
    current = model.state_dict()
    _check_same_layout(set(current), {k: np.shape(v) for k, v in arrays.items()}, current)
    tensors = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in arrays.items()}
    model.load_state_dict(tensors, strict=True)


def _check_same_layout(
    keys: set[str], shapes: Mapping[str, tuple[int, ...]], reference: Mapping[str, Tensor]
) -> None:
    if set(shapes) != keys:
        missing, extra = sorted(keys - set(shapes)), sorted(set(shapes) - keys)
        raise InputError(f"state keys differ: missing {missing}, unexpected {extra}")
    for k, shape in shapes.items():
        if tuple(shape) != tuple(reference[k].shape):
            raise InputError(
                f"{k!r} has shape {tuple(shape)}, expected {tuple(reference[k].shape)}"
            )


def fedavg(updates: Sequence[LocalUpdate]) -> StateArrays:
    """Average client weights, each weighted by its ``num_examples`` (computed in float64).

    Raises
    ------
    InputError
        No updates, a negative count, zero examples in total, or keys/shapes that differ.
    """
    if not updates:
        raise InputError("fedavg needs at least one update")
    counts = [u.num_examples for u in updates]
    if min(counts) < 0 or sum(counts) == 0:
        raise InputError(f"example counts must be >= 0 with a positive total, got {counts}")
    first = updates[0].state
    for i, u in enumerate(updates[1:], start=1):
        if set(u.state) != set(first):
            raise InputError(f"update {i} has keys {sorted(u.state)}, expected {sorted(first)}")
        for k, v in u.state.items():
            if v.shape != first[k].shape:
                raise InputError(f"update {i}: {k!r} has shape {v.shape}, not {first[k].shape}")
    total = float(sum(counts))
    averaged: StateArrays = {}
    for k in first:
        acc = np.zeros(first[k].shape, dtype=np.float64)
        for u in updates:
            acc += u.num_examples * u.state[k].astype(np.float64)
        averaged[k] = (acc / total).astype(np.float32)
    return averaged


def _as_tensor(x: NDArray[Any], kind: InputKind, device: torch.device) -> Tensor:
    if kind == "tokens":
        if not np.issubdtype(np.asarray(x).dtype, np.integer):
            raise InputError(f"token models need integer ids, got dtype {np.asarray(x).dtype}")
        return torch.as_tensor(np.asarray(x, dtype=np.int64), device=device)
    return torch.as_tensor(np.asarray(x, dtype=np.float32), device=device)


def _labels(y: NDArray[Any], n: int, num_classes: int, device: torch.device) -> Tensor:
    y = np.asarray(y)
    if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
        raise InputError(f"labels must be {n} integers, got dtype {y.dtype} shape {y.shape}")
    if n and (y.min() < 0 or y.max() >= num_classes):
        raise InputError(f"labels must lie in [0, {num_classes})")
    return torch.as_tensor(y.astype(np.int64), device=device)


def local_train(  # noqa: PLR0913 (keyword-only hyperparameters, generator and device)
    model: ExtractorWithHead,
    x: NDArray[Any],
    y: NDArray[Any],
    *,
    schedule: LocalEpochs,
    weight_decay: float = 0.0,
    generator: torch.Generator,
    device: torch.device,
    reweigh: Callable[[int], NDArray[np.float64] | None] | None = None,
) -> LocalUpdate:
    """Train ``model`` in place on one client's shard by ``schedule``; return its new weights.

    Mini-batch order (``torch.randperm``) and dropout masks both come from
    ``generator`` (a CPU generator); torch's global RNG is left unchanged. The model
    is moved to ``device``.

    ``reweigh(epoch)``, when given, is called before every epoch and returns one weight per
    row (or None for uniform); the epoch then minimises the weighted cross-entropy
    ``(1/|B|) sum_{i in B} w_i CE_i`` of every mini-batch ``B`` (StableNet's re-weighted
    training loss, Zhang et al., CVPR 2021, eq. 9). Without it the loss is the plain mean.

    Raises
    ------
    InputError
        Empty shard, mismatched ``x``/``y``, labels out of range, negative ``weight_decay``.
    NumericalError
        The loss became non-finite.
    """
    n = len(x)
    if n == 0:
        raise InputError("local_train needs at least one example")
    if weight_decay < 0:
        raise InputError(f"need weight_decay >= 0, got {weight_decay}")
    epochs, batch_size, lr = schedule.epochs, schedule.batch_size, schedule.lr
    model.to(device)
    inputs = _as_tensor(x, model.input_kind, device)
    targets = _labels(y, n, model.num_classes, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    loss_sum = torch.zeros((), device=device)
    with seeded_rng(generator, device):
        for epoch in range(epochs):
            weights = None if reweigh is None else reweigh(epoch)
            w = None
            if weights is not None:
                if weights.shape != (n,) or not np.isfinite(weights).all():
                    raise InputError(f"reweigh must give {n} finite weights, got {weights.shape}")
                w = torch.tensor(np.asarray(weights, dtype=np.float32), device=device)
                model.train()
            order = torch.randperm(n, generator=generator).to(device)
            loss_sum = torch.zeros((), device=device)
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                optimizer.zero_grad(set_to_none=True)
                if w is None:
                    loss = nn.functional.cross_entropy(model(inputs[idx]), targets[idx])
                else:
                    each = nn.functional.cross_entropy(
                        model(inputs[idx]), targets[idx], reduction="none"
                    )
                    loss = (w[idx] * each).mean()
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                loss_sum += loss.detach() * len(idx)
    mean_loss = float(loss_sum) / n
    if not np.isfinite(mean_loss):
        raise NumericalError(f"local training diverged (loss {mean_loss}); lower lr")
    return LocalUpdate(state_to_arrays(model), n, mean_loss)


def extract_features(
    model: ExtractorWithHead | Backbone,
    x: NDArray[Any],
    *,
    batch_size: int = 1024,
    device: torch.device,
) -> NDArray[np.float64]:
    """Features ``h`` of every row of ``x`` (eval mode, no gradients), as float64.

    The model is moved to ``device``; its train/eval mode is restored afterwards.
    """
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    backbone = model.backbone if isinstance(model, ExtractorWithHead) else model
    out = np.empty((len(x), backbone.feature_dim), dtype=np.float64)
    was_training = backbone.training
    model.to(device)
    backbone.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(x), batch_size):
                rows = _as_tensor(x[start : start + batch_size], backbone.input_kind, device)
                out[start : start + len(rows)] = backbone(rows).to("cpu", torch.float64).numpy()
    finally:
        backbone.train(was_training)
    return out


def client_generator(seed: int, round_index: int, client_index: int) -> torch.Generator:
    """The CPU generator of ``client_index`` in round ``round_index`` (both from 0).

    ``child_torch(seed, "fedavg", round_index, client_index)``: every (seed, round, client)
    triple has its own stream (:mod:`simulator.seeds`).
    """
    return child_torch(seed, "fedavg", round_index, client_index)


def train_federated(  # noqa: PLR0913 (keyword-only FedAvg hyperparameters)
    model: ExtractorWithHead,
    client_data: Sequence[tuple[NDArray[Any], NDArray[Any]]],
    *,
    rounds: int,
    local_epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    device: torch.device,
    weight_decay: float = 0.0,
    progress: Callable[[int, float], None] | None = None,
) -> FedAvgResult:
    """In-process FedAvg: every non-empty client trains each round, the server averages.

    ``model`` holds the initial global weights and, on return, the final ones.
    ``progress(r, loss)`` is called after round ``r`` (counted from 1) with that round's
    example-weighted mean client loss.

    Raises
    ------
    InputError
        ``rounds < 1`` or no client has any row.
    """
    if rounds < 1:
        raise InputError(f"rounds must be >= 1, got {rounds}")
    skipped = tuple(i for i, (x, _) in enumerate(client_data) if len(x) == 0)
    if len(skipped) == len(client_data):
        raise InputError("no client has any training rows")
    schedule = LocalEpochs(local_epochs, batch_size, lr)

    def local_round(r: int, global_arrays: StateArrays) -> list[LocalUpdate]:
        updates: list[LocalUpdate] = []
        for c, (x, y) in enumerate(client_data):
            if c in skipped:
                continue
            load_arrays(model, global_arrays)
            updates.append(
                local_train(
                    model,
                    x,
                    y,
                    schedule=schedule,
                    weight_decay=weight_decay,
                    generator=client_generator(seed, r, c),
                    device=device,
                )
            )
        return updates

    losses, seconds = fedavg_rounds(model, rounds, local_round, device=device, progress=progress)
    return FedAvgResult(state_to_arrays(model), losses, seconds, skipped)


#: One FedAvg round seen from the server: ``(round, global weights) -> local updates`` of every
#: client with rows, in client order (McMahan et al. 2017, Algorithm 1, ``ClientUpdate``).
LocalRound = Callable[[int, StateArrays], Sequence[LocalUpdate]]


def fedavg_rounds(
    model: ExtractorWithHead,
    rounds: int,
    local_round: LocalRound,
    *,
    device: torch.device,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[tuple[float, ...], float]:
    """FedAvg from ``model``'s weights; ``model`` ends with the final global weights.

    Each round the server sends the global weights to ``local_round`` and averages the
    updates it returns, ``w <- sum_k (n_k / n) w_k`` (:func:`fedavg`).

    Parameters
    ----------
    model : ExtractorWithHead
        The initial global weights; on return, the final ones.
    rounds : int
        Number of rounds.
    local_round : LocalRound
        The clients' updates of one round.
    device : torch.device
        Where the model is moved.
    progress : callable, optional
        ``progress(r, loss)`` after round ``r`` (counted from 1) with that round's
        example-weighted mean client loss.

    Returns
    -------
    tuple
        The example-weighted mean client loss of every round, and the seconds taken.

    Raises
    ------
    InputError
        A round in which no client has any training row.
    """
    started = time.perf_counter()
    model.to(device)
    global_arrays = state_to_arrays(model)
    losses: list[float] = []
    for r in range(rounds):
        updates = list(local_round(r, global_arrays))
        if not updates:
            raise InputError("no client has any training rows")
        global_arrays = fedavg(updates)
        total = sum(u.num_examples for u in updates)
        losses.append(sum(u.loss * u.num_examples for u in updates) / total)
        if progress is not None:
            progress(r + 1, losses[-1])
    load_arrays(model, global_arrays)
    return tuple(losses), time.perf_counter() - started
