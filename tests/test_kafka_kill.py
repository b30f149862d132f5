"""SIGKILL the consumer at every point of its batch cycle; each restart recovers exactly.

The consumer runs as the real command (``unlearnsim run --stream kafka``) on the quickstart's
156 requests, replayed as a backlog through the bundled broker and cut into batches of 4, so
the run without crashes is the reference: the same batches in the same order. The consumer
kills itself at a named point (:mod:`server.kafka.crashpoints`): before a batch's journal
record, between the record and the receipts, while a background snapshot is written (before
and after its rename) and while the journal is trimmed (before and after its rename). After
each kill the same command starts again. At the end every request has exactly one receipt,
equal field for field to the reference's (status, model version, residual, epsilon), every
batch is in the run folder once, and the federation's whole saved state (head, solver,
Gram matrix, clients) is the reference's, bit for bit.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.kafka import read_receipts
from support.scenarios import QUICKSTART, ROOT, scenario
from test_restore_exact import TIGHT, state_digest

from server.kafka import crashpoints
from server.kafka.broker import LocalBroker
from server.kafka.checkpoint import CheckpointStore
from server.kafka.producer import replay_requests, scenario_requests
from server.kafka.restart import load_federation
from server.kafka.topics import Topics

BATCH = 4


@dataclass(frozen=True)
class Outcome:
    """What a consumer's run left: receipts by request id (without their wall-clock time),
    the batches in its run folder, and the digest of its checkpointed federation."""

    receipts: dict[str, dict[str, Any]]
    batches: list[int]
    digest: str
    folder: Path


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    b = LocalBroker(log_path=tmp_path_factory.mktemp("broker") / "broker.log")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def command(
    broker: LocalBroker, topics: Topics, folder: Path, *options: str, state: Path | None = None
) -> list[str]:
    """The consumer's command line: its run folder in ``folder``, its state folder too unless
    ``state`` says; ``options`` last (``--set``, a batch size: the last one given wins)."""
    return [
        sys.executable, "-m", "server.cli", "run", str(QUICKSTART),
        "--stream", "kafka", "--bootstrap", broker.bootstrap, "--no-plots",
        "--requests-topic", topics.requests, "--receipts-topic", topics.receipts,
        "--dead-letter-topic", topics.dead_letters,
        "--output", str(folder / "run"), "--state-dir", str(state or folder / "state"),
        "--max-batch-requests", str(BATCH), "--max-wait", "0.2", "--idle-timeout", "2",
        "--blas-threads", "1", *options,
    ]  # fmt: skip


def consume(
    broker: LocalBroker,
    topics: Topics,
    folder: Path,
    *options: str,
    kill_at: str | None = None,
    state: Path | None = None,
) -> int:
    """Run the consumer until the backlog is answered (or it kills itself); its exit status."""
    env = {k: v for k, v in os.environ.items() if k != crashpoints.ENV}
    if kill_at is not None:
        env[crashpoints.ENV] = kill_at
    line = command(broker, topics, folder, *options, state=state)
    with (folder / "consumer.log").open("ab") as log:
        done = subprocess.run(line, cwd=ROOT, stdout=log, stderr=log, env=env, check=False)
    return done.returncode


def outcome(
    broker: LocalBroker,
    topics: Topics,
    folder: Path,
    *,
    overrides: list[str] | None = None,
    state: Path | None = None,
) -> Outcome:
    """What the consumer's runs left in ``folder`` (its state folder: ``state``)."""
    receipts: dict[str, dict[str, Any]] = {}
    counts = Counter(r.request_id for r in read_receipts(broker.bootstrap, topics))
    assert max(counts.values()) == 1, "a request was answered twice"
    for r in read_receipts(broker.bootstrap, topics):
        receipts[r.request_id] = r.model_dump(exclude={"applied_at"})
    events = [json.loads(x) for x in (folder / "run" / "events.jsonl").open()]
    batches = [e["consumer_batch"] for e in events if e["event"] == "deletion_batch"]
    state = state or folder / "state"
    fed = load_federation(state, scenario(overrides or []))  # as the consumer built it
    assert fed is not None
    with CheckpointStore(state, fed) as store:
        assert store.load() is not None
    return Outcome(receipts, batches, state_digest(fed), folder)


def stream(broker: LocalBroker, name: str, overrides: list[str] | None = None) -> Topics:
    """Topics of their own for one run, holding the scenario's requests as a backlog."""
    topics = Topics(f"{name}-requests", f"{name}-receipts", f"{name}-dead-letters")
    requests = scenario_requests(scenario(overrides or []))
    replay_requests(requests, bootstrap=broker.bootstrap, topics=topics)
    return topics


@pytest.fixture(scope="module")
def reference(shared_broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """The run that never crashed."""
    folder = tmp_path_factory.mktemp("reference")
    topics = stream(shared_broker, "reference")
    assert consume(shared_broker, topics, folder) == 0, (folder / "consumer.log").read_text()
    done = outcome(shared_broker, topics, folder)
    requests = scenario_requests(scenario([]))
    assert set(done.receipts) == {r.request_id for r in requests}
    assert done.batches == list(range(1, len(done.batches) + 1))
    return done


def crash_and_recover(
    broker: LocalBroker, name: str, folder: Path, kills: list[str], *options: str
) -> Topics:
    """Start the consumer with each kill in turn (it must die), then once more to the end."""
    topics = stream(broker, name)
    for kill_at in kills:
        status = consume(broker, topics, folder, *options, kill_at=kill_at)
        assert status == -signal.SIGKILL, (
            f"{kill_at}: exit {status}\n" + (folder / "consumer.log").read_text()[-3000:]
        )
    assert consume(broker, topics, folder, *options) == 0, (folder / "consumer.log").read_text()[
        -3000:
    ]
    return topics


def test_a_kill_at_every_point_of_the_batch_cycle_recovers_exactly(
    shared_broker: LocalBroker, reference: Outcome, tmp_path: Path
) -> None:
    kills = [
        "before-journal:2",
        "after-save:5",
        "snapshot-before-rename:8",
        "snapshot-after-rename:12",
        "trim-before-rename:16",
        "after-trim:20",
        "after-save:26",
    ]
    topics = crash_and_recover(shared_broker, "points", tmp_path, kills, "--snapshot-every", "3")
    done = outcome(shared_broker, topics, tmp_path)
    assert done.receipts == reference.receipts
    assert done.batches == reference.batches  # every batch in the run folder, once
    assert done.digest == reference.digest
    log = (tmp_path / "consumer.log").read_text()
    assert "did not reproduce" not in log  # every replay was exact: nothing re-measured


def test_the_quickstart_killed_after_15_and_25_batches_recovers_exactly(
    shared_broker: LocalBroker, reference: Outcome, tmp_path: Path
) -> None:
    """The default snapshot interval (10): both kills land after a background snapshot."""
    kills = ["after-save:15", "after-save:25"]
    topics = crash_and_recover(shared_broker, "default", tmp_path, kills)
    done = outcome(shared_broker, topics, tmp_path)
    assert done.receipts == reference.receipts
    assert done.digest == reference.digest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs, unmounted at the end (mounting needs root, as CI runs; elsewhere the
    tests that need it skip, saying why, as those that need a system package do)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here: a small tmpfs cannot be made")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if made.returncode and os.geteuid() != 0:
        pytest.skip(f"mounting a small tmpfs needs root ({made.stderr.strip()})")
    assert made.returncode == 0, made.stderr
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


#: bytes of room beyond the federation's cache and one checkpoint, and what then fails
FULL_DISKS = {
    "snapshot": (600_000, "the snapshot after batch 10 could not be written"),
    "journal": (30_000, "No space left on device"),  # a journal record, cut short
}


@pytest.mark.parametrize("full", list(FULL_DISKS))
def test_a_full_disk_stops_the_consumer_and_a_restart_recovers_exactly(
    full: str,
    shared_broker: LocalBroker,
    reference: Outcome,
    small_disk: Path,
    tmp_path: Path,
) -> None:
    """The state folder on a disk with ``room`` bytes beyond the federation's cache and one
    checkpoint: a write fails, the consumer stops (exit 2, the line names the file), and once
    space is back the same command answers everything exactly as the reference did."""
    room, fails = FULL_DISKS[full]
    state = reference.folder / "state"
    needed = sum((state / name).stat().st_size for name in ("federation.pkl", "checkpoint.npz"))
    stats = os.statvfs(small_disk)
    ballast = small_disk / "ballast"  # this test's own file: removed when space is back
    ballast.write_bytes(bytes(stats.f_bavail * stats.f_frsize - needed - room))
    topics = stream(shared_broker, f"disk-{room}")
    assert consume(shared_broker, topics, tmp_path, state=small_disk / "state") == 2
    log = (tmp_path / "consumer.log").read_text()
    assert fails in log and str(small_disk / "state") in log and "Traceback" not in log
    ballast.unlink()
    assert consume(shared_broker, topics, tmp_path, state=small_disk / "state") == 0, (
        tmp_path / "consumer.log"
    ).read_text()[-3000:]
    done = outcome(shared_broker, topics, tmp_path, state=small_disk / "state")
    assert done.receipts == reference.receipts
    assert done.digest == reference.digest


#: A stream where class purges, exact passes with correction steps, bulk rows, secant pairs and
#: a budget retrain all occur (``test_restore_exact.py``, case ``cr-bulk-corrections``).
AT_SCALE = [*TIGHT, "method=cr"]


def batches_done(folder: Path) -> int:
    path = folder / "run" / "events.jsonl"
    if not path.exists():
        return 0
    return sum('"deletion_batch"' in line for line in path.read_text().splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sigkills_at_random_moments_at_scale_recover_exactly(
    backend: str, shared_broker: LocalBroker, tmp_path: Path
) -> None:
    """2,165 requests in batches of 100 (snapshot every 3 batches), killed from outside at
    random moments after random numbers of batches: the uncrashed run's receipts and state."""
    overrides = [*AT_SCALE, f"head.backend={backend}"]
    options = [*(a for o in overrides for a in ("--set", o)), "--max-batch-requests", "100"]
    options += ["--snapshot-every", "3"]
    clean = tmp_path / "reference"
    clean.mkdir()
    topics = stream(shared_broker, f"scale-{backend}-reference", overrides)
    assert consume(shared_broker, topics, clean, *options) == 0
    reference = outcome(shared_broker, topics, clean, overrides=overrides)

    crashed = tmp_path / "crashed"
    crashed.mkdir()
    topics = stream(shared_broker, f"scale-{backend}", overrides)
    rng = random.Random(7)
    for _ in range(4):
        at = batches_done(crashed) + rng.randint(1, 4)
        with (crashed / "consumer.log").open("ab") as log:
            process = subprocess.Popen(
                command(shared_broker, topics, crashed, *options), cwd=ROOT, stdout=log,
                stderr=log,
            )  # fmt: skip
            while batches_done(crashed) < at and process.poll() is None:
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.3))  # anywhere in the next batch's cycle
            process.send_signal(signal.SIGKILL)
            process.wait()
    assert consume(shared_broker, topics, crashed, *options) == 0
    done = outcome(shared_broker, topics, crashed, overrides=overrides)
    assert done.receipts == reference.receipts
    assert done.digest == reference.digest
    log = (crashed / "consumer.log").read_text()
    assert log.count("resumed from checkpoint") >= 3 and "did not reproduce" not in log
