"""The consumer's checkpoint: model state, ledger, offsets and outbox, written atomically.

One file, ``checkpoint.pkl``, replaced by write-then-rename (``os.replace`` after an ``fsync``
of the new file, then an ``fsync`` of the folder), so a reader sees either the previous
checkpoint or the new one, never a mix. It holds

* the certified head with everything it reaches: the federated head data and every client's
  retained mask and decorrelation weights, the solver's factors, the perturbation and the
  random generator of future retrains. Arrays and maps that never change after
  :func:`~simulator.runner.setup.build_federation` (feature rows, labels, id maps) are not
  written: they are pickled as references and taken from the freshly built federation on
  restore, after checking a digest of their bytes, so the restored head is the saved one
  bit for bit;
* the ledger, the next offset of every requests partition and a fingerprint of the last record
  consumed there (:mod:`server.kafka.offsets`), the outbox (receipts and dead letters of the
  last batch, which may not have reached the broker yet), requests held for a larger removal,
  the rate limiter's windows, offset gaps handled, and counters.

With the federation saved once per state folder (:mod:`server.kafka.restart`), a restart
reloads instead of rebuilding, then restores this checkpoint on top.

The file is a pickle: read checkpoints only from folders you trust (your own state folder).
A lock file (``flock``) keeps a second consumer off the same folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from server.kafka.errors import CheckpointError
from server.kafka.offsets import Fingerprint
from server.kafka.records import Incoming, OutRecord
from simulator.federation import FederatedHeadData
from simulator.head import CertifiedHead
from simulator.runner.run_state import RunState
from simulator.runner.setup import Federation
from simulator.stream import DeletionRequest
from simulator.stream.ledger import Entry

FORMAT = 1
NAME = "checkpoint.pkl"


@dataclass
class ConsumerState:
    """What the consumer persists besides the model (the run's totals in ``run``)."""

    ledger: dict[str, Entry] = field(default_factory=dict)
    #: requests partition -> next offset to read
    offsets: dict[int, int] = field(default_factory=dict)
    #: receipts and dead letters of batch ``batch``; maybe not published yet
    outbox: list[OutRecord] = field(default_factory=list)
    batch: int = 0
    #: (topic, partition) -> an offset at or before the outbox's first record there
    published_until: dict[tuple[str, int], int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    #: the pipeline's totals: forgotten ids, batches, next reference checkpoint, last tick
    run: RunState = field(default_factory=RunState)
    #: requests partition -> the last record consumed there (detects a re-written log)
    last_records: dict[int, Fingerprint] = field(default_factory=dict)
    #: accepted requests held until their client's removal is large enough, with their records
    pending: list[tuple[Incoming, DeletionRequest]] = field(default_factory=list)
    #: subject -> timestamps (ms) of its recent accepted requests (rate limit)
    rate: dict[str, list[int]] = field(default_factory=dict)
    #: offset gaps found and how they were handled
    gaps: list[dict[str, Any]] = field(default_factory=list)
    #: consuming sessions (process starts) on this state so far
    sessions: int = 0

    def __setstate__(self, saved: dict[str, Any]) -> None:
        """Checkpoints written before a field existed load with its default; those written
        before the run's totals moved into ``run`` (``forgotten``, ``last_tick``) are moved."""
        saved = dict(saved)
        if "run" not in saved:
            saved["run"] = RunState(
                forgotten=list(saved.pop("forgotten", [])),
                last_tick=int(saved.pop("last_tick", 0)),
                batches=int(saved.get("batch", 0)),
            )
        self.__dict__.update(ConsumerState().__dict__)
        self.__dict__.update(saved)


TRANSPORT = "transport"


def static_objects(fed: Federation) -> dict[str, Any]:
    """Objects that a removal never changes, by a stable name (not written to checkpoints).

    Feature rows and labels of every client, its id arrays and maps, and the server's owner
    map. Arrays are made read-only so that an in-place change would fail loudly.
    """
    out: dict[str, Any] = {}
    owner = getattr(fed.head_data, "_owner", None)
    if isinstance(owner, dict):
        out["owner"] = owner
    for cid, client in fed.clients.items():
        for name in ("_ids", "_local"):
            obj = getattr(client, name, None)
            if obj is not None:
                out[f"client{cid}.{name}"] = obj
        for name in ("_X", "_Y"):
            obj = getattr(client.data, name, None)
            if obj is not None:
                out[f"client{cid}.data.{name}"] = obj
    for obj in out.values():
        if isinstance(obj, np.ndarray):
            obj.flags.writeable = False
    if fed.transport is not None:  # how clients are reached (a Flower grid is not picklable)
        out[TRANSPORT] = fed.transport
    return out


def digest_static(objects: dict[str, Any]) -> str:
    """Digest of the static objects' contents (to refuse a checkpoint of another build)."""
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(objects):
        obj = objects[key]
        h.update(key.encode())
        if key == TRANSPORT:
            h.update(type(obj).__name__.encode())
            continue
        if isinstance(obj, np.ndarray):
            h.update(str((obj.dtype, obj.shape)).encode())
            h.update(np.ascontiguousarray(obj).data)
        else:
            h.update(pickle.dumps(obj, protocol=5))
    return h.hexdigest()


class _Pickler(pickle.Pickler):
    def __init__(self, file: IO[bytes], static: dict[int, str]) -> None:
        super().__init__(file, protocol=5)
        self._static = static

    def persistent_id(self, obj: Any) -> str | None:
        return self._static.get(id(obj))


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], static: dict[str, Any]) -> None:
        super().__init__(file)
        self._static = static

    def find_class(self, module: str, name: str) -> Any:
        """Classes renamed since a checkpoint was written load under their new name."""
        if (module, name) == (__name__, "StreamState"):
            return ConsumerState
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        try:
            return self._static[pid]
        except KeyError:
            raise CheckpointError(f"checkpoint refers to {pid!r}, unknown to this build") from None


class CheckpointStore:
    """Saves and restores the consumer's state in ``folder`` for the federation ``fed``.

    Parameters
    ----------
    folder : the state folder (created; locked while the store is open).
    fed : the federation built from the scenario; ``restore`` installs the saved head in it.
    fsync : flush to disk before renaming (survives a machine crash, not only a process kill).
    """

    def __init__(self, folder: Path, fed: Federation, *, fsync: bool = True) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fed = fed
        self.fsync = fsync
        self._lock = (self.folder / "lock").open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise CheckpointError(f"another consumer is using {self.folder}") from None
        self._static = static_objects(fed)
        self._static_ids = {id(obj): key for key, obj in self._static.items()}
        self.scenario_digest = hashlib.sha256(fed.scenario.model_dump_json().encode()).hexdigest()
        self.static_digest = digest_static(self._static)

    @property
    def path(self) -> Path:
        return self.folder / NAME

    def save(self, state: ConsumerState) -> float:
        """Write the head and ``state`` atomically; returns the seconds it took."""
        t = time.perf_counter()
        buf = io.BytesIO()
        header = {
            "format": FORMAT,
            "scenario": self.scenario_digest,
            "static": self.static_digest,
        }
        pickle.dump(header, buf, protocol=5)
        _Pickler(buf, self._static_ids).dump(self.fed.head)
        pickle.dump(state, buf, protocol=5)
        tmp = self.folder / (NAME + ".tmp")
        with tmp.open("wb") as f:
            f.write(buf.getbuffer())
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self.fsync:
            fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return time.perf_counter() - t

    def load(self) -> ConsumerState | None:
        """Install the saved head into the federation and return the saved state (None: none).

        Raises
        ------
        CheckpointError
            The checkpoint was written for another scenario or another build of it.
        """
        if not self.path.exists():
            return None
        with self.path.open("rb") as f:
            header = pickle.load(f)
            if header.get("format") != FORMAT:
                raise CheckpointError(f"{self.path}: unknown checkpoint format {header}")
            if header["scenario"] != self.scenario_digest:
                raise CheckpointError(
                    f"{self.path} belongs to another scenario (or other overrides); use another "
                    "state folder or delete it to start over"
                )
            if header["static"] != self.static_digest:
                raise CheckpointError(
                    f"{self.path}: the federation rebuilt from the scenario differs from the "
                    "checkpointed one (the build is not reproducible here)"
                )
            head = cast(CertifiedHead, _Unpickler(f, self._static).load())
            state = cast(ConsumerState, _Unpickler(f, self._static).load())
        self.fed.head = head
        self.fed.head_data = cast(FederatedHeadData, head.data)
        self.fed.clients = dict(self.fed.head_data.clients)  # type: ignore[arg-type]
        return state

    def close(self) -> None:
        """Release the folder's lock."""
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
