"""River's ADWIN and Page-Hinkley with the settings for [0, 1] per-batch metrics.

They must flag a 0.1 drop of an accuracy-like metric within ten batches, and stay quiet on a
flat stream with the same noise (and on a perfectly constant one). River's defaults do not fire
on such a drop at all, which is why the settings exist.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import ConfigError
from simulator.metrics import ChangeMonitor

pytest.importorskip("river")


def stream(
    seed: int, *, drop: float, before: int = 40, after: int = 40, sd: float = 0.02
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    level = np.r_[np.full(before, 0.9), np.full(after, 0.9 - drop)]
    return np.clip(level + sd * rng.normal(size=before + after), 0.0, 1.0)


def first_alarms(values: np.ndarray) -> dict[str, int | None]:
    mon = ChangeMonitor(["accuracy"])
    first: dict[str, int | None] = {"adwin": None, "page_hinkley": None}
    for i, v in enumerate(values):
        for alarm in mon.update({"accuracy": float(v)}):
            assert alarm.step == i and alarm.stream == "accuracy"
            if first[alarm.detector] is None:
                first[alarm.detector] = i
    return first


@pytest.mark.parametrize("seed", range(5))
def test_both_detectors_fire_within_ten_batches_of_a_drop(seed: int) -> None:
    first = first_alarms(stream(seed, drop=0.1))
    for det, at in first.items():
        assert at is not None and 40 <= at < 50, (det, at)


@pytest.mark.parametrize("seed", range(5))
def test_no_alarm_on_a_flat_stream(seed: int) -> None:
    assert first_alarms(stream(seed, drop=0.0, sd=0.03)) == {"adwin": None, "page_hinkley": None}
    assert first_alarms(np.full(80, 0.9)) == {"adwin": None, "page_hinkley": None}


def test_river_defaults_miss_the_drop() -> None:
    from river import drift

    x = stream(0, drop=0.1)
    for det in (drift.ADWIN(), drift.PageHinkley()):
        fired = False
        for v in x:
            det.update(float(v))
            fired |= det.drift_detected
        assert not fired


def test_nan_values_are_skipped_and_counted_per_stream() -> None:
    mon = ChangeMonitor(["accuracy", "mia_auc"], detectors=["page_hinkley"])
    for v in stream(1, drop=0.1):
        mon.update({"accuracy": float(v), "mia_auc": float("nan")})
    assert mon.counts[("page_hinkley", "accuracy")] >= 1
    assert mon.counts[("page_hinkley", "mia_auc")] == 0
    with pytest.raises(ConfigError):
        ChangeMonitor(["accuracy"], detectors=["cusum"])
