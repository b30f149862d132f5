"""Online change detection over per-batch scalars with river's ADWIN and Page-Hinkley.

River's defaults are tuned for long streams of raw values: ``PageHinkley(threshold=50)`` and
``ADWIN`` (whose cut bound assumes values spread over [0, 1] and which checks every 32 items)
never fire on a 0.1 drop of an accuracy-like metric within tens of batches. The settings here
are for metrics in [0, 1] observed once per deletion batch (``metrics.md``, "Drift"):

* ADWIN (Bifet and Gavalda, SDM 2007), checked every item (``clock=1``), fed ``x / resolution``
  with ``resolution = 0.02``: its range term then treats 0.02 as one unit, while its variance
  term still adapts to the stream's own noise;
* Page-Hinkley (Page, Biometrika 1954) in both directions with tolerance ``delta = 0.02`` and
  ``threshold = 0.5`` on the cumulative deviation.

Measured (``tests/test_metrics_online.py``): a 0.1 drop after 30 to 100 batches at noise
s.d. <= 0.03 is flagged within 10 batches by both, and flat streams of the same noise are not
flagged. NaN values (a metric undefined for that batch) are skipped.

``river`` is imported lazily (it takes seconds to import and pulls pandas).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from simulator.errors import ConfigError

#: The detectors, in report order.
DETECTORS: tuple[str, ...] = ("adwin", "page_hinkley")


@dataclass(frozen=True)
class AdwinConfig:
    """ADWIN (Bifet and Gavalda, SDM 2007), checked every item.

    Attributes
    ----------
    delta : float
        Confidence: a cut needs a difference of means significant at this level.
    resolution : float
        ADWIN is fed ``x / resolution``, so that this difference counts as one unit.
    grace_period, min_window : int
        Items before the first check, and the shortest sub-window compared.
    """

    delta: float = 0.002
    resolution: float = 0.02
    grace_period: int = 5
    min_window: int = 3


@dataclass(frozen=True)
class PageHinkleyConfig:
    """Page-Hinkley (Page, Biometrika 1954) in both directions.

    Attributes
    ----------
    delta, threshold : float
        The tolerated change, and the alarm threshold on the cumulative deviation.
    min_instances : int
        Items before an alarm is possible.
    alpha : float
        Forgetting factor of the running mean.
    """

    delta: float = 0.02
    threshold: float = 0.5
    min_instances: int = 5
    alpha: float = 1.0 - 1e-4


@dataclass(frozen=True)
class DetectorConfig:
    """Parameters of both detectors, scaled for [0, 1] metrics (module docstring)."""

    adwin: AdwinConfig = field(default_factory=AdwinConfig)
    page_hinkley: PageHinkleyConfig = field(default_factory=PageHinkleyConfig)


class _River(Protocol):
    @property
    def drift_detected(self) -> bool: ...

    def update(self, x: float) -> Any: ...


def make_detector(kind: str, settings: DetectorConfig) -> _River:
    """A fresh river detector of ``kind`` ("adwin" or "page_hinkley")."""
    from river import drift

    if kind == "adwin":
        det: _River = drift.ADWIN(  # type: ignore[no-untyped-call]
            delta=settings.adwin.delta,
            clock=1,
            grace_period=settings.adwin.grace_period,
            min_window_length=settings.adwin.min_window,
        )
        return det
    if kind == "page_hinkley":
        det = drift.PageHinkley(
            min_instances=settings.page_hinkley.min_instances,
            delta=settings.page_hinkley.delta,
            threshold=settings.page_hinkley.threshold,
            alpha=settings.page_hinkley.alpha,
            mode="both",
        )
        return det
    raise ConfigError(f"unknown detector {kind!r}; known: {', '.join(DETECTORS)}")


@dataclass(frozen=True)
class Detection:
    """One alarm: which detector, on which stream, at which update (0-based) and value."""

    detector: str
    stream: str
    step: int
    value: float


@dataclass
class ChangeMonitor:
    """Every detector on every named stream; :meth:`update` returns the new alarms.

    Parameters
    ----------
    streams : names of the scalar streams (bounded: they become metric labels).
    settings : detector parameters.
    detectors : which detectors to run.
    """

    streams: Sequence[str]
    settings: DetectorConfig = field(default_factory=DetectorConfig)
    detectors: Sequence[str] = DETECTORS
    _state: dict[tuple[str, str], _River] = field(default_factory=dict, init=False)
    _steps: dict[str, int] = field(default_factory=dict, init=False)
    counts: dict[tuple[str, str], int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for s in self.streams:
            self._steps[s] = 0
            for d in self.detectors:
                self._state[(d, s)] = make_detector(d, self.settings)
                self.counts[(d, s)] = 0

    def update(self, values: dict[str, float]) -> list[Detection]:
        """Feed one value per stream (missing or NaN values are skipped)."""
        alarms: list[Detection] = []
        for s in self.streams:
            v = values.get(s)
            if v is None or not math.isfinite(v):
                continue
            step = self._steps[s]
            self._steps[s] = step + 1
            for d in self.detectors:
                det = self._state[(d, s)]
                det.update(v / self.settings.adwin.resolution if d == "adwin" else v)
                if det.drift_detected:
                    self.counts[(d, s)] += 1
                    alarms.append(Detection(d, s, step, float(v)))
        return alarms
