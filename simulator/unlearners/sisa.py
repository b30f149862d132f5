"""``sisa``: Sharded, Isolated, Sliced and Aggregated training (Bourtoule et al., IEEE S&P 2021).

The training rows are split into ``S`` disjoint shards (in a federation the clients are the
natural shards: ``TrainingSet.groups``), each shard into ``R`` slices. One network per shard
is trained incrementally: stage ``r`` trains on slices ``0..r`` starting from the checkpoint of
stage ``r - 1``, and every stage's weights are kept. A deletion touches only the shards that
hold a deleted id; each of those rewinds to the checkpoint before the earliest slice that held
one and retrains the later stages on its retained rows. Predictions average the shard models'
class probabilities (soft vote over shards that still hold rows).

Epochs per stage are ``ceil(2 E / (R + 1))`` for the settings' ``E`` epochs: stage ``r`` sees
``(r + 1) / R`` of the shard, so a shard's rows are passed over about ``E`` times in total, the
budget of the other deep baselines (the paper's Sec. 4.2 keeps training time comparable the
same way). Every stage's generator is a pure function of (seed, shard, stage), so a retrained
shard equals a shard trained from the start without the deleted rows: SISA unlearning is
exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from simulator.models import ExtractorWithHead, StateArrays, load_arrays, state_to_arrays
from simulator.seeds import child_rng, child_torch
from simulator.unlearners.base import BaseUnlearner, FitReport, FloatArray, IntArray, TrainingSet
from simulator.unlearners.networks import build_network, device_of, network_proba, train_network
from simulator.unlearners.option_checks import require_positive_int


@dataclass(frozen=True)
class SisaConfig:
    """``shards`` S (used when the data has no groups or ``use_groups`` is False), ``slices`` R."""

    shards: int = 5
    slices: int = 4
    use_groups: bool = True

    def __post_init__(self) -> None:
        require_positive_int(self, "sisa", "shards", "slices")


@dataclass
class Shard:
    """One shard: its slices (row ids), the checkpoint after every stage, and its model."""

    index: int
    slices: list[IntArray]
    initial: StateArrays
    checkpoints: list[StateArrays]
    model: ExtractorWithHead
    rows: int


@dataclass
class SisaState:
    """The shards, and the shard and slice that hold every training row."""

    seed: int
    shards: list[Shard]
    row_shard: IntArray
    row_slice: IntArray


def assign_shards(train: TrainingSet, options: SisaConfig, seed: int) -> list[IntArray]:
    """Row ids of every shard: the groups (clients) when allowed, else a seeded random split."""
    if options.use_groups and train.groups is not None:
        return [np.flatnonzero(train.groups == g).astype(np.int64) for g in np.unique(train.groups)]
    order = child_rng(seed, "sisa", "shards").permutation(train.n).astype(np.int64)
    return [np.sort(part) for part in np.array_split(order, options.shards)]


def split_slices(rows: IntArray, slices: int, rng: np.random.Generator) -> list[IntArray]:
    """A seeded random split of a shard's rows into ``slices`` parts (some may be empty)."""
    return [np.sort(part) for part in np.array_split(rng.permutation(rows), slices)]


class Sisa(BaseUnlearner[SisaConfig]):
    """SISA training and exact unlearning by retraining affected shards from checkpoints."""

    name: ClassVar[str] = "sisa"
    guarantee: ClassVar[str] = "exact (affected shards retrained from an unaffected checkpoint)"
    options_type: ClassVar[type[SisaConfig]] = SisaConfig

    @property
    def stage_epochs(self) -> int:
        """Epochs of one stage, ``ceil(2 E / (R + 1))`` (module docstring)."""
        return max(1, math.ceil(2 * self.settings.epochs / (self.options.slices + 1)))

    def _fit(self, train: TrainingSet, seed: int) -> tuple[SisaState, FitReport]:
        parts = assign_shards(train, self.options, seed)
        row_shard = np.full(train.n, -1, dtype=np.int64)
        row_slice = np.full(train.n, -1, dtype=np.int64)
        shards = []
        for s, rows in enumerate(parts):
            slices = split_slices(rows, self.options.slices, child_rng(seed, "sisa", "slices", s))
            for r, ids in enumerate(slices):
                row_shard[ids], row_slice[ids] = s, r
            model = build_network(self.settings, train, child_torch(seed, "sisa", "init", s))
            shard = Shard(s, slices, state_to_arrays(model), [], model, 0)
            self._train_from(shard, 0, seed)
            shards.append(shard)
        info = {"shards": float(len(shards)), "slices": float(self.options.slices)}
        return SisaState(seed, shards, row_shard, row_slice), FitReport(0.0, info)

    def _train_from(self, shard: Shard, stage: int, seed: int) -> int:
        """Retrain ``shard`` from ``stage`` on (stages before keep their checkpoints)."""
        start = shard.initial if stage == 0 else shard.checkpoints[stage - 1]
        load_arrays(shard.model, start)
        del shard.checkpoints[stage:]
        active = self._active
        for r in range(stage, len(shard.slices)):
            rows = np.concatenate(shard.slices[: r + 1])
            rows = rows[active[rows]]
            if rows.size:
                train_network(
                    shard.model,
                    self.train,
                    rows,
                    replace(self.settings, epochs=self.stage_epochs),
                    generator=child_torch(seed, "sisa", "train", shard.index, r),
                )
            shard.checkpoints.append(state_to_arrays(shard.model))
        all_rows = np.concatenate(shard.slices)
        shard.rows = int(active[all_rows].sum())
        return len(shard.slices) - stage

    def _remove(self, ids: IntArray) -> tuple[bool, dict[str, float]]:
        state: SisaState = self._state
        shards_hit, stages = 0, 0
        for s in np.unique(state.row_shard[ids]):
            earliest = int(state.row_slice[ids][state.row_shard[ids] == s].min())
            stages += self._train_from(state.shards[int(s)], earliest, state.seed)
            shards_hit += 1
        return False, {"shards_retrained": float(shards_hit), "stages_retrained": float(stages)}

    def _predict_proba(self, x: NDArray[Any]) -> FloatArray:
        state: SisaState = self._state
        device = device_of(self.settings)
        live = [s for s in state.shards if s.rows > 0]
        if not live:
            k = self.train.num_classes
            return np.full((len(x), k), 1.0 / k)
        total = network_proba(live[0].model, x, device)
        for shard in live[1:]:
            total = total + network_proba(shard.model, x, device)
        return total / len(live)
