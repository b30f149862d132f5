"""The consumer's checkpoint: model state, ledger, offsets and outbox, written atomically.

One file, ``checkpoint.npz``, replaced by write-then-rename (``os.replace`` after an ``fsync``
of the new file, then an ``fsync`` of the folder), so a reader sees either the previous
checkpoint or the new one, never a mix. It is a versioned state dict
(:mod:`simulator.state_files`: arrays plus one JSON document, read without pickle), holding

* the federation's mutable state (:meth:`~simulator.runner.federation.Federation.state_dict`): the
  certified head (model, perturbation, charge, the solver's Hessians and factors, the Gram
  matrix, the generator of future perturbations), every client's weights and retained flags,
  and the clients excluded after failing. What never changes after
  :func:`~simulator.runner.federation.build_federation` (feature rows, labels, id maps) is not
  written: it comes from the freshly built (or reloaded) federation, after checking a digest
  of its bytes, so the restored head is the saved one bit for bit;
* the consumer's own state (:class:`ConsumerState`, as plain data): the ledger, the next offset
  of every requests partition and a fingerprint of the last record consumed there
  (:mod:`server.kafka.offsets`), the outbox (receipts and dead letters of the last batch,
  which may not have reached the broker yet), requests held for a larger removal, the rate
  limiter's windows, offset gaps handled, counters, the run's totals, and the last batch's
  event (with the outbox's receipts, what a restart appends to the run folder when a crash
  came between the checkpoint and the folder's write: :func:`server.kafka.events.recover_batch`).

**Snapshots and the journal.** The federation's part is the head's size (170 MB at d = 1,024,
K = 10: 0.5-0.7 s to write and fsync). So a full snapshot is written every ``snapshot_every``
batches, and each batch in between appends a small record to ``journal.bin``
(:mod:`server.kafka.journal`): the requests it was given, the consumer's state after it, a
fingerprint of the federation and the head it released. :meth:`CheckpointStore.load` applies
the journaled batches again on top of the snapshot and checks each fingerprint, so a restart
restores the same state as if every batch had been snapshotted (``snapshot_every = 1``). The
snapshot holds every value the next batch reads as it is in memory, so on the same machine and
environment the replay is exact; one that is not (another BLAS or thread count) installs the
journaled head and measures it (:meth:`CheckpointStore._recover`) instead of giving up. A
journal's torn tail (a crash while appending) is cut before anything is appended after it. A
session that ends cleanly writes a snapshot, so the next start replays nothing.

**Snapshots in the background** (``background``, the consumer's default when
``snapshot_every > 1``). A due snapshot no longer holds up its batch's receipts: the batch is
journaled like the others (so it is durable at once), the state after it is copied in memory
(:meth:`~simulator.runner.federation.Federation.state_dict` shares no array that a later
removal writes into), and a thread writes that copy as the next snapshot while the next batches
run. Their journal records name the snapshot on disk and the one being written
(:mod:`server.kafka.journal`), so a crash at any moment restores the same state: before the
rename, the old snapshot and every record; after it, the new snapshot and the records that
follow it. Once the new snapshot is on disk (seen at the next save), the journal is rewritten
without the records it covers. At most one snapshot is in flight: a save that finds one still
writing when the next is due waits for it. A failed write surfaces at the next save as a
:class:`~server.kafka.errors.CheckpointError` (the journal still holds every batch).

Renaming a class no longer breaks a checkpoint. Checkpoints of the previous format (format 1,
``checkpoint.pkl``, a pickle of the head) are still read, converted on load and replaced by the
new file at the next save; read those only from folders you trust.

With the federation saved once per state folder (:mod:`server.kafka.restart`), a restart
reloads instead of rebuilding, then restores this checkpoint on top.
A lock file (``flock``) keeps a second consumer off the same folder.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import logging
import pickle
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from server.kafka import crashpoints, journal
from server.kafka.errors import CheckpointError
from server.kafka.journal import BatchInput, JournalRecord
from server.kafka.offsets import Fingerprint
from server.kafka.wire import Incoming, OutRecord
from simulator.errors import InputError, UnlearnSimError
from simulator.federation import FederatedHeadData
from simulator.head import CertifiedHead, Release
from simulator.runner.federation import Federation
from simulator.runner.pipeline import apply_batch
from simulator.runner.run_state import RunState
from simulator.state_files import host_arrays, read_state, write_state
from simulator.stream import DeletionRequest
from simulator.stream.ledger import Entry, Ledger

log = logging.getLogger(__name__)

FORMAT = 2
#: A journal record's consumer state holds the ledger entries its batch added (in order) and
#: the ledger's size after it, not the whole ledger.
LEDGER_ADDED = "ledger_added"
LEDGER_SIZE = "ledger_size"
NAME = "checkpoint.npz"
#: The previous format's file (a pickle), still read.
LEGACY_NAME = "checkpoint.pkl"


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
    #: batch ``batch``'s event as JSON (rebuilds the run folder when a crash kept it out)
    batch_event: str = ""

    def to_dict(self, *, ledger: bool = True) -> dict[str, Any]:
        """Plain data (JSON and bytes as base64) for the checkpoint.

        ``ledger=False`` leaves the ledger out (a journal record carries the entries its batch
        added instead: :meth:`CheckpointStore._journal`).
        """
        out = {"ledger": {rid: list(entry) for rid, entry in self.ledger.items()}} if ledger else {}
        return out | {
            "offsets": {str(p): o for p, o in self.offsets.items()},
            "outbox": [_out_dict(r) for r in self.outbox],
            "batch": self.batch,
            "published_until": [[t, p, o] for (t, p), o in self.published_until.items()],
            "counters": dict(self.counters),
            "run": self.run.state_dict(),
            "last_records": {str(p): list(f) for p, f in self.last_records.items()},
            "pending": [[_incoming_dict(i), r.to_json().decode()] for i, r in self.pending],
            "rate": {k: list(v) for k, v in self.rate.items()},
            "gaps": list(self.gaps),
            "sessions": self.sessions,
            "batch_event": self.batch_event,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConsumerState:
        """Inverse of :meth:`to_dict` (with the ledger)."""
        return cls(
            ledger={rid: (str(e[0]), int(e[1])) for rid, e in data["ledger"].items()},
            offsets={int(p): int(o) for p, o in data["offsets"].items()},
            outbox=[_out_record(r) for r in data["outbox"]],
            batch=int(data["batch"]),
            published_until={(str(t), int(p)): int(o) for t, p, o in data["published_until"]},
            counters={str(k): int(v) for k, v in data["counters"].items()},
            run=RunState.from_state_dict(data["run"]),
            last_records={
                int(p): (int(f[0]), int(f[1]), str(f[2])) for p, f in data["last_records"].items()
            },
            pending=[(_incoming(i), DeletionRequest.from_json(r)) for i, r in data["pending"]],
            rate={str(k): [int(t) for t in v] for k, v in data["rate"].items()},
            gaps=list(data["gaps"]),
            sessions=int(data["sessions"]),
            batch_event=str(data.get("batch_event", "")),
        )

    def __setstate__(self, saved: dict[str, Any]) -> None:
        """Upgrade a checkpoint written by an older version.

        Checkpoints written before a field existed load with its default; those written
        before the run's totals moved into ``run`` (``forgotten``, ``last_tick``) are moved.
        """
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


def federation_fingerprint(fed: Federation) -> str:
    """A digest of what a batch changes in the federation's head (journal records check it).

    The head ``W`` and ``b`` (bit for bit), its version, counters, charge and retained rows.
    """
    head = fed.head
    h = hashlib.sha256()
    for array in (head.W, head.b):
        h.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    counters = [head.model_version, head.retrains, head.removals, head.cumulative_residual]
    h.update(json.dumps([*counters, head.data.retained_count]).encode())
    return h.hexdigest()


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


class _Unpickler(pickle.Unpickler):
    """Reads format-1 checkpoints: static objects by name, renamed classes by their new name."""

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
    snapshot_every : a full snapshot every this many batches; the batches between are journaled
        (module docstring). 1: every save is a snapshot.
    min_rows : the consumer's ``min_removal_batch``, with which journaled batches are applied
        again.
    background : write the snapshots due between batches on a thread (module docstring);
        a save outside a batch (``given`` None) still writes its snapshot before returning.
    """

    def __init__(
        self,
        folder: Path,
        fed: Federation,
        *,
        fsync: bool = True,
        snapshot_every: int = 1,
        min_rows: int = 1,
        background: bool = False,
    ) -> None:
        if snapshot_every < 1:
            raise CheckpointError(f"snapshot_every must be at least 1, got {snapshot_every}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.fed = fed
        self.fsync = fsync
        self.snapshot_every = snapshot_every
        self.min_rows = min_rows
        self.background = background
        #: batches journaled since the last snapshot was taken
        self.journaled = 0
        self._token = ""
        self._writing: _SnapshotWriter | None = None
        #: seconds of the last save's parts (collect, wait, journal, copy, snapshot)
        self.last_parts: dict[str, float] = {}
        #: ledger entries written so far (a journal record carries the ones after these)
        self._ledger_size = 0
        #: what the last load did when a replay did not reproduce a journaled head (one line)
        self.recovered: str | None = None
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
        """Path of the checkpoint file."""
        return self.folder / NAME

    @staticmethod
    def exists(folder: Path) -> bool:
        """Whether ``folder`` holds a checkpoint (of this or the previous format)."""
        return (folder / NAME).exists() or (folder / LEGACY_NAME).exists()

    @property
    def journal_path(self) -> Path:
        """Path of the journal of the batches since the last snapshot."""
        return self.folder / journal.NAME

    def save(self, state: ConsumerState, given: BatchInput | None = None) -> float:
        """Persist ``state`` and the federation's; returns the seconds it took.

        ``given``: what the batch that led to ``state`` was given; with it, the batch is
        journaled unless a snapshot is due (every ``snapshot_every`` batches). Without it (a
        save outside a batch) a snapshot is written.
        """
        crashpoints.reached("before-journal", state.batch)
        t = time.perf_counter()
        parts = self.last_parts = {}
        with _timed(parts, "collect"):
            self._collect(wait=False)
        due = given is None or self.journaled + 1 >= self.snapshot_every or not self._token
        if given is None or (due and not (self.background and self._token)):
            with _timed(parts, "snapshot"):
                self.snapshot(state)
        else:
            if due:
                with _timed(parts, "wait"):
                    self._collect(wait=True)  # one snapshot in flight at most
            with _timed(parts, "journal"):
                self._journal(state, given)
            if due:
                with _timed(parts, "copy"):
                    self._start_snapshot(state)
        crashpoints.reached("after-save", state.batch)
        return time.perf_counter() - t

    def _journal(self, state: ConsumerState, given: BatchInput) -> None:
        """Append the batch that led to ``state`` (durable once this returns).

        The ledger only grows (an entry per request answered, in order), so the record carries
        the entries this batch added, not the whole ledger: a record's size and cost stay those
        of its batch however long the stream (40-80 ms per batch at 10,000 entries otherwise).
        """
        writing = () if self._writing is None else (self._writing.token,)
        added = len(state.ledger) - self._ledger_size
        consumer = state.to_dict(ledger=False)
        consumer[LEDGER_ADDED] = [
            [rid, *entry] for rid, entry in reversed(list(_last(state.ledger, added)))
        ]
        consumer[LEDGER_SIZE] = len(state.ledger)
        record = JournalRecord(
            snapshot=self._token,
            batch=state.batch,
            given=given,
            consumer=consumer,
            fingerprint=federation_fingerprint(self.fed),
            also=writing,
            released=self.fed.head.release().to_dict(),
        )
        journal.append(self.journal_path, record, fsync=self.fsync)
        self._ledger_size = len(state.ledger)
        self.journaled += 1

    def _payload(self, token: str, state: ConsumerState, *, host: bool = True) -> dict[str, Any]:
        """The snapshot's content: copies, so a later batch cannot change what is written.

        ``host=False``: the head's large arrays are copied on its device and read back by the
        writer thread (:func:`~simulator.state_files.host_arrays`), not by the batch.
        """
        return {
            "format": FORMAT,
            "scenario": self.scenario_digest,
            "static": self.static_digest,
            "snapshot": token,
            "federation": self.fed.state_dict(host=host),
            "consumer": state.to_dict(),
        }

    def snapshot(self, state: ConsumerState) -> None:
        """Write the federation's state and ``state`` atomically, then empty the journal.

        The snapshot carries a fresh token; journal records name the token they follow, so a
        crash between the two writes leaves records that the next load ignores. A snapshot
        still being written in the background is waited for first.
        """
        self._collect(wait=True)
        token = secrets.token_hex(16)
        write_state(self.path, self._payload(token, state), fsync=self.fsync)
        self._token = token
        self._ledger_size = len(state.ledger)
        self.journaled = 0
        journal.clear(self.journal_path, fsync=self.fsync)
        self._drop_legacy()

    def _start_snapshot(self, state: ConsumerState) -> None:
        """Take the state after the batch just journaled; a thread writes it (module doc)."""
        token = secrets.token_hex(16)
        writer = _SnapshotWriter(token, state.batch, self._payload(token, state, host=False))
        writer.journal_end = journal.size(self.journal_path)  # later records follow it
        writer.thread = threading.Thread(
            target=self._write_snapshot, args=(writer,), name="checkpoint-snapshot"
        )
        writer.thread.start()
        self._writing = writer
        self.journaled = 0

    def _write_snapshot(self, writer: _SnapshotWriter) -> None:
        """The writer thread's work (a seam: the tests hold it to stop time before a rename)."""
        writer.write(self.path, self.fsync)

    def _collect(self, *, wait: bool) -> None:
        """Install a background snapshot that is on disk (``wait``: wait for it to be).

        Raises
        ------
        CheckpointError
            The snapshot could not be written (the journal still holds every batch).
        """
        writer = self._writing
        if writer is None or (not wait and writer.thread.is_alive()):
            return
        writer.thread.join()
        self._writing = None
        if writer.error is not None:
            raise CheckpointError(
                f"{self.path}: the snapshot after batch {writer.batch} could not be written "
                f"({writer.error}); the journal still holds every batch"
            ) from writer.error
        self._token = writer.token
        crashpoints.reached("snapshot-after-rename", writer.batch)
        # the records appended since it started, and only they, follow it (``also``)
        journal.keep_from(
            self.journal_path,
            writer.journal_end,
            fsync=self.fsync,
            written=lambda: crashpoints.reached("trim-before-rename", writer.batch),
        )
        crashpoints.reached("after-trim", writer.batch)
        self._drop_legacy()

    def _drop_legacy(self) -> None:
        legacy = self.folder / LEGACY_NAME
        if legacy.exists():  # converted: the new file is the checkpoint from now on
            legacy.unlink()

    def load(self) -> ConsumerState | None:
        """Install the saved state into the federation and return the consumer's (None: none).

        Raises
        ------
        CheckpointError
            The checkpoint was written for another scenario or another build of it.
        """
        if not self.path.exists():
            return self._load_legacy()
        try:
            saved = read_state(self.path)
        except InputError as exc:
            raise CheckpointError(str(exc)) from exc
        if saved.get("format") != FORMAT:
            raise CheckpointError(f"{self.path}: unknown checkpoint format {saved.get('format')}")
        self._check(saved["scenario"], saved["static"])
        try:
            self.fed.load_state_dict(saved["federation"])
            state = ConsumerState.from_dict(saved["consumer"])
        except (InputError, KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{self.path}: cannot restore it ({exc})") from exc
        self._token = str(saved.get("snapshot", ""))
        records = journal.read(self.journal_path, self._token) if self._token else []
        journal.trim(self.journal_path, fsync=self.fsync)  # a torn tail: appends go after it
        diverged: list[JournalRecord] = []
        for record in records:
            state = self._replay(state, record, diverged)
        self.journaled = len(records)
        self._ledger_size = len(state.ledger)
        if diverged:
            self.recovered = self._recover(diverged)
            self.snapshot(state)  # the recovered state, so that no later start replays again
        return state

    def _recover(self, diverged: list[JournalRecord]) -> str:
        """Make the head consistent after replays that did not reproduce it; what was done.

        Each diverged record's released head was installed as it replayed
        (:meth:`_replay`); the last is measured where it is (one exact pass,
        :meth:`~simulator.head.CertifiedHead.reanchor`). Its charge is the
        larger of the journaled one and the measured residual, so every receipt already
        published stays true. Records written before heads were journaled keep the replayed
        head instead (its charge re-measured the same way).
        """
        exact = self.fed.head.reanchor()
        batches = f"{diverged[0].batch}" + (f"-{diverged[-1].batch}" if len(diverged) > 1 else "")
        kept = (
            "installed the journaled heads"
            if all(r.released is not None for r in diverged)
            else "kept the replayed heads (records without a journaled head: receipts published "
            "for these batches may differ from them in their last digits)"
        )
        line = (
            f"{self.journal_path}: batch(es) {batches}, applied again, did not reproduce the "
            f"journaled head bit for bit (other library versions or thread counts?); {kept} "
            f"and re-measured the last one (exact residual {exact:.6g}, charge "
            f"{self.fed.head.cumulative_residual:.6g} of budget {self.fed.head.budget:.6g})"
        )
        log.warning("%s", line)
        return line

    def reload(self) -> ConsumerState:
        """The last saved state, installed into the federation again (a batch undone).

        A snapshot still being written is waited for first. Used when the federation ran
        ahead of the checkpoint (:mod:`server.kafka.delivery`).
        """
        self._collect(wait=True)
        state = self.load()
        if state is None:
            raise CheckpointError(f"{self.folder}: no checkpoint to restore")
        return state

    def _replay(
        self, before: ConsumerState, record: JournalRecord, diverged: list[JournalRecord]
    ) -> ConsumerState:
        """Apply a journaled batch again on ``before``; the consumer state after it.

        A batch whose head differs from the journaled fingerprint is added to ``diverged``
        and its journaled head installed (:meth:`_recover` finishes the job).

        Raises
        ------
        CheckpointError
            The batch fails, or answers other requests than the ones journaled (the journal
            does not belong to this federation).
        """
        where = f"{self.journal_path}: batch {record.batch}"
        replayed = dict(before.ledger)
        try:
            requests = [DeletionRequest.from_json(r) for r in record.given.requests]
            apply_batch(
                self.fed,
                before.run,
                requests,
                ledger=Ledger(replayed),
                denied=record.given.denied,
                min_rows=self.min_rows,
            )
            consumer = dict(record.consumer)
            whole = LEDGER_ADDED not in consumer  # a record written with the whole ledger
            added = [(str(r), str(s), int(v)) for r, s, v in consumer.pop(LEDGER_ADDED, [])]
            size = int(consumer.pop(LEDGER_SIZE, len(replayed)))
            after = ConsumerState.from_dict(consumer if whole else {**consumer, "ledger": {}})
            released = None if record.released is None else Release.from_dict(record.released)
        except (UnlearnSimError, KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{where} cannot be applied again ({exc})") from exc
        if not whole:
            new = [(rid, *e) for rid, e in _last(replayed, len(replayed) - len(before.ledger))]
            if len(replayed) != size or new[::-1] != added:
                raise CheckpointError(
                    f"{where}, applied again, answered other requests than the ones journaled "
                    "(the journal was written for another federation); start over in a new "
                    "state folder"
                )
            after.ledger = replayed
        if federation_fingerprint(self.fed) != record.fingerprint:
            diverged.append(record)
            if released is not None:
                self.fed.head.install(released)
        return after

    def _check(self, scenario: str, static: str) -> None:
        if scenario != self.scenario_digest:
            raise CheckpointError(
                f"{self.folder} holds a checkpoint of another scenario (or other overrides); "
                "use another state folder or delete it to start over"
            )
        if static != self.static_digest:
            raise CheckpointError(
                f"{self.folder}: the federation rebuilt from the scenario differs from the "
                "checkpointed one (the build is not reproducible here)"
            )

    def _load_legacy(self) -> ConsumerState | None:
        """Read a format-1 checkpoint (a pickle of the head) and install it as state dicts."""
        path = self.folder / LEGACY_NAME
        if not path.exists():
            return None
        with path.open("rb") as f:
            header = pickle.load(f)
            if header.get("format") != 1:
                raise CheckpointError(f"{path}: unknown checkpoint format {header}")
            self._check(header["scenario"], header["static"])
            head = cast(CertifiedHead, _Unpickler(f, self._static).load())
            state = cast(ConsumerState, _Unpickler(f, self._static).load())
        data = cast(FederatedHeadData, head.data)
        self.fed.load_state_dict(
            {
                "version": 1,
                "head": head.state_dict(),
                "clients": {str(c): cl.state_dict() for c, cl in data.clients.items()},  # type: ignore[attr-defined]
                "excluded": {str(c): r for c, r in data.excluded.items()},
            }
        )
        return state

    def close(self) -> None:
        """Wait for a snapshot still being written, then release the folder's lock."""
        try:
            self._collect(wait=True)
        except CheckpointError as exc:  # never mask what is ending the session
            log.warning("%s", exc)
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _SnapshotWriter:
    """A snapshot being written on its own thread (:meth:`CheckpointStore._start_snapshot`)."""

    token: str
    batch: int
    payload: dict[str, Any]
    thread: threading.Thread = field(default_factory=threading.Thread)
    error: BaseException | None = None
    #: the journal's size when the snapshot was taken: the records after it follow it
    journal_end: int = 0

    def write(self, path: Path, fsync: bool) -> None:
        try:
            written = partial(crashpoints.reached, "snapshot-before-rename", self.batch)
            write_state(path, host_arrays(self.payload), fsync=fsync, written=written)
        except BaseException as exc:  # handed to the consumer's thread
            self.error = exc
        finally:
            self.payload = {}  # the copy is on disk (or lost): free its memory


@contextmanager
def _timed(parts: dict[str, float], name: str) -> Iterator[None]:
    """Add the block's seconds to ``parts[name]``."""
    t = time.perf_counter()
    try:
        yield
    finally:
        parts[name] = parts.get(name, 0.0) + time.perf_counter() - t


def _last(entries: dict[str, Entry], count: int) -> Iterator[tuple[str, Entry]]:
    """The last ``count`` items of ``entries`` (insertion order), newest first: O(count)."""
    return islice(reversed(entries.items()), max(count, 0))


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _unb64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def _headers(headers: Any) -> list[list[str | None]]:
    return [[k, _b64(v)] for k, v in headers]


def _unheaders(headers: Any) -> tuple[tuple[str, bytes], ...]:
    return tuple((str(k), _unb64(v) or b"") for k, v in headers)


def _out_dict(r: OutRecord) -> dict[str, Any]:
    return {
        "topic": r.topic, "key": _b64(r.key), "value": _b64(r.value),
        "headers": _headers(r.headers),
    }  # fmt: skip


def _out_record(d: dict[str, Any]) -> OutRecord:
    return OutRecord(
        d["topic"], _unb64(d["key"]), _unb64(d["value"]) or b"", _unheaders(d["headers"])
    )


def _incoming_dict(i: Incoming) -> dict[str, Any]:
    return {
        "partition": i.partition, "offset": i.offset, "key": _b64(i.key), "value": _b64(i.value),
        "timestamp_ms": i.timestamp_ms, "headers": _headers(i.headers),
    }  # fmt: skip


def _incoming(d: dict[str, Any]) -> Incoming:
    return Incoming(
        int(d["partition"]), int(d["offset"]), _unb64(d["key"]), _unb64(d["value"]),
        int(d["timestamp_ms"]), _unheaders(d["headers"]),
    )  # fmt: skip
