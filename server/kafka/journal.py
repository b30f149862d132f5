"""The checkpoint's journal: the batches applied since the last full snapshot.

A full checkpoint holds the federation's state, whose size is the head's: the solver's (K, d, d)
Hessians and factors and the Gram matrix, about 170 MB at d = 1,024, K = 10, written and
fsync'd in 0.5-0.7 s, which used to be paid after every batch. Between two snapshots
(:class:`~server.kafka.checkpoint.CheckpointStore`, ``snapshot_every``) a batch appends one
record here instead: the requests it was given (held ones first, in order), the gate's refusals
by position, the consumer's state after the batch (ledger, offsets, outbox, ...), and a
fingerprint of the federation after it. A restart loads the snapshot, applies the journal's
batches again in order (:func:`simulator.runner.pipeline.apply_batch`: the removal, any
retrain and the clients' refits are functions of the state and the requests), checks every
fingerprint, and resumes from the last record's consumer state: the same head, bit for bit, and
the same exactly-once outbox as after a full checkpoint.

Format: records of ``[8-byte big-endian length][32-byte SHA-256 of the payload][payload]``,
the payload JSON. A record cut short or with a wrong digest (a crash while appending) ends the
journal: the batch it described was not published (publication follows the append), so its
requests are read again from the log, and a restart cuts that tail off before anything is
appended after it (:func:`trim`). Each record also holds the head released after its batch
(``released``), so that a replay that does not reproduce it bit for bit can install the head
that was published. Every record names the snapshot it follows (a random token written into
the snapshot), so a journal left over from before a newer snapshot is never replayed on top of
it. While a newer snapshot is being written in the background
(:class:`~server.kafka.checkpoint.CheckpointStore`), a record names that one too (``also``): it
follows both, since the newer snapshot holds the state after the records of the older one.
Once that snapshot is on disk the journal is rewritten with the records that follow it
(:func:`keep_from`).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.state_files import named_errors, replace_file

NAME = "journal.bin"
_HEADER = struct.Struct(">Q32s")
#: A record larger than this is taken for garbage (the consumer state of a huge ledger stays
#: far below it).
MAX_RECORD_BYTES = 1 << 32


@dataclass(frozen=True)
class BatchInput:
    """What a batch was given: the requests as JSON, in order, and the gate's refusals."""

    requests: tuple[str, ...]
    denied: dict[int, str]


@dataclass(frozen=True)
class JournalRecord:
    """One journaled batch (module docstring)."""

    snapshot: str
    batch: int
    given: BatchInput
    consumer: dict[str, Any]
    fingerprint: str
    #: snapshots being written when the record was appended, which it follows as well
    also: tuple[str, ...] = ()
    #: the head released after the batch (:meth:`simulator.head.Release.to_dict`); None in
    #: records written before heads were journaled
    released: dict[str, Any] | None = None

    def follows(self, snapshot: str) -> bool:
        """Whether this record applies on top of the snapshot ``snapshot``."""
        return snapshot == self.snapshot or snapshot in self.also

    def to_bytes(self) -> bytes:
        """The record as written: header and JSON payload."""
        payload = json.dumps(
            {
                "snapshot": self.snapshot,
                "batch": self.batch,
                "requests": list(self.given.requests),
                "denied": {str(i): why for i, why in self.given.denied.items()},
                "consumer": self.consumer,
                "fingerprint": self.fingerprint,
                "also": list(self.also),
                "released": self.released,
            },
            allow_nan=True,
        ).encode()
        return _HEADER.pack(len(payload), hashlib.sha256(payload).digest()) + payload

    @classmethod
    def from_payload(cls, payload: bytes) -> JournalRecord:
        """Inverse of :meth:`to_bytes`'s payload."""
        data = json.loads(payload)
        return cls(
            snapshot=str(data["snapshot"]),
            batch=int(data["batch"]),
            given=BatchInput(
                requests=tuple(str(r) for r in data["requests"]),
                denied={int(i): str(why) for i, why in data["denied"].items()},
            ),
            consumer=data["consumer"],
            fingerprint=str(data["fingerprint"]),
            also=tuple(str(t) for t in data.get("also", ())),  # absent before background snapshots
            released=data.get("released"),
        )


def append(path: Path, record: JournalRecord, *, fsync: bool) -> None:
    """Append ``record`` to the journal at ``path`` (flushed, and fsync'd when asked)."""
    with named_errors(path), path.open("ab") as f:
        f.write(record.to_bytes())
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def read(path: Path, snapshot: str) -> list[JournalRecord]:
    """The records of ``path`` that follow the snapshot ``snapshot``, in order.

    Reading stops at the first record cut short or whose digest does not match (a crash while
    appending); records of another snapshot are skipped.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    records = (JournalRecord.from_payload(data[s:e]) for _, s, e in _frames(data))
    return [record for record in records if record.follows(snapshot)]


def _frames(data: bytes, start: int = 0) -> Iterator[tuple[int, int, int]]:
    """``(record start, payload start, payload end)`` of each whole record from ``start``.

    Stops at the first record cut short or whose digest does not match.
    """
    pos = start
    while pos + _HEADER.size <= len(data):
        size, digest = _HEADER.unpack_from(data, pos)
        begin, end = pos + _HEADER.size, pos + _HEADER.size + size
        if size > MAX_RECORD_BYTES or end > len(data):
            return
        if hashlib.sha256(data[begin:end]).digest() != digest:
            return
        yield pos, begin, end
        pos = end


def trim(path: Path, *, fsync: bool) -> int:
    """Cut a torn or corrupt tail off the journal at ``path``; the bytes dropped.

    A crash (or a full disk) while appending leaves part of a record at the end. Reading stops
    there, so a record appended after it would never be read: a restart cuts the tail first,
    keeping every whole record (of any snapshot) before it.
    """
    data = path.read_bytes() if path.exists() else b""
    frames = list(_frames(data))
    end = frames[-1][2] if frames else 0
    if end == len(data):
        return 0
    _replace(path, data[:end], fsync=fsync)
    return len(data) - end


def size(path: Path) -> int:
    """Bytes in the journal at ``path`` (0 when there is none): where the next record goes."""
    return path.stat().st_size if path.exists() else 0


def keep_from(
    path: Path, offset: int, *, fsync: bool, written: Callable[[], None] | None = None
) -> None:
    """Replace the journal by its whole records from byte ``offset`` on, atomically.

    For a caller that knows where the records that follow a new snapshot begin (the journal's
    :func:`size` when the snapshot was taken): they are copied as they are, no JSON decoded or
    encoded again (decoding ten batches' records to drop them took 70-90 ms on the consumer's
    thread). A record cut short or with a wrong digest ends what is kept, as in :func:`read`.
    ``written`` is called once the new journal is written, before it replaces the old one.
    """
    data = path.read_bytes() if path.exists() else b""
    frames = list(_frames(data, offset))
    kept = data[offset : frames[-1][2]] if frames else b""
    _replace(path, kept, fsync=fsync, written=written)


def _replace(
    path: Path, data: bytes, *, fsync: bool, written: Callable[[], None] | None = None
) -> None:
    """Replace the journal at ``path`` by ``data`` atomically (a new file, then a rename).

    With ``fsync`` the folder is synced after the rename: records appended later go to the new
    file, which a crash must not swap back for the old one.
    """
    tmp = path.with_name(path.name + ".tmp")
    with named_errors(tmp), tmp.open("wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    if written is not None:
        written()
    replace_file(tmp, path, fsync=fsync)


def clear(path: Path, *, fsync: bool) -> None:
    """Empty the journal (after a snapshot that covers every record in it)."""
    with named_errors(path), path.open("wb") as f:
        if fsync:
            os.fsync(f.fileno())
