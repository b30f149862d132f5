"""The Flower wire format of the client protocol: message types and record conversions.

Both sides use this module: the ClientApp (``clients/client_app.py``) answers these message
types, the server's transport (``server/flower/``) sends them.

=================  ===============================================================
message type       what the client does
=================  ===============================================================
``query.hello``    says which partition it holds (``partition-id`` node config)
``train``          one FedAvg round of the extractor from the global weights
``train.setup``    builds its head rows from the frozen extractor and RFF map
``query.gradhess`` loss / gradient / Hessian sums of its retained rows at a head
``train.unlearn``  deletes rows, refits its decorrelation weights, returns the change
                   (and, when asked, its new row weights)
``query.weights``  current weights of its rows (for the retrained reference)
``evaluate``       its report: rows, deletions received, accuracy of a head
=================  ===============================================================

Every message, both ways, has at most two records: ``config`` (a ``ConfigRecord`` of scalars)
and ``arrays`` (an ``ArrayRecord`` holding **one** packed ``Array``). The packed array carries
named groups of named numpy arrays (``{"head": {"W": ..., "W_ref": ...}, "ids": {...}}``,
group and array names as the core's flat dicts, :mod:`simulator.federation.codec`), so a
message is five or six Flower objects whatever it carries: on the Deployment Engine every
object is one HTTP request per hop (six hops per round trip), so this is what keeps a small
message cheap (``docs/flower.md``, "Cost of a round trip").
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from numpy.typing import NDArray

HELLO = "query.hello"
TRAIN = "train"
SETUP = "train.setup"
STATISTICS = "query.gradhess"
UNLEARN = "train.unlearn"
WEIGHTS = "query.weights"
REPORT = "evaluate"

#: Record names inside a message's ``RecordDict``.
CONFIG = "config"  # scalars (request or reply)
ARRAYS = "arrays"  # the one packed array (:func:`pack`)
#: The array inside :data:`ARRAYS`.
PACKED = "packed"
#: Config entry the ClientApp adds to every reply: seconds its handler took
#: (:func:`clients.client_app.timing_mod`), so the server separates them from polling.
HANDLER_SECONDS = "handler-seconds"

#: Array groups inside a packed record.
MODEL = "model"  # FedAvg extractor weights (both directions)
HEAD = "head"  # W, W_ref, hessian_at
RFF = "rff"  # omega, phase
IDS = "ids"  # sample ids to delete
RETAINED = "retained"  # the rows a client keeps after a whole-model retrain (train, setup)
RESULT = "result"  # arrays of an answer
ROW_WEIGHTS = "weights"  # a client's row weights (query.weights, train.unlearn)

#: ``context.state`` entries of a client.
STATE_SHARD = "shard"
STATE_SHARD_META = "shard-meta"

Groups = Mapping[str, Mapping[str, NDArray[Any]]]
_PREFIX = struct.Struct("<Q")  # header length
_ALIGN = 8


def pack(groups: Groups) -> ArrayRecord:
    """Named groups of numpy arrays -> an ``ArrayRecord`` with one ``uint8`` array.

    Layout: 8-byte header length, a JSON header (group, name, dtype, shape, offset, size of
    every array), then each array's bytes (C order) at an 8-byte aligned offset. Dtype and
    shape are kept exactly (0-d included); object arrays are refused.
    """
    entries: list[list[Any]] = []
    chunks: list[bytes] = []
    offset = 0
    for group, arrays in groups.items():
        for name, value in arrays.items():
            arr = np.asarray(value, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
            if arr.dtype.hasobject:
                raise TypeError(f"cannot pack object array {group}/{name}")
            data = arr.tobytes()
            pad = -offset % _ALIGN
            chunks.append(b"\0" * pad + data)
            offset += pad
            entries.append([group, name, arr.dtype.str, list(arr.shape), offset, len(data)])
            offset += len(data)
    header = json.dumps({"v": 1, "arrays": entries}, separators=(",", ":")).encode()
    head = _PREFIX.pack(len(header)) + header
    head += b"\0" * (-len(head) % _ALIGN)
    blob = head + b"".join(chunks)
    return ArrayRecord({PACKED: Array(np.frombuffer(blob, dtype=np.uint8))})


def unpack(record: ArrayRecord) -> dict[str, dict[str, NDArray[Any]]]:
    """Inverse of :func:`pack` (every array a fresh, writable copy)."""
    blob = record[PACKED].numpy().tobytes()
    (size,) = _PREFIX.unpack_from(blob)
    start = _PREFIX.size + size
    header = json.loads(blob[_PREFIX.size : start])
    base = start + (-start % _ALIGN)
    out: dict[str, dict[str, NDArray[Any]]] = {}
    for group, name, dtype, shape, offset, length in header["arrays"]:
        kind = np.dtype(dtype)
        if kind.hasobject or base + offset + length > len(blob):
            raise ValueError(f"malformed packed array {group}/{name}")
        flat = np.frombuffer(blob, dtype=kind, count=length // max(kind.itemsize, 1),
                             offset=base + offset)  # fmt: skip
        out.setdefault(group, {})[name] = flat.reshape(tuple(shape)).copy()
    return out


def content(config: Mapping[str, Any] | None = None, arrays: Groups | None = None) -> RecordDict:
    """A message's content: scalars (``None`` values left out) and packed array groups."""
    records: dict[str, ArrayRecord | MetricRecord | ConfigRecord] = {}
    if config is not None:
        records[CONFIG] = ConfigRecord({k: v for k, v in config.items() if v is not None})
    if arrays:
        records[ARRAYS] = pack(arrays)
    return RecordDict(records)


def config_of(message_content: RecordDict) -> ConfigRecord:
    """The scalars of a message (empty when it has none)."""
    return message_content.config_records.get(CONFIG, ConfigRecord())


def arrays_of(message_content: RecordDict) -> dict[str, dict[str, NDArray[Any]]]:
    """The array groups of a message (empty when it has none)."""
    record = message_content.array_records.get(ARRAYS)
    return {} if record is None else unpack(record)


def get_number(record: Mapping[str, Any], key: str, default: float | None = None) -> float:
    """A numeric entry of a ``ConfigRecord`` (KeyError names a missing key)."""
    value = record[key] if default is None else record.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"record entry {key!r} is not a number: {value!r}")
    return float(value)


def get_int(record: Mapping[str, Any], key: str) -> int:
    """An integer entry of a ``ConfigRecord``."""
    return int(get_number(record, key))
