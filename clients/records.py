"""The Flower wire format of the client protocol: message types and record conversions.

Both sides use this module: the ClientApp (``clients/client_app.py``) answers these message
types, the server's transport (``server/flower/``) sends them. Arrays travel as Flower
``ArrayRecord`` entries named like the core's flat dicts (:mod:`simulator.federation.codec`,
:class:`simulator.federation.ClientSnapshot`); scalars as ``ConfigRecord`` entries.

=================  ===============================================================
message type       what the client does
=================  ===============================================================
``query.hello``    says which partition it holds (``partition-id`` node config)
``train``          one FedAvg round of the extractor from the global weights
``train.setup``    builds its head rows from the frozen extractor and RFF map
``query.gradhess`` loss / gradient / Hessian sums of its retained rows at a head
``train.unlearn``  deletes rows, refits its decorrelation weights, returns the change
``query.weights``  current weights of its rows (for the retrained reference)
``evaluate``       its report: rows, deletions received, accuracy of a head
=================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord
from numpy.typing import NDArray

HELLO = "query.hello"
TRAIN = "train"
SETUP = "train.setup"
STATISTICS = "query.gradhess"
UNLEARN = "train.unlearn"
WEIGHTS = "query.weights"
REPORT = "evaluate"

#: Record names inside a message's ``RecordDict``.
ARRAYS = "arrays"  # FedAvg weights (both directions)
HEAD = "head"  # W, W_ref, hessian_at
RFF = "rff"  # omega, phase
IDS = "ids"  # sample ids to delete
CONFIG = "config"  # scalars of a request
REPLY = "reply"  # scalars of an answer
RESULT = "result"  # arrays of an answer
METRICS = "metrics"  # MetricRecord of an answer
TIMING = "timing"  # seconds the handler took (added by :func:`clients.client_app.timing_mod`)

#: ``context.state`` entries of a client.
STATE_SHARD = "shard"
STATE_SHARD_META = "shard-meta"


def to_array_record(arrays: Mapping[str, NDArray[Any]]) -> ArrayRecord:
    """Numpy arrays by name -> ``ArrayRecord`` (dtype and shape kept, 0-d included)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def from_array_record(record: ArrayRecord) -> dict[str, NDArray[Any]]:
    """Inverse of :func:`to_array_record`."""
    return {k: v.numpy() for k, v in record.items()}


def config(values: Mapping[str, Any]) -> ConfigRecord:
    """A ``ConfigRecord`` of scalars (None values are left out)."""
    return ConfigRecord({k: v for k, v in values.items() if v is not None})


def get_number(record: Mapping[str, Any], key: str, default: float | None = None) -> float:
    """A numeric entry of a ``ConfigRecord`` / ``MetricRecord`` (KeyError names a missing key)."""
    value = record[key] if default is None else record.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"record entry {key!r} is not a number: {value!r}")
    return float(value)


def get_int(record: Mapping[str, Any], key: str) -> int:
    """An integer entry of a ``ConfigRecord`` / ``MetricRecord``."""
    return int(get_number(record, key))
