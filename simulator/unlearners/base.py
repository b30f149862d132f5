"""The protocol every unlearning method implements, and the data and settings it receives.

An unlearner is trained once (:meth:`Unlearner.fit`) on a :class:`TrainingSet` whose sample
ids are its row indices, then receives batches of ids to forget (:meth:`Unlearner.remove`),
and answers class probabilities for any inputs. Every method shares the same rules, which
``tests/test_unlearners_contract.py`` checks for each registered one:

* ids are validated before anything changes: an empty batch, duplicates or non-integers are an
  :class:`~simulator.errors.InputError`, unknown or already removed ids an
  :class:`~simulator.errors.UnknownSampleError`;
* every random choice comes from the ``seed`` given to :meth:`fit` (same seed, same result);
* :meth:`state_dict` / :meth:`load_state_dict` round-trip the whole mutable state, so a loaded
  copy predicts and removes exactly as the original would.

:class:`BaseUnlearner` implements these rules once; a method supplies ``_fit``, ``_remove`` and
``_predict_proba`` and keeps all of its mutable state in one object (``self._state``).
"""

from __future__ import annotations

import copy
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError, InputError, UnknownSampleError
from simulator.features.decorrelation import DecorrelationConfig
from simulator.head import HeadConfig
from simulator.models import BackboneConfig
from simulator.models.dp_fedavg import DpFedAvgConfig
from simulator.unlearners.option_checks import require_positive_int

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
#: Sample ids to remove: a sequence or an array of integers.
Ids = Sequence[int] | NDArray[np.integer[Any]]


def _copy(a: NDArray[Any], dtype: Any = None) -> NDArray[Any]:
    return np.array(a, dtype=dtype, copy=True)


@dataclass(frozen=True, eq=False)
class TrainingSet:
    """The training rows of one run; sample id ``i`` is row ``i``.

    Attributes
    ----------
    x : (n, ...) float inputs (flattened images, tabular rows, embeddings) or int64 token ids.
    y : (n,) labels in ``[0, num_classes)``.
    num_classes : K >= 2.
    groups : (n,) owner of each row (the federation's client), or None. SISA uses the
        groups as its shards (Bourtoule et al. 2021: in a federation, clients are shards).
    vocab_size : token vocabulary (token inputs only).
    extractor_pool : rows that share no row with any client (``extractor_data: public``), or
        None. A method with an extractor (``uses_extractor_pool``) fits it and everything
        before its head (the RFF bandwidth) on these rows alone; they are no sample ids: never
        removed, never in a head.
    bandwidth_pool : inputs that no client holds (the test split's, without labels), or None.
        Under DP training of the extractor (``ModelConfig.extractor_dp``) the RFF map's median
        bandwidth is computed on their features: a client's row read without noise would fall
        outside the accountants' guarantee (as ``unlearnsim run`` does).

    The arrays are copied on construction; unlearners share them (and state dicts reference
    them) without copying again, so treat them as read-only.
    """

    x: NDArray[Any]
    y: IntArray
    num_classes: int
    groups: IntArray | None = None
    vocab_size: int | None = None
    extractor_pool: TrainingSet | None = None
    bandwidth_pool: NDArray[Any] | None = None

    def __post_init__(self) -> None:
        x, y = np.asarray(self.x), np.asarray(self.y)
        if x.ndim < 2 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise InputError(f"x must be (n, ...) and y (n,), got {x.shape} and {y.shape}")
        if not np.issubdtype(y.dtype, np.integer):
            raise InputError(f"labels must be integers, got {y.dtype}")
        if isinstance(self.num_classes, bool) or self.num_classes < 2:
            raise InputError(f"need at least 2 classes, got {self.num_classes}")
        if y.size and (y.min() < 0 or y.max() >= self.num_classes):
            raise InputError(f"labels must lie in [0, {self.num_classes})")
        object.__setattr__(self, "x", _copy(x))
        object.__setattr__(self, "y", _copy(y, np.int64))
        if self.groups is not None:
            g = np.asarray(self.groups)
            if g.shape != y.shape or not np.issubdtype(g.dtype, np.integer) or np.any(g < 0):
                raise InputError("groups must be one non-negative integer per row")
            object.__setattr__(self, "groups", _copy(g, np.int64))
        if self.bandwidth_pool is not None:
            rest = np.asarray(self.bandwidth_pool)
            if rest.shape[1:] != x.shape[1:] or rest.shape[0] < 1:
                raise InputError(
                    f"the bandwidth pool's rows {rest.shape} should be (m >= 1, {x.shape[1:]})"
                )
            object.__setattr__(self, "bandwidth_pool", _copy(rest))
        pool = self.extractor_pool
        if pool is not None and (
            pool.num_classes != self.num_classes or pool.x.shape[1:] != x.shape[1:]
        ):
            raise InputError(
                f"the extractor pool's rows {pool.x.shape[1:]} and classes {pool.num_classes} "
                f"should be the training set's {x.shape[1:]} and {self.num_classes}"
            )

    @property
    def n(self) -> int:
        """Number of rows (= number of sample ids)."""
        return int(self.y.shape[0])

    @property
    def tokens(self) -> bool:
        """Whether the inputs are token ids (sequence backbones) rather than float rows."""
        return bool(np.issubdtype(self.x.dtype, np.integer))


@dataclass(frozen=True)
class ModelConfig:
    """What every method shares: the network, its training, the RFF map and the head.

    The comparison derives these from a scenario (``simulator.compare.workload``) so that all
    methods train the same architecture with the same budget of epochs.

    Attributes
    ----------
    backbone : the extractor (``simulator.models.BackboneConfig``); deep baselines train it with a
        linear classifier on top (``ExtractorWithHead``).
    epochs, batch_size, lr : central training of that network (Adam).
    rff_dim : random Fourier features ``m`` of the head-based methods (retrain, cr, decoremoval).
    rff_bandwidth : kernel width, or None for the median heuristic on the training features.
    head : the certified head (Guo et al. 2020; ``HeadConfig``).
    decorrelation : DecoRemoval's weight learner (``DecorrelationConfig``).
    device : torch device name (``"cpu"`` or ``"cuda"``).
    extractor_dp : DP-FedAvg of the extractor (``extractor_data: dp``), or None. Set, every
        head-based method (the retrain baseline included) trains its extractor with DP-FedAvg
        over the training set's ``groups`` (the clients) instead of centrally: ``rounds`` of
        ``local_epochs`` DP-SGD epochs, fresh accountants per training
        (:func:`simulator.models.dp_fedavg.train_dp_federated`).
    """

    backbone: BackboneConfig = field(default_factory=lambda: BackboneConfig("mlp"))
    epochs: int = 5
    batch_size: int = 64
    lr: float = 1e-3
    rff_dim: int = 512
    rff_bandwidth: float | None = None
    head: HeadConfig = field(default_factory=HeadConfig)
    decorrelation: DecorrelationConfig = field(default_factory=DecorrelationConfig)
    device: str = "cpu"
    extractor_dp: DpFedAvgConfig | None = None

    def __post_init__(self) -> None:
        require_positive_int(self, "model", "epochs", "batch_size", "rff_dim")
        if not self.lr > 0:
            raise ConfigError(f"must be positive, got {self.lr}", "model.lr")
        if self.rff_bandwidth is not None and not self.rff_bandwidth > 0:
            raise ConfigError(f"must be positive, got {self.rff_bandwidth}", "rff.bandwidth")


@dataclass(frozen=True)
class FitReport:
    """What :meth:`Unlearner.fit` did: seconds, and method-specific numbers and notes."""

    seconds: float
    info: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RemovalOutcome:
    """What one :meth:`Unlearner.remove` did.

    ``retrained`` is True when the method fell back to training from scratch (always for
    ``retrain``; on an exhausted budget for the certified heads; SISA retrains shards, which it
    reports in ``info``).
    """

    removed: int
    retained: int
    seconds: float
    retrained: bool = False
    info: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Unlearner(Protocol):
    """One unlearning method (see the module docstring for the rules)."""

    name: ClassVar[str]
    guarantee: ClassVar[str]

    def fit(self, train: TrainingSet, *, seed: int) -> FitReport:
        """Train on every row of ``train`` with all randomness drawn from ``seed``."""
        ...

    def remove(self, ids: Ids) -> RemovalOutcome:
        """Forget a batch of sample ids."""
        ...

    def predict_proba(self, x: NDArray[Any]) -> FloatArray:
        """Class probabilities ``(n, K)``; rows sum to one."""
        ...

    def predict(self, x: NDArray[Any]) -> IntArray:
        """Most probable class of every row."""
        ...

    @property
    def retained_ids(self) -> IntArray:
        """Sample ids not removed so far (increasing)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """A deep copy of everything that changes."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Install a state from :meth:`state_dict` of the same method with the same settings."""
        ...


def check_removal(ids: Ids, active: BoolArray) -> IntArray:
    """Validate a batch of sample ids against the retained rows; nothing is changed.

    Raises
    ------
    InputError
        ``ids`` is empty, not a flat sequence of integers, or repeats an id.
    UnknownSampleError
        Some ids are outside the training set or already removed.
    """
    arr = np.asarray(ids)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InputError(f"sample ids must be a flat sequence of integers, got dtype {arr.dtype}")
    if arr.size == 0:
        raise InputError("no sample ids to remove")
    idx = arr.astype(np.int64)
    if np.unique(idx).size != idx.size:
        raise InputError("duplicate sample ids in one removal")
    bad = (idx < 0) | (idx >= active.size)
    inside = ~bad
    bad[inside] = ~active[idx[inside]]
    if np.any(bad):
        raise UnknownSampleError([int(i) for i in idx[bad]])
    return idx


OptionsT = TypeVar("OptionsT")


@dataclass(frozen=True)
class NoConfig:
    """Options of a method that has none besides :class:`ModelConfig`."""


#: The note of a method without a separate extractor when the training set has a public pool.
POOL_UNUSED_NOTE = (
    "extractor_data public: this method has no separate extractor; it trains its whole "
    "network on the clients' rows and leaves the public pool unused"
)
#: What a method without a separate extractor says under ``extractor_data: dp``.
DP_UNUSED_NOTE = (
    "extractor_data dp does not apply: this method has no separate extractor and trains "
    "its whole network as it always does (not with DP-FedAvg)"
)


class BaseUnlearner(ABC, Generic[OptionsT]):
    """Id bookkeeping, timing and state round-trips shared by every method.

    Parameters
    ----------
    settings : shared model settings (default :class:`ModelConfig()`).
    options : the method's own frozen options dataclass (``options_type``).
    """

    name: ClassVar[str] = ""
    guarantee: ClassVar[str] = ""
    options_type: ClassVar[type[Any]] = NoConfig
    #: Whether the method fits its extractor on ``TrainingSet.extractor_pool`` when one is given.
    uses_extractor_pool: ClassVar[bool] = False

    def __init__(self, settings: ModelConfig | None = None, options: OptionsT | None = None):
        self.settings = settings if settings is not None else ModelConfig()
        self.options: OptionsT = options if options is not None else self.options_type()
        if not isinstance(self.options, self.options_type):
            raise ConfigError(
                f"expected {self.options_type.__name__}, got {type(self.options).__name__}",
                f"methods.{self.name}",
            )
        self._train: TrainingSet | None = None
        self._active: BoolArray = np.zeros(0, dtype=bool)
        self._state: Any = None

    # ------------------------------------------------------------ subclasses
    @abstractmethod
    def _fit(self, train: TrainingSet, seed: int) -> tuple[Any, FitReport]:
        """Train on every row of ``train``; return the mutable state and a report."""

    @abstractmethod
    def _remove(self, ids: IntArray) -> tuple[bool, dict[str, float]]:
        """Forget ``ids`` (already validated and already marked removed in ``_active``)."""

    @abstractmethod
    def _predict_proba(self, x: NDArray[Any]) -> FloatArray:
        """Class probabilities (n, K)."""

    # ---------------------------------------------------------------- public
    def fit(self, train: TrainingSet, *, seed: int) -> FitReport:
        """Train on every row of ``train`` with all randomness drawn from ``seed``."""
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise InputError(f"seed must be a non-negative integer, got {seed!r}")
        started = time.perf_counter()
        self._train = train
        self._active = np.ones(train.n, dtype=bool)
        state, report = self._fit(train, int(seed))
        self._state = state
        notes = report.notes
        if train.extractor_pool is not None and not self.uses_extractor_pool:
            notes = (*notes, POOL_UNUSED_NOTE)
        if self.settings.extractor_dp is not None and not self.uses_extractor_pool:
            notes = (*notes, DP_UNUSED_NOTE)
        return FitReport(time.perf_counter() - started, report.info, notes)

    def remove(self, ids: Ids) -> RemovalOutcome:
        """Forget a batch of sample ids (see the module docstring for the checks)."""
        self._require_fit()
        idx = check_removal(ids, self._active)
        started = time.perf_counter()
        self._active[idx] = False
        retrained, info = self._remove(idx)
        return RemovalOutcome(
            removed=int(idx.size),
            retained=int(self._active.sum()),
            seconds=time.perf_counter() - started,
            retrained=retrained,
            info=info,
        )

    def predict_proba(self, x: NDArray[Any]) -> FloatArray:
        """Class probabilities ``(n, K)``; rows sum to one."""
        self._require_fit()
        return self._predict_proba(x)

    def predict(self, x: NDArray[Any]) -> IntArray:
        """Most probable class of every row."""
        return np.asarray(np.argmax(self.predict_proba(x), axis=1), dtype=np.int64)

    @property
    def retained_ids(self) -> IntArray:
        """Sample ids not removed so far (increasing)."""
        return np.flatnonzero(self._active).astype(np.int64)

    @property
    def train(self) -> TrainingSet:
        """The training set given to :meth:`fit`."""
        return self._require_fit()

    def state_dict(self) -> dict[str, Any]:
        """A deep copy of everything that changes (the training set is shared, not copied).

        The result pickles, so it can also be written to disk.
        """
        train = self._require_fit()
        return {
            "method": self.name,
            "settings": self.settings,
            "options": self.options,
            "train": train,
            "active": self._active.copy(),
            "state": copy.deepcopy(self._state, memo={id(train): train}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Install a state from :meth:`state_dict` of the same method with the same settings.

        Raises
        ------
        ConfigError
            The state belongs to another method or other settings/options.
        """
        missing = {"method", "settings", "options", "train", "active", "state"} - set(state)
        if missing:
            raise ConfigError(f"state lacks {sorted(missing)}", f"methods.{self.name}")
        if state["method"] != self.name:
            raise ConfigError(
                f"state of method {state['method']!r} given to {self.name!r}", "method"
            )
        if state["settings"] != self.settings or state["options"] != self.options:
            raise ConfigError("state was saved with other settings or options", self.name)
        train = state["train"]
        if not isinstance(train, TrainingSet):
            raise ConfigError("state['train'] is not a TrainingSet", f"methods.{self.name}")
        self._train = train
        self._active = np.array(state["active"], dtype=bool)
        self._state = copy.deepcopy(state["state"], memo={id(train): train})

    # --------------------------------------------------------------- helpers
    def _require_fit(self) -> TrainingSet:
        if self._train is None:
            raise InputError(f"{self.name}: call fit() first")
        return self._train


def options_from_mapping(options_type: type[Any], values: Mapping[str, Any], where: str) -> Any:
    """Build a frozen options dataclass, naming unknown keys in a :class:`ConfigError`."""
    known = {f.name for f in fields(options_type)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown}; known: {sorted(known) or 'none'}",
            f"{where}.{unknown[0]}",
        )
    try:
        return options_type(**values)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(str(exc), where) from exc
