"""SIGKILL the consuming process mid-stream, restart it: nothing lost, nothing applied twice.

The consumer runs as the real command (``unlearnsim run --stream kafka``) in a subprocess over
2,208 requests on the quickstart data with 10 clients. It is killed with SIGKILL after a few
batches, restarted on the same state folder, and must then (a) have answered every request
with exactly one ``applied``/``rejected`` receipt and (b) hold the same head, bit for bit, as the
same micro-batches applied by a process that never crashed.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from support.kafka import apply_requests, broker, read_receipts
from support.scenarios import LARGE, QUICKSTART, ROOT, TEN_CLIENTS, scenario

from server.kafka import crashpoints
from server.kafka.broker import LocalBroker
from server.kafka.checkpoint import CheckpointStore
from server.kafka.producer import replay_requests, scenario_requests
from server.kafka.topics import Topics
from simulator.runner.federation import build_federation
from simulator.stream.ledger import Ledger

__all__ = ["broker"]

BATCH = 50


def consume(bootstrap: str, folder: Path) -> subprocess.Popen[bytes]:
    overrides = [arg for o in LARGE for arg in ("--set", o)]
    command = [
        sys.executable, "-m", "server.cli", "run", str(QUICKSTART), *overrides,
        "--stream", "kafka", "--bootstrap", bootstrap,
        "--output", str(folder / "run"), "--state-dir", str(folder / "state"),
        "--max-batch-requests", str(BATCH), "--max-wait", "0.2", "--idle-timeout", "3",
    ]  # fmt: skip
    log = (folder / "consumer.log").open("ab")
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def batches_done(folder: Path) -> int:
    path = folder / "run" / "events.jsonl"
    if not path.exists():
        return 0
    return sum('"deletion_batch"' in line for line in path.read_text().splitlines())


def test_sigkill_mid_stream_then_restart(broker: LocalBroker, tmp_path: Path) -> None:
    sc = scenario(LARGE)
    requests = scenario_requests(sc)
    assert len(requests) >= 2000
    topics = Topics()
    replay_requests(requests, bootstrap=broker.bootstrap, topics=topics)

    first = consume(broker.bootstrap, tmp_path)
    try:
        deadline = time.monotonic() + 240
        while batches_done(tmp_path) < 8:
            assert first.poll() is None, (tmp_path / "consumer.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the consumer made no progress"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.kill()
        first.wait()
    killed_after = batches_done(tmp_path)
    assert killed_after < len(requests) // BATCH  # it died mid-stream

    second = consume(broker.bootstrap, tmp_path)
    assert second.wait(timeout=300) == 0, (tmp_path / "consumer.log").read_text()[-3000:]
    assert "resumed from checkpoint" in (tmp_path / "consumer.log").read_text()
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "completed" and manifest["sessions"][0]["status"] == "crashed"

    # every request: exactly one applied/rejected receipt, and nothing else
    receipts = read_receipts(broker.bootstrap, topics)
    counts = Counter(r.request_id for r in receipts)
    assert set(counts) == {r.request_id for r in requests}
    assert max(counts.values()) == 1
    assert {r.status for r in receipts} <= {"applied", "rejected"}

    # the same micro-batches in a process that never crashed
    reference = build_federation(sc)
    restored = copy.deepcopy(reference)
    ledger, now, expected = Ledger(), datetime.now(UTC), {}
    for i in range(0, len(requests), BATCH):
        for r in apply_requests(reference, ledger, requests[i : i + BATCH], now=now).receipts:
            expected[r.request_id] = (r.status, r.model_version)
    assert {r.request_id: (r.status, r.model_version) for r in receipts} == expected

    with CheckpointStore(tmp_path / "state", restored) as store:
        state = store.load()
    assert state is not None and state.offsets == {0: len(requests)}
    assert len(state.ledger) == len(requests)
    np.testing.assert_array_equal(restored.head.W, reference.head.W)
    np.testing.assert_array_equal(restored.head.b, reference.head.b)
    assert restored.head.model_version == reference.head.model_version
    assert restored.head.cumulative_residual == reference.head.cumulative_residual
    for cid, client in reference.clients.items():
        np.testing.assert_array_equal(restored.clients[cid].data.weights, client.data.weights)


def test_a_kill_between_the_checkpoint_and_the_run_folder_loses_nothing_locally(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """Issue 28: the run folder is written after the checkpoint; a process killed between the
    two kept its batch out of receipts.jsonl and events.jsonl for good. The restart appends
    what the checkpoint holds and the folder lacks, once."""
    requests = scenario_requests(scenario(TEN_CLIENTS))
    topics = Topics()
    replay_requests(requests, bootstrap=broker.bootstrap, topics=topics)
    overrides = [arg for o in TEN_CLIENTS for arg in ("--set", o)]
    command = [
        sys.executable, "-m", "server.cli", "run", str(QUICKSTART), *overrides,
        "--stream", "kafka", "--bootstrap", broker.bootstrap, "--no-plots",
        "--output", str(tmp_path / "run"), "--state-dir", str(tmp_path / "state"),
        "--max-batch-requests", "16", "--max-wait", "0.2", "--idle-timeout", "2",
    ]  # fmt: skip
    with (tmp_path / "consumer.log").open("ab") as log:
        env = {**os.environ, crashpoints.ENV: "after-save:3"}  # dies right after saving batch 3
        first = subprocess.run(command, cwd=ROOT, stdout=log, stderr=log, env=env, check=False)
        assert first.returncode == -signal.SIGKILL, (tmp_path / "consumer.log").read_text()
        events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").open()]
        assert [e["consumer_batch"] for e in events if e["event"] == "deletion_batch"] == [1, 2]
        second = subprocess.run(command, cwd=ROOT, stdout=log, stderr=log, check=False)
    assert second.returncode == 0, (tmp_path / "consumer.log").read_text()[-3000:]

    topic = Counter(r.request_id for r in read_receipts(broker.bootstrap, topics))
    lines = (tmp_path / "run" / "receipts.jsonl").read_text().splitlines()
    local = Counter(json.loads(line)["request_id"] for line in lines)
    assert local == topic and set(topic) == {r.request_id for r in requests}
    assert max(local.values()) == 1  # none twice, none missing
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").open()]
    batches = [e["consumer_batch"] for e in events if e["event"] == "deletion_batch"]
    assert batches == list(range(1, -(-len(requests) // 16) + 1))  # every batch, once
    assert [e.get("recovered") for e in events if e.get("consumer_batch") == 3] == [True]
