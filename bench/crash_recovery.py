"""Benchmark: a Kafka stream SIGKILLed at random moments recovers exactly, and how fast.

Workload: the quickstart scenario's data with ``--clients`` clients and ``--n-train`` rows, its
three-phase deletion stream as single-sample requests (about ``--requests``), mixed with
hostile traffic as an operator sees it: re-sent requests (duplicates), records that are not
requests (garbage bytes, dead letters) and requests whose subject does not own the rows
(refused by the gate). Everything is produced first (a backlog) to two topic sets on the
bundled broker. The consumer is the real command ``unlearnsim run --stream kafka`` with the
default snapshot interval.

* reference: the backlog consumed by one process that never crashes;
* crashed: the same backlog, the consumer SIGKILLed ``--kills`` times from outside, each time
  after a random number of batches plus a random fraction of a second, and started again on
  the same state folder until it has answered everything.

Reported: requests lost (no receipt) and answered twice, whether every receipt equals the
reference's (status, model version, residual, epsilon), whether the final federation state is
the reference's bit for bit (a digest of its whole state dict), the final ``epsilon_spent`` of
both, and each restart's time to ready (process start to its ready file: interpreter and
imports, reloading the federation, the snapshot and the journal's replay, the log check).

Usage: ``python bench/crash_recovery.py [--n-train 30000] [--requests 20000] [--kills 5]``
Writes ``bench/results/crash-recovery-cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from provenance import provenance  # noqa: E402

from server.kafka.broker import LocalBroker  # noqa: E402
from server.kafka.checkpoint import CheckpointStore  # noqa: E402
from server.kafka.producer import scenario_requests  # noqa: E402
from server.kafka.restart import load_federation  # noqa: E402
from server.kafka.topics import Topics, ensure_topics  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402
from simulator.state_files import state_digest  # noqa: E402
from simulator.stream import DeletionRequest  # noqa: E402

QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def overrides(args: argparse.Namespace) -> list[str]:
    """The quickstart with ``--clients`` clients, ``--n-train`` rows, single-sample requests."""
    per_tick = args.requests / 25.0  # phases of 10 ticks at r, r, r/2 (plus bursts)
    out = [f"partition.num_clients={args.clients}", f"data.synthetic.n_train={args.n_train}"]
    for i, rate in enumerate((per_tick, per_tick, per_tick / 2)):
        out += [f"stream.phases.{i}.rate={rate:.3f}", f"stream.phases.{i}.samples_per_request=1"]
    return out


def hostile_records(
    requests: list[DeletionRequest], rng: random.Random
) -> list[tuple[bytes, bytes]]:
    """The stream as (key, value) records, with duplicates, garbage and foreign subjects."""
    out: list[tuple[bytes, bytes]] = []
    for i, req in enumerate(requests):
        out.append((req.request_id.encode(), req.to_json()))
        roll = rng.random()
        if roll < 0.02 and i:  # a request sent again
            old = requests[rng.randrange(i)]
            out.append((old.request_id.encode(), old.to_json()))
        elif roll < 0.03:  # not a request at all
            out.append((b"garbage-%d" % i, bytes(rng.randrange(256) for _ in range(40))))
        elif roll < 0.04 and req.sample_ids:  # someone else asks for these rows
            forged = req.model_copy(
                update={"request_id": f"forged-{i}", "subject": "subject-999-0"}
            )
            out.append((forged.request_id.encode(), forged.to_json()))
    return out


def produce(bootstrap: str, topics: Topics, records: list[tuple[bytes, bytes]]) -> None:
    ensure_topics(bootstrap, topics)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=262144)
    for key, value in records:
        producer.send(topics.requests, key=key, value=value)
    producer.flush()
    producer.close()


def consumer_command(
    bootstrap: str, topics: Topics, folder: Path, sets: list[str], args: argparse.Namespace
) -> list[str]:
    return [
        sys.executable, "-m", "server.cli", "run", str(QUICKSTART),
        *(a for o in sets for a in ("--set", o)),
        "--stream", "kafka", "--bootstrap", bootstrap, "--no-plots",
        "--requests-topic", topics.requests, "--receipts-topic", topics.receipts,
        "--dead-letter-topic", topics.dead_letters,
        "--output", str(folder / "run"), "--state-dir", str(folder / "state"),
        "--max-batch-requests", str(args.max_batch), "--max-wait", "0.2",
        "--idle-timeout", "3", "--blas-threads", "1",
    ]  # fmt: skip


def batches_done(folder: Path) -> int:
    path = folder / "run" / "events.jsonl"
    if not path.exists():
        return 0
    return path.read_text().count('"deletion_batch"')


def run_to_end(command: list[str], folder: Path) -> float:
    """Run the consumer until it exits; its wall seconds (it must exit 0)."""
    t = time.monotonic()
    with (folder / "consumer.log").open("ab") as log:
        done = subprocess.run(command, cwd=ROOT, stdout=log, stderr=log, check=False)
    if done.returncode:
        raise RuntimeError(f"consumer exit {done.returncode}: see {folder / 'consumer.log'}")
    return time.monotonic() - t


def crash_and_restart(
    command: list[str], folder: Path, kills: int, rng: random.Random
) -> list[dict[str, float]]:
    """Start the consumer ``kills`` times, SIGKILL each; every start's time to ready."""
    ready, starts = folder / "state" / "ready", []
    for _ in range(kills):
        target = batches_done(folder) + rng.randint(3, 25)
        with (folder / "consumer.log").open("ab") as log:
            t = time.monotonic()
            process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log)
            to_ready = None
            while process.poll() is None and batches_done(folder) < target:
                if to_ready is None and ready_pid(ready) == process.pid:
                    to_ready = time.monotonic() - t
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.5))  # anywhere in a batch's cycle
            process.send_signal(signal.SIGKILL)
            process.wait()
        starts.append(
            {"to_ready_seconds": to_ready or float("nan"), "batches": batches_done(folder)}
        )
    return starts


def ready_pid(ready: Path) -> int | None:
    """The PID in the consumer's ready file (a killed consumer's may still be there)."""
    try:
        return int(json.loads(ready.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def receipts(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for messages in consumer.poll(timeout_ms=300).values():
            out.extend(json.loads(m.value) for m in messages)
        high = consumer.highwater(tp)
        if high is not None and consumer.position(tp) >= high:
            break
    consumer.close()
    return out


def final_state(folder: Path, sets: list[str]) -> tuple[str, float]:
    """Digest of the checkpointed federation's whole state, and its epsilon spent."""
    fed = load_federation(folder / "state", load_scenario(QUICKSTART, overrides=sets))
    assert fed is not None
    with CheckpointStore(folder / "state", fed) as store:
        store.load()
    return state_digest(fed.state_dict()), fed.head.epsilon_spent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-train", type=int, default=30000)
    p.add_argument("--clients", type=int, default=5)
    p.add_argument("--requests", type=int, default=20000, help="about this many requests")
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--max-batch", type=int, default=200)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "crash-recovery-cpu.json"
    )
    args = p.parse_args()
    origin = provenance()
    sets = overrides(args)
    rng = random.Random(args.seed)
    requests = scenario_requests(load_scenario(QUICKSTART, overrides=sets))
    records = hostile_records(requests, rng)
    broker = LocalBroker()
    broker.start()
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="crash-recovery-") as tmp:
            for name in ("reference", "crashed"):
                topics = Topics(f"{name}-requests", f"{name}-receipts", f"{name}-dead-letters")
                folder = Path(tmp) / name
                folder.mkdir()
                produce(broker.bootstrap, topics, records)
                command = consumer_command(broker.bootstrap, topics, folder, sets, args)
                starts = (
                    crash_and_restart(command, folder, args.kills, rng) if name == "crashed" else []
                )
                seconds = run_to_end(command, folder)
                got = receipts(broker.bootstrap, topics.receipts)
                digest, epsilon = final_state(folder, sets)
                results[name] = {
                    "receipts": got,
                    "counts": Counter(r["request_id"] for r in got),
                    "starts": starts,
                    "last_run_seconds": seconds,
                    "digest": digest,
                    "epsilon_spent": epsilon,
                    "batches": batches_done(folder),
                }
    finally:
        broker.stop()
    ref, crashed = results["reference"], results["crashed"]
    sent = Counter(k.decode() for k, _ in records if not k.startswith(b"garbage-"))
    fields = ("request_id", "status", "model_version", "residual", "epsilon_spent", "reason")

    def answers(run: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [tuple(r.get(f) for f in fields) for r in run["receipts"]]

    summary = {
        "requests": len(requests),
        "records": len(records),
        "kills": args.kills,
        "lost": sum(max(0, n - crashed["counts"][i]) for i, n in sent.items()),
        "answered_twice": sum(max(0, crashed["counts"][i] - n) for i, n in sent.items()),
        "receipts_equal_reference": answers(ref) == answers(crashed),
        "state_equal_reference": ref["digest"] == crashed["digest"],
        "epsilon_spent": {"reference": ref["epsilon_spent"], "crashed": crashed["epsilon_spent"]},
        "batches": ref["batches"],
        "restarts": crashed["starts"],
    }
    table = Table(title=f"crash recovery: {len(requests):,} requests, {args.kills} SIGKILLs")
    for column in ("measure", "value"):
        table.add_column(column)
    for key in (
        "records",
        "lost",
        "answered_twice",
        "receipts_equal_reference",
        "state_equal_reference",
    ):
        table.add_row(key, str(summary[key]))
    table.add_row(
        "epsilon spent (reference / crashed)",
        f"{ref['epsilon_spent']!r} / {crashed['epsilon_spent']!r}",
    )
    for i, start in enumerate(crashed["starts"]):
        table.add_row(
            f"start {i + 1}: to ready, batches done when killed",
            f"{start['to_ready_seconds']:.2f} s, {start['batches']}",
        )
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    args.out.write_text(
        json.dumps({"provenance": origin, "settings": settings, **summary}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
