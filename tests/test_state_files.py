"""State files (``simulator/state_files.py``): what is written is read back, as numpy's own npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.errors import InputError
from simulator.state_files import read_state, write_state


def test_every_kind_of_array_and_scalar_round_trips(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    state = {
        "matrix": rng.normal(size=(7, 5)),
        "fortran": np.asfortranarray(rng.normal(size=(4, 3))),
        "strided": np.arange(20, dtype=np.int64)[::3],
        "empty": np.zeros((0, 6)),
        "flags": np.array([True, False, True]),
        "nested": {"list": [np.float64(2.5), None, "text", 3, [1.0, np.ones(2)]]},
    }
    write_state(tmp_path / "s.npz", state)
    back = read_state(tmp_path / "s.npz")
    for key in ("matrix", "fortran", "strided", "empty", "flags"):
        np.testing.assert_array_equal(back[key], state[key])
        assert back[key].dtype == state[key].dtype and back[key].shape == state[key].shape
    assert back["nested"]["list"][:4] == [2.5, None, "text", 3]
    np.testing.assert_array_equal(back["nested"]["list"][4][1], np.ones(2))
    with np.load(tmp_path / "s.npz", allow_pickle=False) as plain:  # numpy's npz, no pickle
        assert len(plain.files) == 1 + 6  # the JSON document and the six arrays


def test_object_arrays_are_refused_and_nothing_is_left(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="Python objects"):
        write_state(tmp_path / "s.npz", {"bad": np.array([{}, []], dtype=object)})
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_keeps_the_previous_file_and_removes_its_own(tmp_path: Path) -> None:
    write_state(tmp_path / "s.npz", {"x": np.ones(3)})
    (tmp_path / "s.npz.tmp").mkdir()  # the temporary file cannot be created
    with pytest.raises(OSError):
        write_state(tmp_path / "s.npz", {"x": np.zeros(3)})
    np.testing.assert_array_equal(read_state(tmp_path / "s.npz")["x"], np.ones(3))
