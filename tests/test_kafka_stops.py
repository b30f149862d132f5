"""A consumer stops wherever it waits, and exits when a fetch can never heal (issue 28).

* Records compressed with a codec whose library is missing made kafka-python raise
  ``UnsupportedCodecError`` once and then never return from ``poll`` (a loop at full CPU); the
  consumer logged "backing off" and spun for as long as it was left, and SIGTERM, which only
  set a flag checked between batches, did not stop it. Now such an error is a one-line exit.
* With the broker gone after a batch was read, the batch is applied and checkpointed, and its
  publication retried until the broker is back; SIGTERM there was never acted on. Now it ends
  the retries at once: exit 130 as an interrupted run, the receipts kept in the checkpoint's
  outbox for the next start.
Both run the real ``unlearnsim run --stream kafka`` process against the real broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer
from support.kafka import broker
from support.scenarios import QUICKSTART, ROOT, TEN_CLIENTS, scenario

from server.kafka.backoff import Backoff
from server.kafka.broker import LocalBroker
from server.kafka.checkpoint import ConsumerState
from server.kafka.producer import replay_requests, scenario_requests
from server.kafka.topics import Topics, ensure_topics
from server.kafka.waits import ConsumerInterrupted, Waits
from simulator.state_files import read_state

__all__ = ["broker"]

#: The consumer process with lz4's package unavailable (as on an installation without it).
WITHOUT_LZ4 = (
    "import sys; sys.modules['lz4'] = None; from server.cli import main; raise SystemExit(main())"
)


def consumer_command(bootstrap: str, out: Path, *options: str) -> list[str]:
    return [
        "run", str(QUICKSTART), *[a for o in TEN_CLIENTS for a in ("--set", o)],
        "--stream", "kafka", "--bootstrap", bootstrap, "--output", str(out),
        "--idle-timeout", "300", "--no-plots", *options,
    ]  # fmt: skip


def start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as err:
        return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)


def wait_for(proc: subprocess.Popen[bytes], done: object, what: str, timeout: float) -> None:
    """Wait until ``done()`` is true; fail if the process ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert proc.poll() is None, f"the consumer exited (rc {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)


def started(out: Path) -> bool:
    events = out / "events.jsonl"
    return events.exists() and '"consumer_start"' in events.read_text()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reap(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, float] | None:
    """Exit status and CPU seconds of ``proc`` if it ends within ``timeout`` (else kill it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    return None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads CPU time from /proc")
def test_records_of_a_codec_that_is_not_installed_are_a_clear_exit_not_a_spin(
    broker: LocalBroker, tmp_path: Path
) -> None:
    topics = Topics()
    ensure_topics(broker.bootstrap, topics)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type="lz4", linger_ms=500
    )
    for r in scenario_requests(scenario(TEN_CLIENTS))[:16]:
        producer.send(topics.requests, key=r.request_id.encode(), value=r.to_json())
    producer.flush(timeout=30)
    producer.close()
    out, log = tmp_path / "run", tmp_path / "stderr.log"
    proc = start([sys.executable, "-c", WITHOUT_LZ4, *consumer_command(broker.bootstrap, out)], log)
    wait_for(proc, lambda: started(out), "consumer_start", 240)
    cpu_at_start, t_start = cpu_seconds(proc.pid), time.monotonic()

    ended = reap(proc, 30)

    assert ended is not None, "still running 30 s after it started consuming (spinning?)"
    rc, cpu = ended
    stderr = log.read_text()
    assert rc == 2, stderr[-3000:]
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    assert "cannot read deletion-requests" in errors[0] and "pip install lz4" in errors[0]
    assert cpu - cpu_at_start < 10, "the consumer burnt CPU after it started consuming"
    assert time.monotonic() - t_start < 30


def test_sigterm_ends_publication_retries_to_an_absent_broker(
    broker: LocalBroker, tmp_path: Path
) -> None:
    requests = scenario_requests(scenario(TEN_CLIENTS))[:10]
    replay_requests(requests, bootstrap=broker.bootstrap, topics=Topics())
    out, log = tmp_path / "run", tmp_path / "stderr.log"
    # the batch (10 < 16 requests) closes 8 s after it was read: the broker is gone by then
    command = consumer_command(
        broker.bootstrap, out, "--max-batch-requests", "16", "--max-wait", "8"
    )
    proc = start([sys.executable, "-m", "server.cli", *command], log)
    wait_for(proc, lambda: started(out), "consumer_start", 240)
    time.sleep(2.0)  # the first poll has read the requests
    broker.stop()
    wait_for(proc, lambda: "publishing batch 1 failed" in log.read_text(), "a failed publish", 120)

    proc.send_signal(signal.SIGTERM)
    ended = reap(proc, 20)

    stderr = log.read_text()
    assert ended is not None, "SIGTERM did not stop the consumer retrying its publication"
    assert ended[0] == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "interrupted" and info["interrupted"]["signal"] == "SIGTERM"
    # nothing lost: the batch is applied and checkpointed, its receipts wait in the outbox
    saved = ConsumerState.from_dict(read_state(out / "kafka-state" / "checkpoint.npz")["consumer"])
    assert saved.offsets == {0: len(requests)}
    assert sorted(saved.ledger) == sorted(r.request_id for r in requests)
    assert sorted(r.key for r in saved.outbox) == sorted(r.request_id.encode() for r in requests)
    written = (out / "receipts.jsonl").read_text().splitlines()
    assert len(written) == len(requests)


def test_backoff_sleeps_its_delay_and_a_stop_ends_it() -> None:
    backoff = Backoff(initial=0.3)
    t = time.monotonic()
    assert backoff.sleep() == pytest.approx(0.3)
    assert time.monotonic() - t >= 0.3
    assert backoff.delay() == pytest.approx(0.6) and backoff.attempts == 1
    threading.Timer(0.2, backoff.stop.set).start()
    backoff.attempts = 10  # a 5 s sleep
    t = time.monotonic()
    backoff.sleep()
    assert 0.15 < time.monotonic() - t < 1.0


def test_a_stop_leaves_a_wait_of_its_own_thread_only() -> None:
    waits = Waits()
    with waits.abandonable():
        stopper = threading.Thread(target=waits.stop)
        stopper.start()
        stopper.join()  # another thread: the flag is set, this wait goes on
    assert waits.stopped.is_set()
    with pytest.raises(ConsumerInterrupted), waits.abandonable():  # once stopped: not entered
        pass
    ran = []
    with pytest.raises(ConsumerInterrupted), waits.abandonable(started=True):
        ran.append(1)  # work already started is tried, and a stop ends it
        waits.stop()
        ran.append(2)
    assert ran == [1]
