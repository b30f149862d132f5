"""State dicts on disk: nested dicts of numpy arrays and JSON scalars, one ``.npz`` file.

A ``state_dict`` (like torch's) is plain data: dicts, lists, strings, numbers, booleans, None
and numpy arrays. :func:`write_state` stores one in a single ``.npz`` archive, the arrays as
members and everything else as one JSON document (``meta``) in which each array is replaced by
``{"__array__": name}``; :func:`read_state` loads it back without pickle (``allow_pickle=False``),
so a file written by an older version of the code loads whatever its classes became, and a
hostile file cannot run code. Writing is atomic: a temporary file, ``fsync``, then a rename and
an ``fsync`` of the folder.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import InputError

_ARRAY = "__array__"
_META = "meta"


def split_arrays(state: Any, arrays: dict[str, np.ndarray], path: str = "") -> Any:
    """Split the arrays out of a state tree.

    ``state`` with every array moved into ``arrays`` (keyed by its path) and replaced by a
    reference; tuples become lists.
    """
    if isinstance(state, np.ndarray):
        arrays[path] = state
        return {_ARRAY: path}
    if isinstance(state, dict):
        out = {}
        for key, value in state.items():
            if not isinstance(key, str) or "/" in key or key == _ARRAY:
                raise InputError(f"state keys are strings without '/', got {key!r} at {path!r}")
            out[key] = split_arrays(value, arrays, f"{path}/{key}")
        return out
    if isinstance(state, list | tuple):
        return [split_arrays(v, arrays, f"{path}/{i}") for i, v in enumerate(state)]
    if isinstance(state, np.generic):
        return state.item()
    if state is None or isinstance(state, str | bool | int | float):
        return state
    raise InputError(f"not state-dict data at {path!r}: {type(state).__name__}")


def join_arrays(skeleton: Any, arrays: Any) -> Any:
    """Inverse of :func:`split_arrays`."""
    if isinstance(skeleton, dict):
        if set(skeleton) == {_ARRAY}:
            return np.asarray(arrays[skeleton[_ARRAY]])
        return {k: join_arrays(v, arrays) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [join_arrays(v, arrays) for v in skeleton]
    return skeleton


def write_state(path: Path, state: dict[str, Any], *, fsync: bool = True) -> None:
    """Write ``state`` to ``path`` atomically (module docstring)."""
    arrays: dict[str, np.ndarray] = {}
    meta = json.dumps(split_arrays(state, arrays), sort_keys=True, allow_nan=True)
    buf = io.BytesIO()
    members = {f"a{i}": a for i, a in enumerate(arrays.values())}
    names = dict(zip(arrays, members, strict=True))
    header = json.dumps({"meta": meta, "names": names})
    savez: Any = np.savez  # numpy's stub types every keyword as allow_pickle
    savez(buf, **{_META: np.frombuffer(header.encode(), dtype=np.uint8)}, **members)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(buf.getbuffer())
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_state(path: Path) -> dict[str, Any]:
    """The state :func:`write_state` wrote to ``path``.

    Raises
    ------
    InputError
        The file is not such an archive.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            header = json.loads(bytes(archive[_META]).decode())
            arrays = {name: archive[member] for name, member in header["names"].items()}
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise InputError(f"{path} is not a state file: {exc}") from exc
    state = join_arrays(json.loads(header["meta"]), arrays)
    if not isinstance(state, dict):
        raise InputError(f"{path} holds no state dict")
    return state
