"""Checkpoints as a snapshot plus a journal of the batches since (``server/kafka/journal.py``).

The consumer's batches are replayed here without a broker, as :meth:`DeletionConsumer._handle`
persists them: the federation changes through ``apply_batch``, the consumer state (ledger,
batch number) with it, and the store journals each batch between snapshots. A second store
on a fresh copy of the federation must restore the same head, bit for bit, from the snapshot
and the journal; a journal cut short restores the last complete batch; a journal whose replay
gives another head is refused; a journal left from before a newer snapshot is ignored.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import threading
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka import journal
from server.kafka.checkpoint import CheckpointStore, ConsumerState, federation_fingerprint
from server.kafka.errors import CheckpointError
from server.kafka.journal import BatchInput
from server.kafka.producer import scenario_requests
from simulator.runner.federation import Federation, build_federation
from simulator.runner.pipeline import apply_batch
from simulator.runner.run_state import RunState
from simulator.state_files import read_state, write_state
from simulator.stream.ledger import Ledger

BATCH = 12


@pytest.fixture(scope="module")
def initial() -> Federation:
    sc = scenario(TEN_CLIENTS)
    return build_federation(sc)


def consume(
    fed: Federation, store: CheckpointStore, batches: int, state: ConsumerState | None = None
) -> tuple[ConsumerState, list[str]]:
    """Apply ``batches`` more batches of the scenario's requests as the consumer does (after
    ``state``'s); returns the consumer state and the federation's fingerprint after each."""
    requests = scenario_requests(fed.scenario)
    state = state or ConsumerState(run=RunState(evaluate=False))
    prints = []
    for _ in range(batches):
        i = state.batch
        chunk = requests[i * BATCH : (i + 1) * BATCH]
        apply_batch(fed, state.run, chunk, ledger=Ledger(state.ledger))
        state.batch += 1
        state.offsets = {0: (i + 1) * BATCH}
        store.save(state, BatchInput(tuple(r.to_json().decode() for r in chunk), {}))
        prints.append(federation_fingerprint(fed))
    return state, prints


def restored(initial: Federation, folder: Path) -> tuple[Federation, ConsumerState | None]:
    fed = copy.deepcopy(initial)
    with CheckpointStore(folder, fed, snapshot_every=10) as store:
        return fed, store.load()


def test_snapshot_and_journal_restore_the_same_head(initial: Federation, tmp_path: Path) -> None:
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=10) as store:
        state, _ = consume(fed, store, 1)  # the first save is a snapshot
        written = store.path.stat().st_mtime_ns, store.path.stat().st_ino
        state, prints = consume(fed, store, 5, state)  # journaled: the snapshot is not rewritten
        assert store.journaled == 5
        assert (store.path.stat().st_mtime_ns, store.path.stat().st_ino) == written
    back, loaded = restored(initial, tmp_path)
    assert loaded is not None and loaded.batch == 6 and loaded.offsets == {0: 6 * BATCH}
    assert loaded.ledger == state.ledger
    np.testing.assert_array_equal(back.head.W, fed.head.W)
    np.testing.assert_array_equal(back.head.b, fed.head.b)
    assert back.head.cumulative_residual == fed.head.cumulative_residual
    assert back.head.model_version == fed.head.model_version
    for cid, client in fed.clients.items():
        np.testing.assert_array_equal(back.clients[cid].data.weights, client.data.weights)
    assert federation_fingerprint(back) == prints[-1]


def test_every_nth_batch_is_a_snapshot(initial: Federation, tmp_path: Path) -> None:
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=3) as store:
        consume(fed, store, 7)  # snapshots at batches 1, 4 and 7
        assert store.journaled == 0
    assert journal.read(tmp_path / journal.NAME, "any") == []


def test_keeping_the_records_from_an_offset_copies_them_and_drops_a_torn_tail(
    initial: Federation, tmp_path: Path
) -> None:
    """``keep_from`` (a background snapshot on disk): the whole records from the offset, byte
    for byte, and nothing of a record cut short after them."""
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=10) as store:
        consume(fed, store, 4)
    path = tmp_path / journal.NAME
    records = journal.read(path, _token(path))
    first = len(records[0].to_bytes())
    path.write_bytes(path.read_bytes() + records[0].to_bytes()[:-3])  # a torn append
    journal.keep_from(path, first, fsync=False)
    assert path.read_bytes() == b"".join(r.to_bytes() for r in records[1:])
    assert journal.read(path, _token(path)) == records[1:]
    journal.keep_from(path, journal.size(path), fsync=False)
    assert path.read_bytes() == b"" and journal.size(path) == 0


def test_a_journal_cut_short_restores_the_last_complete_batch(
    initial: Federation, tmp_path: Path
) -> None:
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=10) as store:
        _, prints = consume(fed, store, 5)
    path = tmp_path / journal.NAME
    path.write_bytes(path.read_bytes()[:-7])  # a crash while appending batch 5's record
    back, loaded = restored(initial, tmp_path)
    assert loaded is not None and loaded.batch == 4
    assert federation_fingerprint(back) == prints[3]


def test_a_replay_that_gives_another_head_is_refused(initial: Federation, tmp_path: Path) -> None:
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=10) as store:
        consume(fed, store, 3)
    path = tmp_path / journal.NAME
    records = journal.read(path, _token(path))
    first = records[0]
    # a record with a valid digest whose requests are not those the head was updated with
    changed = dataclasses.replace(
        first, given=BatchInput(first.given.requests[1:], dict(first.given.denied))
    )
    path.write_bytes(b"".join(r.to_bytes() for r in [changed, *records[1:]]))
    with pytest.raises(CheckpointError, match="other requests than the ones journaled"):
        restored(initial, tmp_path)


def test_records_carry_the_ledger_entries_of_their_batch(
    initial: Federation, tmp_path: Path
) -> None:
    """A record holds what its batch added to the ledger, not the whole ledger (whose cost
    would grow with the stream); the restore rebuilds the ledger and checks it."""
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=10) as store:
        state, _ = consume(fed, store, 4)
    path = tmp_path / journal.NAME
    records = journal.read(path, _token(path))
    assert [r.batch for r in records] == [2, 3, 4]
    sizes = [r.consumer["ledger_size"] for r in records]
    assert all("ledger" not in r.consumer for r in records)
    added = [len(r.consumer["ledger_added"]) for r in records]
    assert [b - a for a, b in pairwise(sizes)] == added[1:]
    assert 0 < len(records[-1].consumer["ledger_added"]) <= BATCH
    back, loaded = restored(initial, tmp_path)
    assert loaded is not None and loaded.ledger == state.ledger
    assert list(loaded.ledger) == list(state.ledger)  # in the order answered
    # an entry of the journal that is not what the replay answers: refused
    last = records[-1]
    rid, status, version = last.consumer["ledger_added"][0]
    entries = [[rid, status, version + 1], *last.consumer["ledger_added"][1:]]
    wrong = dataclasses.replace(last, consumer={**last.consumer, "ledger_added": entries})
    path.write_bytes(b"".join(r.to_bytes() for r in [*records[:-1], wrong]))
    with pytest.raises(CheckpointError, match="other requests than the ones journaled"):
        restored(initial, tmp_path)


def test_a_journal_from_before_the_snapshot_is_ignored(initial: Federation, tmp_path: Path) -> None:
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=10) as store:
        state, prints = consume(fed, store, 3)
        old = (tmp_path / journal.NAME).read_bytes()
        store.snapshot(state)  # a new snapshot at batch 3; a crash before the journal emptied
    (tmp_path / journal.NAME).write_bytes(old)
    back, loaded = restored(initial, tmp_path)
    assert loaded is not None and loaded.batch == 3
    assert federation_fingerprint(back) == prints[-1]  # batches 2-3 not applied twice


def _token(path: Path) -> str:
    """The snapshot token the journal's first record names (read without checking it)."""
    size = int.from_bytes(path.read_bytes()[:8], "big")
    payload = path.read_bytes()[40 : 40 + size]
    return journal.JournalRecord.from_payload(payload).snapshot


class HeldStore(CheckpointStore):
    """A store whose background snapshot waits for ``release``: the moments before and after
    its rename can be looked at (copies of the folder are what a crash then would leave)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self.written = threading.Event()

    def _write_snapshot(self, writer: Any) -> None:
        self.release.wait(60)
        super()._write_snapshot(writer)
        self.written.set()


def crash_copy(folder: Path, to: Path) -> Path:
    """What a crash now would leave: the checkpoint and the journal as they are on disk."""
    to.mkdir()
    for name in (journal.NAME, "checkpoint.npz"):
        shutil.copy2(folder / name, to / name)
    return to


def test_a_background_snapshot_restores_the_same_head_at_any_moment(
    initial: Federation, tmp_path: Path
) -> None:
    fed = copy.deepcopy(initial)
    live = tmp_path / "live"
    with HeldStore(live, fed, snapshot_every=3, background=True) as store:
        state, prints = consume(fed, store, 5)  # snapshot 1 (first save: written at once),
        assert store._writing is not None  # batch 4's is held, 5 journaled past it
        before_rename = crash_copy(live, tmp_path / "before")
        store.release.set()
        assert store.written.wait(60)
        after_rename = crash_copy(live, tmp_path / "after")  # the journal not yet rewritten
        state, more = consume(fed, store, 1, state)  # finds the snapshot on disk: rewrites
        kept = journal.read(live / journal.NAME, store._token)
        assert [r.batch for r in kept] == [5, 6]
        # the file holds them alone, as written: the records before the snapshot are gone
        assert (live / journal.NAME).read_bytes() == b"".join(r.to_bytes() for r in kept)
    for folder, last in ((before_rename, prints[4]), (after_rename, prints[4]), (live, more[0])):
        back, loaded = restored(initial, folder)
        assert loaded is not None and federation_fingerprint(back) == last, folder.name
    back, loaded = restored(initial, before_rename)
    assert loaded is not None and loaded.batch == 5  # 2-5 on snapshot 1
    back, loaded = restored(initial, after_rename)
    assert loaded is not None and loaded.batch == 5  # 5 alone on snapshot 4 (not 2-4 twice)


@pytest.fixture(scope="module")
def on_torch() -> Federation:
    """The federation with the head on torch (the GPU's code path, on the CPU here)."""
    return build_federation(scenario(TEN_CLIENTS, "head.backend=torch"))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_background_snapshot_is_a_copy_of_its_batch(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Batches applied while the snapshot is written must not leak into it (on torch the
    head's arrays are copied on its device and read back by the writer thread)."""
    initial = request.getfixturevalue("initial" if backend == "numpy" else "on_torch")
    fed = copy.deepcopy(initial)
    with HeldStore(tmp_path, fed, snapshot_every=3, background=True) as store:
        _, prints = consume(fed, store, 6)  # batch 4's snapshot held while 5 and 6 run
        store.release.set()
    journal.clear(tmp_path / journal.NAME, fsync=False)  # the snapshot alone
    back, loaded = restored(initial, tmp_path)
    assert loaded is not None and loaded.batch == 4
    assert federation_fingerprint(back) == prints[3]
    reference = copy.deepcopy(initial)  # the same four batches, nothing after them
    with CheckpointStore(tmp_path / "reference", reference, snapshot_every=100) as other:
        consume(reference, other, 4)
    assert_same_state(back.state_dict(), reference.state_dict())  # the solver's arrays too


def test_a_failed_background_snapshot_stops_the_consumer_and_loses_nothing(
    initial: Federation, tmp_path: Path
) -> None:
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=3, background=True) as store:
        state, prints = consume(fed, store, 1)
        kept = tmp_path / "kept.npz"
        shutil.copy2(store.path, kept)
        store.path.unlink()
        (store.path / "in-the-way").mkdir(parents=True)  # the rename onto it fails
        state, prints = consume(fed, store, 3, state)  # batch 4's snapshot fails on its thread
        assert store._writing is not None
        store._writing.thread.join()
        with pytest.raises(CheckpointError, match=r"could not be written.*journal still holds"):
            consume(fed, store, 1, state)  # batch 5 stops before it is saved: read again later
        (store.path / "in-the-way").rmdir()
        store.path.rmdir()
        shutil.copy2(kept, store.path)
        store._token = ""  # closing: nothing in flight any more
    back, loaded = restored(initial, tmp_path)
    assert loaded is not None and loaded.batch == 4  # every batch journaled stays
    assert federation_fingerprint(back) == prints[-1]


def assert_same_state(a: Any, b: Any, where: str = "") -> None:
    """Two state dicts hold the same values, arrays bit for bit."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{where}/{i}")
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, where


def test_a_torn_tail_is_cut_so_later_records_are_read(initial: Federation, tmp_path: Path) -> None:
    """A crash (or a full disk) while appending leaves part of a record; the restart must cut
    it off, or every record appended after it would be unreadable at the next restart."""
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=10) as store:
        state, _ = consume(fed, store, 3)
    path = tmp_path / journal.NAME
    whole = path.read_bytes()
    path.write_bytes(whole + whole[-40:-3])  # a torn append after batch 3
    back = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, back, snapshot_every=10) as store:
        state = store.load()
        assert state is not None and state.batch == 3
        assert path.read_bytes() == whole  # the tail is gone before anything is appended
        state, prints = consume(back, store, 2, state)
    again, loaded = restored(initial, tmp_path)
    assert loaded is not None and loaded.batch == 5
    assert federation_fingerprint(again) == prints[-1]


def nudged_snapshot(folder: Path) -> None:
    """Change the snapshot's head by one unit in the last place: its journal's replays then
    give other heads than the journaled ones, as another BLAS or thread count could."""
    saved = read_state(folder / "checkpoint.npz")
    W = saved["federation"]["head"]["W"]
    W[0, 0] = np.nextafter(W[0, 0], np.inf)
    write_state(folder / "checkpoint.npz", saved, fsync=False)


def test_a_replay_that_does_not_reproduce_the_head_installs_the_journaled_one(
    initial: Federation, tmp_path: Path
) -> None:
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=10) as store:
        state, _ = consume(fed, store, 6)  # a snapshot after batch 1, then 5 records
    nudged_snapshot(tmp_path)
    back = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, back, snapshot_every=10) as store:
        loaded = store.load()
        assert store.recovered is not None
        assert "batch(es) 2-6" in store.recovered and "installed the journaled heads" in (
            store.recovered
        )
        assert store.journaled == 0  # the recovered state was snapshotted at once
    assert loaded is not None and loaded.batch == 6 and loaded.ledger == state.ledger
    # the published head, exactly; its charge never below the published one, and it bounds
    # the head's exact residual on the rows held now
    np.testing.assert_array_equal(back.head.W, fed.head.W)
    np.testing.assert_array_equal(back.head.b, fed.head.b)
    assert back.head.model_version == fed.head.model_version
    assert back.head.cumulative_residual >= fed.head.cumulative_residual
    assert back.head.cumulative_residual >= back.head.exact_residual()
    for cid, client in fed.clients.items():
        np.testing.assert_array_equal(back.clients[cid].data.weights, client.data.weights)
    again, reloaded = restored(initial, tmp_path)  # nothing left to replay
    assert reloaded is not None and reloaded.batch == 6
    assert federation_fingerprint(again) == federation_fingerprint(back)


def test_records_without_a_journaled_head_keep_the_replayed_one(
    initial: Federation, tmp_path: Path
) -> None:
    """Journals written before heads were journaled: the replayed head, re-measured."""
    fed = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, fed, snapshot_every=10) as store:
        consume(fed, store, 4)
    path = tmp_path / journal.NAME
    records = journal.read(path, _token(path))
    old = [dataclasses.replace(r, released=None) for r in records]
    path.write_bytes(b"".join(r.to_bytes() for r in old))
    nudged_snapshot(tmp_path)
    back = copy.deepcopy(initial)
    with CheckpointStore(tmp_path, back, snapshot_every=10) as store:
        loaded = store.load()
        assert store.recovered is not None and "kept the replayed heads" in store.recovered
    assert loaded is not None and loaded.batch == 4
    assert back.head.model_version == fed.head.model_version
    assert back.head.cumulative_residual >= back.head.exact_residual()
