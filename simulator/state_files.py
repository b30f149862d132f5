"""State dicts on disk: nested dicts of numpy arrays and JSON scalars, one ``.npz`` file.

A ``state_dict`` (like torch's) is plain data: dicts, lists, strings, numbers, booleans, None
and numpy arrays. :func:`write_state` stores one in a single ``.npz`` archive, the arrays as
members and everything else as one JSON document (``meta``) in which each array is replaced by
``{"__array__": name}``; :func:`read_state` loads it back without pickle (``allow_pickle=False``),
so a file written by an older version of the code loads whatever its classes became, and a
hostile file cannot run code. Writing is atomic: a temporary file, ``fsync``, then a rename and
an ``fsync`` of the folder.

The archive is the one ``np.savez`` writes (uncompressed members ``NAME.npy``), streamed to the
file member by member from the arrays' own memory: no copy of the state is built in memory
first (a snapshot of 176 MB: 0.44 s instead of 0.77 s here, ``bench/state_writer.py``), and the
checksums and writes release the GIL, so a snapshot can be written on a thread beside a running
stream (``server/kafka/checkpoint.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


def host_arrays(state: Any) -> Any:
    """``state`` with every array of another library (a torch tensor on any device) as numpy.

    What a state dict taken with ``host=False`` needs before :func:`write_state`; the read-back
    happens here, on the caller's thread (torch releases the GIL while it copies).
    """
    if isinstance(state, dict):
        return {key: host_arrays(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return [host_arrays(value) for value in state]
    if hasattr(state, "detach"):  # a torch tensor
        return np.asarray(state.detach().cpu().numpy(), dtype=np.float64)
    return state


def join_arrays(skeleton: Any, arrays: Any) -> Any:
    """Inverse of :func:`split_arrays`."""
    if isinstance(skeleton, dict):
        if set(skeleton) == {_ARRAY}:
            return np.asarray(arrays[skeleton[_ARRAY]])
        return {k: join_arrays(v, arrays) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [join_arrays(v, arrays) for v in skeleton]
    return skeleton


def write_state(
    path: Path,
    state: dict[str, Any],
    *,
    fsync: bool = True,
    written: Callable[[], None] | None = None,
) -> None:
    """Write ``state`` to ``path`` atomically (module docstring).

    ``written`` is called once the new file is complete, before it replaces ``path``.
    """
    arrays: dict[str, np.ndarray] = {}
    meta = json.dumps(split_arrays(state, arrays), sort_keys=True, allow_nan=True)
    for key, array in arrays.items():
        if array.dtype.hasobject:
            raise InputError(f"state array {key!r} holds Python objects")
    members = {f"a{i}": a for i, a in enumerate(arrays.values())}
    names = dict(zip(arrays, members, strict=True))
    header = json.dumps({"meta": meta, "names": names})
    tmp = path.with_name(path.name + ".tmp")
    with named_errors(tmp):
        f = tmp.open("wb")  # from here on the temporary file is this call's
    try:
        with f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            _write_member(archive, _META, np.frombuffer(header.encode(), dtype=np.uint8))
            for name, array in members.items():
                _write_member(archive, name, array)
            archive.close()  # the central directory, before the data reach the disk
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    except OSError as exc:
        tmp.unlink(missing_ok=True)  # the half-written file this call created
        raise with_path(exc, tmp) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if written is not None:
        written()
    replace_file(tmp, path, fsync=fsync)


def replace_file(tmp: Path, path: Path, *, fsync: bool) -> None:
    """Rename ``tmp`` over ``path``, then (``fsync``) sync the folder.

    With the folder synced the rename survives a machine crash, not only a process kill.
    """
    with named_errors(path):
        os.replace(tmp, path)
        if fsync:
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def with_path(exc: OSError, path: Path) -> OSError:
    """``exc``, naming ``path`` when it names no file (a failed write names none).

    The same class and errno, so callers catch it as before.
    """
    if exc.filename is not None:
        return exc
    return type(exc)(exc.errno, exc.strerror or str(exc), str(path))


@contextmanager
def named_errors(path: Path) -> Iterator[None]:
    """Re-raise an ``OSError`` of the block naming ``path`` (:func:`with_path`)."""
    try:
        yield
    except OSError as exc:
        named = with_path(exc, path)
        if named is exc:
            raise
        raise named from exc


def _write_member(archive: zipfile.ZipFile, name: str, array: np.ndarray) -> None:
    """``array`` as the member ``NAME.npy`` (numpy's format 1.0 header, then its bytes)."""
    array = np.ascontiguousarray(array)  # a view where it already is (state arrays are)
    with archive.open(f"{name}.npy", "w", force_zip64=True) as out:
        np.lib.format.write_array_header_1_0(out, np.lib.format.header_data_from_array_1_0(array))
        if array.size:
            out.write(array.reshape(-1).data.cast("B"))


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


def state_digest(state: Any) -> str:
    """SHA-256 of a state dict's content: keys, scalars and every array bit for bit.

    Two states with the same digest restore the same object (the checkpoint's tests and the
    crash-recovery benchmark compare a restarted federation with one that never crashed).
    """
    h = hashlib.sha256()
    _digest_into(h, state)
    return h.hexdigest()


def _digest_into(h: Any, value: Any) -> None:
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            h.update(str(key).encode())
            _digest_into(h, value[key])
    elif isinstance(value, list | tuple):
        h.update(b"[%d" % len(value))
        for item in value:
            _digest_into(h, item)
    elif isinstance(value, np.ndarray):
        h.update(str((value.dtype, value.shape)).encode())
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        h.update(repr(value).encode())
