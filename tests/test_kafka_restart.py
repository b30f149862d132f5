"""Fast restart: the federation is saved once per state folder and reloaded, not rebuilt.

The real command (``unlearnsim run --stream kafka``) consumes part of a stream, exits, and is
started again on the same state folder: it must reload the federation (no training), be ready
quickly (the ready file says when), and end with the head a never-restarted consumer would
have for the same micro-batches. A scenario whose data changed refuses to resume.
"""

from __future__ import annotations

import copy
import itertools
import json
import pickle
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from support.kafka import BATCH, apply_requests, broker
from support.scenarios import QUICKSTART, ROOT, TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker
from server.kafka.checkpoint import CheckpointStore, ConsumerState
from server.kafka.errors import CheckpointError
from server.kafka.launch import as_kafka_source
from server.kafka.producer import replay_requests, scenario_requests
from server.kafka.restart import NAME, federation_for, load_federation
from server.kafka.topics import Topics
from simulator.scenario import load_scenario
from simulator.stream.ledger import Ledger

__all__ = ["broker"]


def run_consumer(bootstrap: str, folder: Path) -> tuple[subprocess.Popen[str], float]:
    """The consumer command; returns it and the seconds until its ready file appeared."""
    command = [
        sys.executable, "-m", "server.cli", "run", str(QUICKSTART),
        *[a for o in TEN_CLIENTS for a in ("--set", o)],
        "--stream", "kafka", "--bootstrap", bootstrap, "--output", str(folder / "run"),
        "--state-dir", str(folder / "state"), "--max-batch-requests", str(BATCH),
        "--max-wait", "0.2", "--idle-timeout", "2",
    ]  # fmt: skip
    ready = folder / "state" / "ready"
    started = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() - started < 300, "the consumer never became ready"
        time.sleep(0.01)
    return proc, time.monotonic() - started


def finish(proc: subprocess.Popen[str]) -> str:
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-3000:]
    return out


def test_a_restart_reloads_the_federation_and_resumes_where_it_stopped(
    broker: LocalBroker, tmp_path: Path
) -> None:
    sc = scenario(TEN_CLIENTS)
    requests = scenario_requests(sc)
    topics = Topics()
    replay_requests(requests[:40], bootstrap=broker.bootstrap, topics=topics)
    first, _ = run_consumer(broker.bootstrap, tmp_path)
    assert "reloaded" not in finish(first)
    assert (tmp_path / "state" / NAME).exists()
    assert not (tmp_path / "state" / "ready").exists()  # removed when the consumer stopped

    replay_requests(requests[40:], bootstrap=broker.bootstrap, topics=topics)
    second, seconds = run_consumer(broker.bootstrap, tmp_path)
    out = finish(second)
    assert "federation reloaded" in out
    assert seconds < 30, f"restart to ready took {seconds:.1f} s"  # ~2-4 s here; see bench
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())["kafka"]
    assert summary["records"] == len(requests) and summary["sessions"] == 2
    assert summary["session"]["records"] == len(requests) - 40
    starts = [
        json.loads(line)
        for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
        if '"consumer_start"' in line
    ]
    assert [s["resumed"] for s in starts] == [False, True]
    assert starts[1]["process_seconds"] < seconds + 1
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())  # one run, two sessions
    assert manifest["status"] == "completed" and manifest["sessions"][0]["status"] == "completed"
    assert manifest["kafka_state_dir"] == str((tmp_path / "state").resolve())

    # the same micro-batches in one process give the same head, bit for bit
    fed = load_federation(tmp_path / "state", as_kafka_source(sc))
    assert fed is not None
    reference = copy.deepcopy(fed)
    with CheckpointStore(tmp_path / "state", fed) as store:
        assert store.load() is not None
    cuts = [0, 16, 32, 40, *range(56, len(requests), BATCH), len(requests)]
    ledger, now = Ledger(), datetime.now(UTC)
    for a, b in itertools.pairwise(cuts):
        apply_requests(reference, ledger, requests[a:b], now=now)
    np.testing.assert_array_equal(fed.head.W, reference.head.W)


def _csv(path: Path, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = ["a,b,c,d,target"]
    for _ in range(rows):
        values = ",".join(f"{v:.4f}" for v in rng.normal(size=4))
        lines.append(f"{values},{'yes' if rng.random() < 0.5 else 'no'}")
    path.write_text("\n".join(lines) + "\n")


def test_changed_data_refuses_to_resume(tmp_path: Path) -> None:
    data = tmp_path / "table.csv"
    _csv(data, 400, seed=0)
    overrides = [
        *TEN_CLIENTS,
        "data.source=csv",
        f"data.path={data}",
        "data.label_column=target",
        "data.synthetic=null",
    ]
    sc = as_kafka_source(load_scenario(QUICKSTART, overrides=overrides))
    built, reloaded = federation_for(sc, tmp_path / "state")
    assert not reloaded
    again, reloaded = federation_for(sc, tmp_path / "state")
    assert reloaded
    np.testing.assert_array_equal(again.head.W, built.head.W)

    _csv(data, 400, seed=1)  # the same file name, other rows
    with pytest.raises(CheckpointError, match="data changed"):
        federation_for(sc, tmp_path / "state")
    other = sc.model_copy(update={"seed": sc.seed + 1})
    with pytest.raises(CheckpointError, match="another scenario"):
        load_federation(tmp_path / "state", other)


def test_a_checkpoint_from_before_the_new_fields_loads_with_defaults() -> None:
    old = ConsumerState(offsets={0: 3})
    del old.__dict__["pending"], old.__dict__["last_records"], old.__dict__["sessions"]
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.offsets == {0: 3} and loaded.pending == [] and loaded.sessions == 0
