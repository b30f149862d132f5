"""Utility metrics: weighted F1 (scikit-learn's) by hand and by its properties, accuracy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import InputError
from simulator.metrics import accuracy, weighted_f1


def test_weighted_f1_by_hand() -> None:
    y = np.array([0, 0, 0, 1, 1, 2])
    pred = np.array([0, 0, 1, 1, 2, 2])
    # class 0: tp 2, fp 0, fn 1 -> 4/5 (support 3); class 1: tp 1, fp 1, fn 1 -> 1/2 (2);
    # class 2: tp 1, fp 1, fn 0 -> 2/3 (1)
    assert weighted_f1(y, pred) == pytest.approx((3 * 0.8 + 2 * 0.5 + 1 * 2 / 3) / 6, rel=1e-12)
    # a class only predicted (3) weighs nothing; one never predicted (1) has F1 0
    assert weighted_f1(np.array([0, 0, 1]), np.array([0, 3, 0])) == pytest.approx(
        2 / 3 * (2 * 1 / (2 * 1 + 1 + 1)), rel=1e-12
    )
    assert weighted_f1(np.array([1, 1]), np.array([0, 0])) == 0.0
    assert math.isnan(weighted_f1(np.array([], dtype=np.int64), np.array([], dtype=np.int64)))
    with pytest.raises(InputError):
        weighted_f1(np.array([0, 1]), np.array([0]))


labels = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=50)


@settings(max_examples=80, deadline=None)
@given(pairs=labels, shift=st.integers(1, 5))
def test_weighted_f1_properties(pairs: list[tuple[int, int]], shift: int) -> None:
    y = np.array([a for a, _ in pairs])
    pred = np.array([b for _, b in pairs])
    f1 = weighted_f1(y, pred)
    assert 0.0 <= f1 <= 1.0
    assert weighted_f1(y, y) == 1.0
    # class names do not matter: renaming every class the same way on both sides
    assert weighted_f1(y + shift, pred + shift) == pytest.approx(f1, abs=1e-12)
    # zero exactly when nothing is right
    assert (f1 == 0.0) == (accuracy(y, pred) == 0.0)
    # one class in y: F1 of that class, 2 tp / (2 tp + fp + fn)
    if len(set(y.tolist())) == 1:
        c = int(y[0])
        tp = int(np.sum(pred == c))
        assert f1 == pytest.approx(2 * tp / (2 * tp + 0 + (len(y) - tp)), abs=1e-12)
