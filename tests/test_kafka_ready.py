"""Ready means "checkpoint loaded, log checked, broker there", and a lost log is caught while
running: the real command (``unlearnsim run --stream kafka``) in a subprocess, the real broker.

* a restart that refuses an offset gap is never ready (no ready file, exit 2);
* ``seconds_to_ready`` counts from the process's start (the federation build or load included);
* ``/readyz`` answers 503 while the broker is away and 200 once it is back;
* a SIGKILLed consumer's ready file does not read as ready, and is gone when the next starts;
* a broker that loses its log while the consumer runs (refilled past its offset) stops it with
  the default policy: exit 2, an ``offset_gap`` event, nothing of the new log answered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.kafka import broker, read_receipts
from support.scenarios import QUICKSTART, ROOT, TEN_CLIENTS, scenario

from server.health import ready_file_state
from server.kafka.broker import LocalBroker, free_port
from server.kafka.producer import replay_requests, scenario_requests
from server.kafka.topics import Topics, ensure_topics

__all__ = ["broker"]


def command(bootstrap: str, folder: Path, *extra: str, idle: float = 1.5) -> list[str]:
    overrides = [arg for o in TEN_CLIENTS for arg in ("--set", o)]
    return [
        sys.executable, "-m", "server.cli", "run", str(QUICKSTART), *overrides,
        "--stream", "kafka", "--bootstrap", bootstrap, "--no-plots",
        "--output", str(folder / "run"), "--state-dir", str(folder / "state"),
        "--max-batch-requests", "16", "--max-wait", "0.2", "--idle-timeout", str(idle), *extra,
    ]  # fmt: skip


def start(cmd: list[str], folder: Path) -> subprocess.Popen[bytes]:
    log = (folder / "consumer.log").open("ab")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def log_tail(folder: Path) -> str:
    return (folder / "consumer.log").read_text(errors="replace")[-3000:]


def ready_info(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def wait_ready(proc: subprocess.Popen[bytes], path: Path, folder: Path) -> dict[str, Any]:
    """The ready file of ``proc`` (its PID), once written."""
    deadline = time.monotonic() + 120
    while (info := ready_info(path)) is None or info["pid"] != proc.pid:
        assert proc.poll() is None, log_tail(folder)
        assert time.monotonic() < deadline, "never ready"
        time.sleep(0.01)
    return info


def readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def wait_status(port: int, status: int, proc: subprocess.Popen[bytes], within: float) -> float:
    """Seconds until ``/readyz`` answers ``status`` (fails after ``within``)."""
    t0 = time.monotonic()
    while readyz(port) != status:
        assert proc.poll() is None
        assert time.monotonic() - t0 < within, f"/readyz never answered {status}"
        time.sleep(0.1)
    return time.monotonic() - t0


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def requests() -> list[Any]:
    return scenario_requests(scenario(TEN_CLIENTS))


def test_a_refusing_restart_is_never_ready_and_ready_counts_the_whole_start(
    broker: LocalBroker, tmp_path: Path, requests: list[Any]
) -> None:
    ready = tmp_path / "state" / "ready"
    replay_requests(requests[:40], bootstrap=broker.bootstrap, topics=Topics())
    began = time.time()
    first = start(command(broker.bootstrap, tmp_path), tmp_path)
    info = wait_ready(first, ready, tmp_path)
    # from the process's start: the federation build is in it (it used to count from the
    # consumer's own start, after the build: 0.04 s of 3-10 s)
    assert info["seconds_to_ready"] >= info["ready_at"] - began - 0.5
    assert first.wait(120) == 0, log_tail(tmp_path)
    assert not ready.exists()

    broker.stop()  # memory:// storage: the log is lost; refilled past the checkpoint
    broker.start()
    replay_requests(requests[10:60], bootstrap=broker.bootstrap, topics=Topics())
    second = start(command(broker.bootstrap, tmp_path), tmp_path)
    seen = []
    while second.poll() is None:
        seen.append(ready.exists())
        time.sleep(0.005)
    assert second.returncode == 2, log_tail(tmp_path)
    assert "--on-offset-gap" in log_tail(tmp_path)
    assert not any(seen), "a restart that refuses the log said it was ready"
    assert read_receipts(broker.bootstrap, Topics()) == []


def test_not_ready_while_the_broker_is_away_and_a_killed_consumers_file_is_not_ready(
    broker: LocalBroker, tmp_path: Path
) -> None:
    ready = tmp_path / "state" / "ready"
    port = free_port()
    ensure_topics(broker.bootstrap, Topics())
    cmd = command(broker.bootstrap, tmp_path, "--metrics-port", str(port), idle=120)
    first = start(cmd, tmp_path)
    try:
        wait_ready(first, ready, tmp_path)
        wait_status(port, 200, first, 10)
        broker.stop()  # an outage: not ready until the broker answers again
        assert wait_status(port, 503, first, 10) < 8
        assert not ready.exists()
        time.sleep(3)
        assert readyz(port) == 503  # still away
        broker.start()
        ensure_topics(broker.bootstrap, Topics())
        wait_status(port, 200, first, 20)
        assert ready_file_state(ready)[0]

        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert ready.exists() and not ready_file_state(ready)[0]  # left behind, not ready

        second = start(command(broker.bootstrap, tmp_path, idle=120), tmp_path)
        try:  # the stale file goes when the new process starts, long before it is ready
            deadline, removed = time.monotonic() + 120, False
            while (info := ready_info(ready)) is None or info["pid"] != second.pid:
                removed = removed or info is None
                assert second.poll() is None and time.monotonic() < deadline, log_tail(tmp_path)
                time.sleep(0.01)
            assert removed, "the killed consumer's ready file stayed until the next was ready"
        finally:
            stop(second)
    finally:
        stop(first)


def test_a_log_lost_while_running_stops_the_consumer(
    broker: LocalBroker, tmp_path: Path, requests: list[Any]
) -> None:
    """Issue 28: the consumer used to read the refilled log on from its old offset (answering
    what came after it, leaving everything before unanswered) and exit 0."""
    replay_requests(requests[:40], bootstrap=broker.bootstrap, topics=Topics())
    proc = start(command(broker.bootstrap, tmp_path, idle=20), tmp_path)
    try:
        wait_ready(proc, tmp_path / "state" / "ready", tmp_path)
        receipts = 0
        deadline = time.monotonic() + 60
        while receipts < 40:
            assert time.monotonic() < deadline and proc.poll() is None, log_tail(tmp_path)
            receipts = len(read_receipts(broker.bootstrap, Topics()))
        broker.stop()
        broker.start()
        replay_requests(requests[10:70], bootstrap=broker.bootstrap, topics=Topics())
        assert proc.wait(60) == 2, log_tail(tmp_path)
    finally:
        stop(proc)
    assert "--on-offset-gap" in log_tail(tmp_path)
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").open()]
    gaps = [e for e in events if e["event"] == "offset_gap"]
    assert [(g["kind"], g["action"], g["expected"]) for g in gaps] == [("rewritten", "fail", 40)]
    assert read_receipts(broker.bootstrap, Topics()) == []  # nothing of the new log answered
