"""Certificate metrics: Guo et al.'s budget and epsilon arithmetic with known answers."""

from __future__ import annotations

import math

import pytest

from simulator.errors import ConfigError, InputError
from simulator.metrics import certificate_status


def test_budget_and_epsilon_known_answers() -> None:
    c = math.sqrt(2 * math.log(1.5 / 1e-4))
    s = certificate_status(
        accounting="guo",
        cumulative=1.0,
        sigma=10.0,
        epsilon=1.0,
        delta=1e-4,
        residual={"worst": 3.0, "data": 2.0, "exact": None},
    )
    assert s.budget == pytest.approx(10.0 / c) == pytest.approx(2.2803, abs=1e-4)
    assert s.epsilon_spent == pytest.approx(c / 10.0)
    assert s.used_ratio == pytest.approx(1.0 / s.budget)
    # spending the whole budget spends exactly the target epsilon
    full = certificate_status(
        accounting="guo", cumulative=s.budget, sigma=10.0, epsilon=1.0, delta=1e-4
    )
    assert full.epsilon_spent == pytest.approx(1.0) and full.used_ratio == pytest.approx(1.0)
    assert s.residual == {"worst": 3.0, "data": 2.0}  # no exact residual computed
    assert (s.epsilon_target, s.delta, s.accounting) == (1.0, 1e-4, "guo")


def test_rejects_bad_inputs() -> None:
    with pytest.raises(InputError):
        certificate_status(accounting="guo", cumulative=-1.0, sigma=1, epsilon=1, delta=1e-3)
    with pytest.raises(InputError):
        certificate_status(
            accounting="guo", cumulative=0.0, sigma=1, epsilon=1, delta=1e-3, residual={"x": 1.0}
        )
    with pytest.raises(ConfigError):
        certificate_status(accounting="guo", cumulative=0.0, sigma=1, epsilon=1, delta=2.0)
