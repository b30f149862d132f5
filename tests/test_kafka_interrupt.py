"""SIGINT stops a Kafka consumer exactly as it stops a scenario run (issue 15): the current
batch finishes, the outputs say "interrupted at batch k", exit code 130, no traceback."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from support.kafka import BATCH, broker
from support.scenarios import QUICKSTART, TEN_CLIENTS, scenario
from support.subprocesses import started_until_batches

from server.kafka.broker import LocalBroker
from server.kafka.producer import replay_requests, scenario_requests
from server.kafka.topics import Topics

__all__ = ["broker"]


def test_sigint_marks_a_kafka_run_interrupted(broker: LocalBroker, tmp_path: Path) -> None:
    requests = scenario_requests(scenario(TEN_CLIENTS))
    replay_requests(requests[:48], bootstrap=broker.bootstrap, topics=Topics())
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "server.cli", "run", str(QUICKSTART),
        *[a for o in TEN_CLIENTS for a in ("--set", o)],
        "--stream", "kafka", "--bootstrap", broker.bootstrap, "--output", str(out),
        "--max-batch-requests", str(BATCH), "--max-wait", "0.2", "--idle-timeout", "120",
        "--no-plots",
    ]  # fmt: skip
    proc = started_until_batches(command, out / "events.jsonl", 1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stdout + stderr
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "interrupted" and info["interrupted"]["signal"] == "SIGINT"
    k = info["interrupted"]["batch"]
    assert k >= 1 and info["interrupted"]["of"] is None  # a topic has no known end
    first = (out / "summary.md").read_text().splitlines()[0]
    assert first.startswith(f"**Interrupted at batch {k}**")
    end = json.loads((out / "metrics.json").read_text())
    assert end["interrupted"]["batch"] == k and end["batches"] == k
