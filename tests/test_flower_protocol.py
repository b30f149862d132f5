"""The Flower wire format: every message carries its arrays packed in one Flower ``Array``."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from clients import protocol as rec


def test_pack_round_trips_dtypes_shapes_and_groups() -> None:
    rng = np.random.default_rng(0)
    groups = {
        "head": {"W": rng.normal(size=(7, 3)), "W_ref": rng.normal(size=(7, 3))},
        "ids": {"ids": np.array([5, 1, 9], dtype=np.int64)},
        "odd": {
            "scalar": np.asarray(2.5),  # 0-d
            "empty": np.zeros((0, 4)),
            "flags": np.array([True, False, True]),
            "f32": rng.normal(size=(2, 3, 5)).astype(np.float32),
            "u8": np.arange(3, dtype=np.uint8),  # leaves the next array unaligned before padding
            "big_endian": np.arange(4, dtype=">i4"),
            "fortran": np.asfortranarray(rng.normal(size=(3, 4))),
        },
    }
    record = rec.pack(groups)
    assert list(record) == [rec.PACKED] and record[rec.PACKED].dtype == "uint8"
    back = rec.unpack(record)
    assert set(back) == set(groups)
    for g, arrays in groups.items():
        assert set(back[g]) == set(arrays)
        for name, value in arrays.items():
            got = back[g][name]
            assert got.dtype == value.dtype and got.shape == value.shape, (g, name)
            np.testing.assert_array_equal(got, value)
            assert got.flags.writeable


def test_a_message_is_one_config_and_one_packed_array() -> None:
    content = rec.content({"a": 1, "none": None}, {"head": {"W": np.eye(2)}})
    assert set(content.config_records) == {rec.CONFIG}
    assert set(content.array_records) == {rec.ARRAYS}
    assert dict(rec.config_of(content)) == {"a": 1}
    np.testing.assert_array_equal(rec.arrays_of(content)["head"]["W"], np.eye(2))
    bare = rec.content()
    assert rec.arrays_of(bare) == {} and dict(rec.config_of(bare)) == {}


def test_object_arrays_and_malformed_records_are_refused() -> None:
    with pytest.raises(TypeError, match="object array g/x"):
        rec.pack({"g": {"x": np.array([object()])}})
    good = rec.pack({"g": {"x": np.arange(10.0)}}).get(rec.PACKED)
    assert good is not None
    truncated = np.frombuffer(good.numpy().tobytes()[:-16], dtype=np.uint8)
    with pytest.raises(ValueError, match="malformed packed array g/x"):
        rec.unpack(ArrayRecord({rec.PACKED: Array(truncated)}))


def test_numbers_are_read_strictly() -> None:
    config = rec.config_of(rec.content({"n": 3, "flag": True, "x": 0.5}))
    assert rec.get_int(config, "n") == 3 and rec.get_number(config, "x") == 0.5
    assert rec.get_number(config, "missing", 7.0) == 7.0
    with pytest.raises(TypeError, match="not a number"):
        rec.get_number(config, "flag")
    with pytest.raises(KeyError):
        rec.get_number(config, "missing")
