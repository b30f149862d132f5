"""The contract every registered unlearning method must keep (river-style checks, one per id).

Each check runs on tiny synthetic data with settings shrunk to a fraction of a second per fit.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from support.unlearners import DATA, FAST, PROBE, SETTINGS

from simulator.errors import ConfigError, InputError, UnknownSampleError
from simulator.unlearners import (
    BaseUnlearner,
    Unlearner,
    create_unlearner,
    registered_unlearners,
)

METHODS = registered_unlearners()


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def make(method: str) -> BaseUnlearner[Any]:
    if method == "dpsgd":
        pytest.importorskip("opacus")
    return create_unlearner(method, SETTINGS, **FAST.get(method, {}))


def fitted(method: str, seed: int = 3) -> BaseUnlearner[Any]:
    u = make(method)
    u.fit(DATA, seed=seed)
    return u


@pytest.fixture(scope="module")
def saved() -> dict[str, dict[str, Any]]:
    """One fitted state per method, shared by the checks (each loads its own copy)."""
    return {}


def from_saved(method: str, saved: dict[str, dict[str, Any]]) -> BaseUnlearner[Any]:
    if method not in saved:
        saved[method] = fitted(method).state_dict()
    u = make(method)
    u.load_state_dict(saved[method])
    return u


@pytest.mark.parametrize("method", METHODS)
def test_implements_the_protocol(method: str) -> None:
    u = make(method)
    assert isinstance(u, Unlearner)
    assert u.name == method and u.guarantee


@pytest.mark.parametrize("method", METHODS)
def test_predictions_have_the_right_shape(method: str, saved: dict[str, Any]) -> None:
    u = from_saved(method, saved)
    p = u.predict_proba(PROBE)
    assert p.shape == (len(PROBE), 3) and np.all(np.isfinite(p)) and np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-9)
    pred = u.predict(PROBE)
    assert pred.shape == (len(PROBE),) and pred.dtype == np.int64
    np.testing.assert_array_equal(pred, p.argmax(axis=1))
    assert u.predict_proba(PROBE[:0]).shape[0] == 0


@pytest.mark.parametrize("method", METHODS)
def test_empty_and_malformed_removals_are_refused_and_change_nothing(
    method: str, saved: dict[str, Any]
) -> None:
    u = from_saved(method, saved)
    before, state = u.predict_proba(PROBE), u.state_dict()["active"]
    for bad in ([], [2, 2], [0.5], [[1, 2]]):
        with pytest.raises(InputError):
            u.remove(bad)  # type: ignore[arg-type]
    np.testing.assert_array_equal(u.predict_proba(PROBE), before)
    np.testing.assert_array_equal(u.state_dict()["active"], state)


@pytest.mark.parametrize("method", METHODS)
def test_unknown_or_already_removed_ids_are_rejected(method: str, saved: dict[str, Any]) -> None:
    u = from_saved(method, saved)
    out = u.remove([4, 5])
    assert out.removed == 2 and out.retained == DATA.n - 2 and out.seconds >= 0
    assert 4 not in u.retained_ids and u.retained_ids.size == DATA.n - 2
    before = u.predict_proba(PROBE)
    for bad in ([DATA.n], [-1], [5], [6, 4]):
        with pytest.raises(UnknownSampleError):
            u.remove(bad)
    np.testing.assert_array_equal(u.predict_proba(PROBE), before)
    assert u.retained_ids.size == DATA.n - 2


@pytest.mark.parametrize("method", METHODS)
def test_state_round_trips(method: str) -> None:
    u = fitted(method)
    u.remove([1, 2, 3])
    state = pickle.loads(pickle.dumps(u.state_dict()))
    v = make(method)
    v.load_state_dict(state)
    np.testing.assert_array_equal(v.predict_proba(PROBE), u.predict_proba(PROBE))
    np.testing.assert_array_equal(v.retained_ids, u.retained_ids)
    # the loaded copy goes on exactly as the original, and the two do not share state
    u.remove([7, 8])
    v.remove([7, 8])
    np.testing.assert_array_equal(v.predict_proba(PROBE), u.predict_proba(PROBE))
    with pytest.raises(UnknownSampleError):
        v.remove([2])
    other = "retrain" if method != "retrain" else "cr"
    with pytest.raises(ConfigError):
        make(other).load_state_dict(state)


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_result(method: str) -> None:
    a, b = fitted(method, seed=11), fitted(method, seed=11)
    np.testing.assert_array_equal(a.predict_proba(PROBE), b.predict_proba(PROBE))
    a.remove([0, 9])
    b.remove([0, 9])
    np.testing.assert_array_equal(a.predict_proba(PROBE), b.predict_proba(PROBE))


@pytest.mark.parametrize("method", METHODS)
def test_use_before_fit_is_an_input_error(method: str) -> None:
    u = make(method)
    for call in (lambda: u.remove([0]), lambda: u.predict(PROBE), u.state_dict):
        with pytest.raises(InputError):
            call()
