"""One seed of a comparison: the data, the evaluation splits and the removal schedule.

Everything is derived from the scenario exactly as the runner derives it, so every method sees
the same rows, the same test and OOD splits and the same deletion stream:

* data: :func:`simulator.runner.federation.load_dataset`; client shards:
  :func:`simulator.runner.federation.split_clients` (they become ``TrainingSet.groups``, SISA's
  shards);
* evaluation: the in-distribution ``test`` split, the paper's ``label_swap`` split (10% of
  class A's test rows presented as class B: label noise, *not* a distribution shift; it was
  called "OOD" before) (:func:`simulator.runner.evaluation.build_eval_sets`, DecoRemoval
  Sec. 4.2), and the scenario's named shifted splits ``evaluation.shift_splits``
  (:func:`simulator.runner.evaluation.shift_splits`: covariate shifts of the test set, the
  natural ``digits`` shift, the ``remaining`` classes);
* removals: :func:`simulator.stream.generate_stream` grouped by
  :func:`simulator.stream.batches` and validated as ``unlearnsim run`` validates them
  (:func:`simulator.runner.requests.expand`).

Under ``model.extractor_data: public`` the public pool is held out of the methods' sample ids
and handed to them as the training set's ``extractor_pool`` (:func:`training_set`): the
extractor and the RFF bandwidth of every head-based method, the retrain baseline included, are
fitted on it alone, as ``unlearnsim run`` fits them (the encoder's statistics come from it
too: :func:`simulator.runner.federation.load_dataset`).

Under ``model.extractor_data: dp`` every head-based method's extractor, the retrain baseline's
at every retrain included, is trained by the streaming path's DP-FedAvg over the clients
(``ModelConfig.extractor_dp``: ``model.rounds`` rounds of ``model.local_epochs`` DP-SGD
epochs, ``model.dp``'s mechanism, fresh accountants per training), and the RFF bandwidth is
taken on the test split's inputs (``TrainingSet.bandwidth_pool``), as ``unlearnsim run``
does. The sources ``run`` refuses under ``dp`` are refused here with its error
(:func:`simulator.runner.federation.check_dp_extractor`).

Unlike the runner, the comparison trains centrally (no federation; ``dp`` aside): the
extractor's FedAvg budget of ``rounds x local_epochs`` passes becomes as many central epochs.
A batch that crosses a checkpoint is cut there, so every method is evaluated after exactly
that many removals; the schedule ends at the last checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.data.dataset import Dataset
from simulator.errors import ConfigError
from simulator.models.dp_fedavg import DpFedAvgConfig
from simulator.runner.configs import backbone_config, decorrelation_config, head_config
from simulator.runner.evaluation import build_eval_sets, shift_splits
from simulator.runner.featurize import dp_settings
from simulator.runner.federation import (
    check_dp_extractor,
    deletion_stream,
    load_dataset,
    split_clients,
)
from simulator.runner.requests import RowHoldings, expand
from simulator.scenario import Scenario
from simulator.seeds import child_rng
from simulator.stream import DeletionRequest, batches
from simulator.unlearners import ModelConfig, TrainingSet

IntArray = NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class EvalSplit:
    """Inputs and labels of one evaluation split.

    ``labelled`` is False for a split whose labels lie outside the task (the ``remaining``
    classes): there the harness measures what the model predicts, not its accuracy.
    """

    x: NDArray[Any]
    y: IntArray
    labelled: bool = True


@dataclass(frozen=True, eq=False)
class Workload:
    """What every method of one seed is trained, unlearnt and evaluated on.

    ``steps[i]`` are the ids of the ``i``-th :meth:`remove` call; ``evaluate_after`` maps a
    number of completed steps to the removal count it reaches (a checkpoint; 0 = before any
    removal).
    """

    scenario: Scenario
    seed: int
    train: TrainingSet
    splits: dict[str, EvalSplit]
    steps: tuple[IntArray, ...]
    evaluate_after: dict[int, int]
    settings: ModelConfig
    notes: tuple[str, ...]
    split_notes: tuple[str, ...] = ()

    @property
    def checkpoints(self) -> tuple[int, ...]:
        """Removal counts at which the methods are evaluated, 0 first."""
        return tuple(sorted(self.evaluate_after.values()))


def settings_from_scenario(scenario: Scenario) -> ModelConfig:
    """Shared model settings from a scenario's ``model``, ``rff``, ``head``, ``decorrelation``."""
    m = scenario.model
    bandwidth = scenario.rff.bandwidth
    return ModelConfig(
        backbone=backbone_config(scenario),
        epochs=max(1, m.rounds * m.local_epochs),
        batch_size=m.batch_size,
        lr=m.lr,
        rff_dim=scenario.rff.dim,
        rff_bandwidth=None if bandwidth == "median" else float(bandwidth),
        head=head_config(scenario),
        decorrelation=decorrelation_config(scenario),
        device=scenario.device,
        extractor_dp=(
            DpFedAvgConfig(m.rounds, m.local_epochs, dp_settings(scenario))
            if m.extractor_data == "dp"
            else None
        ),
    )


def expand_requests(
    requests: Sequence[DeletionRequest],
    max_batch_requests: int,
    groups: IntArray,
    *,
    num_clients: int | None = None,
) -> list[IntArray]:
    """Sample ids of every deletion batch, in stream order.

    Validated exactly as ``unlearnsim run`` validates them (:func:`simulator.runner.requests
    .expand`): a withdrawal names its client's retained rows, a request naming an unknown or
    already deleted id is rejected whole. ``groups[i]`` is row ``i``'s client (the public pool,
    if any, is one more group that no request names).
    """
    clients = range(int(groups.max()) + 1 if groups.size else 0)
    if num_clients is not None:  # the public pool's group is no client: nobody withdraws it
        clients = range(num_clients)
    holdings = RowHoldings(groups, clients)
    out: list[IntArray] = []
    for batch in batches(requests, max_batch_requests):
        ids, _ = expand(holdings, batch)
        holdings.delete(ids)
        if ids:
            out.append(np.asarray(ids, dtype=np.int64))
    return out


def cut_at_checkpoints(
    batch_ids: Sequence[IntArray], checkpoints: Sequence[int]
) -> tuple[list[IntArray], dict[int, int], list[int]]:
    """Split batches at the checkpoints and stop at the last one that the stream reaches.

    Returns the steps, ``{completed steps: removal count}`` (always ``{0: 0}``; when no
    checkpoint is reached, the end of the stream is the only one) and the checkpoints the
    stream is too short for.
    """
    total = int(sum(b.size for b in batch_ids))
    wanted = sorted({int(c) for c in checkpoints if c > 0})
    reached = [c for c in wanted if c <= total] or ([total] if total else [])
    missed = [c for c in wanted if c > total]
    steps: list[IntArray] = []
    evaluate_after = {0: 0}
    done, pending = 0, list(reached)
    for ids in batch_ids:
        rest = ids
        while pending and rest.size and done + rest.size >= pending[0]:
            take = pending[0] - done
            if take:
                steps.append(rest[:take])
            rest, done = rest[take:], pending[0]
            evaluate_after[len(steps)] = pending.pop(0)
        if not pending:
            break
        if rest.size:
            steps.append(rest)
            done += rest.size
    return steps, evaluate_after, missed


#: Where a public pool's rows come from, by ``model.public_source`` (the workload's note).
POOL_ORIGIN: dict[str, str] = {
    "train_share": "of the training split held out",
    "test_share": "of the test split (evaluated on the rest) taken",
    "digits": "of scikit-learn's digits (28x28) taken",
}


def build_workload(
    scenario: Scenario, seed: int, *, checkpoints: Sequence[int] | None = None
) -> Workload:
    """The workload of ``scenario`` run with root seed ``seed`` (see the module docstring)."""
    sc = scenario.model_copy(update={"seed": seed})
    if sc.stream.source != "scenario":
        raise ConfigError("compare generates the stream from the scenario", "stream.source")
    check_dp_extractor(sc, None)
    ds: Dataset = load_dataset(sc)
    shards, public = split_clients(sc, ds)
    groups = np.full(ds.n_train, len(shards), dtype=np.int64)  # public pool: its own group
    for c, rows in enumerate(shards):
        groups[rows] = c
    notes = []
    if public.size:
        notes.append(
            f"extractor_data public: {public.size} rows {POOL_ORIGIN[sc.model.public_source]} "
            "as the public pool (no client holds one); every method with an extractor, the "
            "retrain baseline included, fits it and the RFF map on the pool alone and its "
            "head on the clients' rows"
        )
    dp = sc.model.extractor_data == "dp"
    if dp:
        z = sc.model.dp
        notes.append(
            f"extractor_data dp: DP-FedAvg of the extractor over the {len(shards)} clients "
            f"({sc.model.rounds} rounds x {sc.model.local_epochs} local epochs of DP-SGD, batch "
            f"{sc.model.batch_size}, noise multiplier {z.noise_multiplier:g}, clipping norm "
            f"{z.max_grad_norm:g}); epsilon computed by the accountants at delta {z.delta:g}; "
            "RFF bandwidth on the test split's inputs"
        )
    train = training_set(ds, groups, public, bandwidth_pool=ds.x_test if dp else None)
    eval_sets = build_eval_sets(
        sc, ds, lambda x: np.asarray(x, dtype=np.float64), child_rng(seed, "ood")
    )
    splits = {"test": EvalSplit(ds.x_test, ds.y_test)}
    if "ood" in eval_sets.base:
        # the scenario's label swap, or a source's own shifted test set (synthetic)
        name = "label_swap" if sc.ood is not None else "source_ood"
        splits[name] = EvalSplit(eval_sets.base["ood"].x, eval_sets.base["ood"].y)
    for name, extra in shift_splits(sc, ds, eval_sets.base["test"]).items():
        kind = next(s.kind for s in sc.evaluation.shift_splits if s.name == name)
        splits[name] = EvalSplit(extra.x, extra.y, labelled=kind != "remaining")
    requests = deletion_stream(sc, ds, shards)
    batch_ids = expand_requests(
        requests, sc.stream.max_batch_requests, groups, num_clients=len(shards)
    )
    wanted = sc.evaluation.checkpoints if checkpoints is None else checkpoints
    if public.size:  # sample ids of the clients-only training set
        batch_ids = [np.searchsorted(client_rows(ds, public), b) for b in batch_ids]
    steps, evaluate_after, missed = cut_at_checkpoints(batch_ids, wanted)
    if missed:
        total = int(sum(b.size for b in batch_ids))
        notes.append(f"stream removes only {total} samples: checkpoints {missed} not reached")
    return Workload(
        sc,
        seed,
        train,
        splits,
        tuple(steps),
        evaluate_after,
        settings_from_scenario(sc),
        tuple(notes),
        tuple(describe_splits(sc, splits)),
    )


def client_rows(ds: Dataset, public: IntArray) -> IntArray:
    """The rows some client holds (every row outside the public pool), in increasing order."""
    return np.setdiff1d(np.arange(ds.n_train, dtype=np.int64), public)


def training_set(
    ds: Dataset,
    groups: IntArray,
    public: IntArray,
    *,
    bandwidth_pool: NDArray[Any] | None = None,
) -> TrainingSet:
    """The methods' training rows; with a public pool, the clients' rows and the pool apart.

    ``bandwidth_pool``: inputs no client holds for the RFF bandwidth (``extractor_data: dp``).

    Without a pool, sample id ``i`` is the dataset's row ``i``. With one
    (``extractor_data: public``) the sample ids are the clients' rows renumbered in order
    (:func:`client_rows`) and the pool is the set's ``extractor_pool``: never a sample id,
    never removed, the only rows an extractor reads.
    """
    if not public.size:
        return TrainingSet(
            ds.x_train,
            ds.y_train,
            ds.num_classes,
            groups=groups,
            vocab_size=ds.vocab_size,
            bandwidth_pool=bandwidth_pool,
        )
    rows = client_rows(ds, public)
    pool = TrainingSet(
        ds.x_train[public], ds.y_train[public], ds.num_classes, vocab_size=ds.vocab_size
    )
    return TrainingSet(
        ds.x_train[rows],
        ds.y_train[rows],
        ds.num_classes,
        groups=groups[rows],
        vocab_size=ds.vocab_size,
        extractor_pool=pool,
    )


def describe_splits(scenario: Scenario, splits: dict[str, EvalSplit]) -> list[str]:
    """One line per evaluation split: its name, rows and what it is."""
    out = []
    for name, split in splits.items():
        rows = f"{split.y.size} rows"
        if name == "test":
            what = "in-distribution test split"
        elif name == "label_swap":
            assert scenario.ood is not None
            what = (
                f"the test split with {scenario.ood.fraction:.0%} of class "
                f"{scenario.ood.source_class}'s rows labelled {scenario.ood.target_class} (the "
                "paper's OOD construction: label noise on unshifted inputs, not a shift)"
            )
        elif name == "source_ood":
            what = "the source's own shifted test set"
        else:
            spec = next(s for s in scenario.evaluation.shift_splits if s.name == name)
            what = {
                "gaussian_noise": f"test inputs + N(0, ({spec.severity} x std of the inputs)^2) "
                "noise (clipped to [0, 1] for images): covariate shift",
                "rotation": f"test images rotated by U(-{90 * (spec.severity or 0):g}, "
                f"{90 * (spec.severity or 0):g}) degrees: covariate shift",
                "digits": "scikit-learn's 8x8 digits of the same classes (other writers and "
                "scanner) upscaled into MNIST's 20x20 box in a 28x28 frame: natural shift",
                "remaining": "rows of the classes outside data.classes (the paper's 'remaining "
                "digits'): no accuracy; what the model predicts on them",
            }[spec.kind]
        out.append(f"`{name}` ({rows}): {what}")
    return out
