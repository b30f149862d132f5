"""Evaluation sets of a run and the injected shifts that act on them over time.

Splits (``metrics.md``, "Utility"): ``test`` (in distribution), ``ood`` (the paper's label-swap
construction, or a source's own shifted set), ``forget`` (every sample deleted so far) and
``retain`` (a fixed sample of retained training rows). Shifts from the scenario start at their
tick and stay active; features of shifted inputs are computed once per set of active shifts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.data.dataset import Dataset
from simulator.data.labels import class_index
from simulator.data.shift import apply_shift, class_prior_shift, label_swap_test
from simulator.errors import ConfigError
from simulator.scenario import Scenario
from simulator.scenario.scenario_model import DIGIT_SOURCES
from simulator.seeds import child_rng

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Featurize = Callable[[NDArray[Any]], FloatArray]


@dataclass(frozen=True)
class EvalSet:
    """Raw inputs and labels of one split before shifts."""

    x: NDArray[Any]
    y: IntArray


@dataclass
class EvaluationSets:
    """The splits, with a cache of (shifted) features keyed by the active shifts."""

    scenario: Scenario
    dataset: Dataset
    featurize: Featurize
    base: dict[str, EvalSet]
    _cache: dict[tuple[str, tuple[int, ...]], tuple[FloatArray, IntArray]] = field(
        default_factory=dict
    )

    def active_shifts(self, tick: int) -> tuple[int, ...]:
        """Indices of the scenario's shifts that have started by ``tick``."""
        return tuple(i for i, s in enumerate(self.scenario.shifts) if tick >= s.start)

    def features(self, split: str, tick: int) -> tuple[FloatArray, IntArray]:
        """Head features and labels of ``split`` as seen at ``tick``."""
        active = tuple(
            i
            for i in self.active_shifts(tick)
            if self.scenario.shifts[i].applies_to in ("both", split)
        )
        key = (split, active)
        if key not in self._cache:
            x, y = self.base[split].x, self.base[split].y
            for i in active:
                x, y = self._shift(i, x, y)
            self._cache[key] = (self.featurize(x), y)
        return self._cache[key]

    def _shift(self, i: int, x: NDArray[Any], y: IntArray) -> tuple[NDArray[Any], IntArray]:
        spec = self.scenario.shifts[i]
        rng = child_rng(self.scenario.seed, "shift", index=i)
        if spec.kind == "class_prior":
            assert spec.prior is not None
            idx = class_prior_shift(y, np.asarray(spec.prior), rng)
            return x[idx], y[idx]
        assert spec.severity is not None
        out = apply_shift(
            x, y, kind=spec.kind, severity=spec.severity, dataset=self.dataset, rng=rng
        )
        return out.x, out.y


def build_eval_sets(
    scenario: Scenario, dataset: Dataset, featurize: Featurize, rng: np.random.Generator
) -> EvaluationSets:
    """Test and OOD splits (forget/retain are drawn from the clients during the run)."""
    base = {"test": EvalSet(dataset.x_test, dataset.y_test)}
    if scenario.ood is not None:
        src = class_index(dataset.class_labels, scenario.ood.source_class, "ood.source_class")
        dst = class_index(dataset.class_labels, scenario.ood.target_class, "ood.target_class")
        split = label_swap_test(
            dataset.x_test,
            dataset.y_test,
            source_class=src,
            target_class=dst,
            fraction=scenario.ood.fraction,
            rng=rng,
        )
        base["ood"] = EvalSet(split.x, split.y)
    elif (
        dataset.ood_x is not None
        and dataset.ood_y is not None
        and dataset.ood_y.size
        and dataset.ood_y.min() >= 0
        and dataset.ood_y.max() < dataset.num_classes
        and scenario.data.classes is None
    ):
        base["ood"] = EvalSet(dataset.ood_x, dataset.ood_y)
    return EvaluationSets(scenario, dataset, featurize, base)


def shift_splits(scenario: Scenario, dataset: Dataset, test: EvalSet) -> dict[str, EvalSet]:
    """The scenario's named shifted splits (``evaluation.shift_splits``), fixed per seed.

    Covariate shifts are :func:`simulator.data.shift.apply_shift` on the whole test split (the
    same function the scenario's timed ``shifts`` use); ``digits`` is
    :func:`simulator.data.natural.digits_as_mnist` restricted to the scenario's classes and
    relabelled to class indices; ``remaining`` holds the rows of the labels outside
    ``data.classes`` with their *original* labels (no accuracy is defined on them). Each split
    draws from its own generator (``child_rng(seed, "shift_split", index=i)``), and is
    capped at ``max_rows`` rows by a seeded sample.
    """
    from simulator.data.natural import digits_as_mnist

    out: dict[str, EvalSet] = {}
    originals = list(dataset.class_labels)
    for i, spec in enumerate(scenario.evaluation.shift_splits):
        rng = child_rng(scenario.seed, "shift_split", index=i)
        where = f"evaluation.shift_splits.{i}.kind"
        x: NDArray[Any]
        if spec.kind in ("gaussian_noise", "rotation"):
            assert spec.severity is not None
            if spec.kind == "rotation" and dataset.modality != "image":
                raise ConfigError(f"rotation needs images, {dataset.name!r} is not", where)
            rows = _cap(test.y.size, spec.max_rows, rng)
            shifted = apply_shift(
                test.x[rows],
                test.y[rows],
                kind=spec.kind,
                severity=spec.severity,
                dataset=dataset,
                rng=rng,
            )
            x, y = shifted.x, shifted.y
        elif spec.kind == "digits":
            if dataset.image_shape != (1, 28, 28) or dataset.name not in DIGIT_SOURCES:
                raise ConfigError("digits needs a 28x28 digit source (mnist, idx)", where)
            x, digit = digits_as_mnist(originals)
            y = np.asarray([class_index(originals, int(d), where) for d in digit], dtype=np.int64)
            rows = _cap(y.size, spec.max_rows, rng)
            x, y = x[rows], y[rows]
        else:
            if dataset.ood_x is None or dataset.ood_y is None or scenario.data.classes is None:
                raise ConfigError("remaining needs data.classes (the other labels)", where)
            rows = _cap(dataset.ood_y.size, spec.max_rows, rng)
            x, y = dataset.ood_x[rows], np.asarray(dataset.ood_y[rows], dtype=np.int64)
        out[spec.name] = EvalSet(x, y)
    return out


def _cap(n: int, most: int, rng: np.random.Generator) -> IntArray:
    """All row indices, or a sorted seeded sample of ``most`` of them."""
    if n <= most:
        return np.arange(n, dtype=np.int64)
    return np.sort(rng.choice(n, size=most, replace=False)).astype(np.int64)
