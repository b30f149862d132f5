"""A client's state as plain arrays and scalars, and what it reports about itself.

A transport that runs every protocol message in a fresh process (Flower's Deployment Engine)
keeps the client between messages as a :class:`ClientSnapshot`: the shard's head features,
labels, global ids, current decorrelation weights and retained-row flags. Restoring a snapshot
gives a client whose answers are bit-identical to the one that was saved (weights are restored,
never refitted). :meth:`ClientSnapshot.to_arrays` / :meth:`ClientSnapshot.from_arrays` are the
flat form a transport stores; they know nothing of any transport.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError
from simulator.features.decorrelation import DecorrelationConfig, WeightResult

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

_ARRAYS = ("sample_ids", "features", "labels", "weights", "active")


@dataclass(frozen=True)
class WeightingPlan:
    """How a client learns decorrelation weights; ``seed`` fixes the lift for every refit."""

    config: DecorrelationConfig
    seed: int

    def to_json(self) -> str:
        """Exact text form (floats round-trip through JSON)."""
        return json.dumps({"config": asdict(self.config), "seed": self.seed}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> WeightingPlan:
        """Inverse of :meth:`to_json`."""
        data = json.loads(text)
        return cls(DecorrelationConfig(**data["config"]), int(data["seed"]))


@dataclass(frozen=True)
class WeightReport:
    """A client's current decorrelation weights: spread, dependence reached, class masses.

    ``effective_sample_size_ratio`` is ``n_eff / n``; ``class_mass`` maps a class to its share
    of the client's weight mass (a collapse onto one class shows here).
    """

    std: float
    min: float
    max: float
    effective_sample_size_ratio: float
    objective_ratio: float
    class_mass: dict[int, float] = field(default_factory=dict)

    @classmethod
    def of(cls, result: WeightResult) -> WeightReport:
        """The report of one fit."""
        s = result.spread
        initial = result.objective_initial  # 0: no dependence to remove (too few rows)
        ratio = result.objective_final / initial if initial > 0 else 1.0
        return cls(
            std=s.std,
            min=s.min,
            max=s.max,
            effective_sample_size_ratio=s.effective_sample_size_ratio,
            objective_ratio=float(ratio),
            class_mass=dict(s.class_mass),
        )

    def to_flat(self) -> dict[str, float]:
        """Scalars only (``class_mass_<k>`` per class), for messages and metric labels."""
        out = {k: float(v) for k, v in asdict(self).items() if k != "class_mass"}
        out.update({f"class_mass_{c}": float(v) for c, v in sorted(self.class_mass.items())})
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WeightReport:
        """Inverse of ``asdict`` after a JSON round trip (class keys become strings)."""
        rest = {k: float(v) for k, v in data.items() if k != "class_mass"}
        mass = {int(c): float(v) for c, v in dict(data.get("class_mass", {})).items()}
        return cls(**rest, class_mass=mass)

    @classmethod
    def from_flat(cls, flat: Mapping[str, float]) -> WeightReport:
        """Inverse of :meth:`to_flat`."""
        prefix = "class_mass_"
        mass = {int(k[len(prefix) :]): float(v) for k, v in flat.items() if k.startswith(prefix)}
        rest = {k: float(v) for k, v in flat.items() if not k.startswith(prefix)}
        return cls(**rest, class_mass=mass)


@dataclass(frozen=True)
class ClientReport:
    """A client's account of itself at the end of a run (or any time).

    Attributes
    ----------
    client_id : partition index.
    rows, retained : rows held at the start, rows still retained.
    deletion_batches : deletion messages this client received and applied.
    accuracy_retained : accuracy of the given head on the retained rows (nan if none).
    max_weight : largest current weight of a retained row.
    weights : spread of the current decorrelation weights, or None (uniform weights).
    """

    client_id: int
    rows: int
    retained: int
    deletion_batches: int
    accuracy_retained: float
    max_weight: float
    weights: WeightReport | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClientReport:
        """Inverse of :meth:`to_dict`."""
        w = data.get("weights")
        return cls(
            client_id=int(data["client_id"]),
            rows=int(data["rows"]),
            retained=int(data["retained"]),
            deletion_batches=int(data["deletion_batches"]),
            accuracy_retained=float(data["accuracy_retained"]),
            max_weight=float(data["max_weight"]),
            weights=None if w is None else WeightReport.from_dict(w),
        )


@dataclass(frozen=True, eq=False)
class ClientSnapshot:
    """Everything a :class:`~simulator.federation.client.FederatedClient` holds.

    Attributes
    ----------
    client_id : partition index.
    sample_ids : (n,) global ids of the rows.
    features : (n, d) head features.
    labels : (n,) class indices.
    num_classes : K.
    weights : (n,) weight of every row (deleted rows keep their last value).
    active : (n,) retained-row flags.
    deletion_batches : deletion messages applied so far.
    last_weights : spread of the weights after the last (re)fit, or None.
    weighting : how weights are refitted after a deletion, or None (fixed weights).
    """

    client_id: int
    sample_ids: IntArray
    features: FloatArray
    labels: IntArray
    num_classes: int
    weights: FloatArray
    active: NDArray[np.bool_]
    deletion_batches: int
    last_weights: WeightReport | None
    weighting: WeightingPlan | None

    def to_arrays(self) -> tuple[dict[str, NDArray[Any]], dict[str, float | int | str]]:
        """``(arrays, scalars)``: numpy arrays and JSON scalars that rebuild the snapshot."""
        arrays: dict[str, NDArray[Any]] = {
            "sample_ids": np.asarray(self.sample_ids, dtype=np.int64),
            "features": np.asarray(self.features, dtype=np.float64),
            "labels": np.asarray(self.labels, dtype=np.int64),
            "weights": np.asarray(self.weights, dtype=np.float64),
            "active": np.asarray(self.active, dtype=np.bool_),
        }
        scalars: dict[str, float | int | str] = {
            "client_id": self.client_id,
            "num_classes": self.num_classes,
            "deletion_batches": self.deletion_batches,
        }
        if self.weighting is not None:
            scalars["weighting"] = self.weighting.to_json()
        if self.last_weights is not None:
            scalars.update({f"w_{k}": v for k, v in self.last_weights.to_flat().items()})
        return arrays, scalars

    @classmethod
    def from_arrays(
        cls, arrays: Mapping[str, NDArray[Any]], scalars: Mapping[str, float | int | str]
    ) -> ClientSnapshot:
        """Inverse of :meth:`to_arrays`."""
        missing = [k for k in _ARRAYS if k not in arrays]
        if missing:
            raise InputError(f"client snapshot lacks arrays {missing}")
        spread = {k[2:]: float(v) for k, v in scalars.items() if k.startswith("w_")}
        plan = scalars.get("weighting")
        return cls(
            client_id=int(scalars["client_id"]),
            sample_ids=np.asarray(arrays["sample_ids"], dtype=np.int64),
            features=np.asarray(arrays["features"], dtype=np.float64),
            labels=np.asarray(arrays["labels"], dtype=np.int64),
            num_classes=int(scalars["num_classes"]),
            weights=np.asarray(arrays["weights"], dtype=np.float64),
            active=np.asarray(arrays["active"], dtype=np.bool_),
            deletion_batches=int(scalars["deletion_batches"]),
            last_weights=WeightReport.from_flat(spread) if spread else None,
            weighting=WeightingPlan.from_json(str(plan)) if plan else None,
        )
