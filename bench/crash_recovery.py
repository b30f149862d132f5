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

Usage: ``python bench/crash_recovery.py [--n-train 30000] [--requests 20000] [--kills 5 |
--kill-at N ...] [--scenario bench/stream_fmnist.yaml] [--no-reference]``
Writes ``bench/results/crash-recovery-cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
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
from simulator.stream import DeletionRequest  # noqa: E402

QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def overrides(args: argparse.Namespace) -> list[str]:
    """The quickstart with ``--clients`` clients, ``--n-train`` rows, single-sample requests.

    Another ``--scenario`` (three phases of 10 ticks, like the quickstart's) keeps its rows and
    clients; only its phases' rates are set.
    """
    per_tick = args.requests / 25.0  # phases of 10 ticks at r, r, r/2 (plus bursts)
    out = []
    if args.scenario.resolve() == QUICKSTART:
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
        sys.executable, "-m", "server.cli", "run", str(args.scenario),
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


def ready_pid(ready: Path) -> int | None:
    """The PID in the consumer's ready file (a killed consumer's may still be there)."""
    try:
        return int(json.loads(ready.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def start(command: list[str], folder: Path, kill: int | None, rng: random.Random) -> dict[str, Any]:
    """One start of the consumer: its time to ready, and how it ended.

    ``kill``: None runs it to its end (its exit status); otherwise it is SIGKILLed once it has
    done ``kill`` batches in all, at once, or (``kill`` < 0) after 3-25 more batches and a
    random fraction of a second.
    """
    target = kill if kill is None or kill >= 0 else batches_done(folder) + rng.randint(3, 25)
    ready = folder / "state" / "ready"
    with (folder / "consumer.log").open("ab") as log:
        t = time.monotonic()
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log)
        to_ready = None
        while process.poll() is None and (target is None or batches_done(folder) < target):
            if to_ready is None and ready_pid(ready) == process.pid:
                to_ready = time.monotonic() - t
            time.sleep(0.005)
        if target is None:
            return {"to_ready_seconds": to_ready, "exit": process.returncode}
        if kill is not None and kill < 0:
            time.sleep(rng.uniform(0.0, 0.5))  # anywhere in a batch's cycle
        process.send_signal(signal.SIGKILL)
        process.wait()
    return {"to_ready_seconds": to_ready, "killed_after": batches_done(folder)}


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


def final_state(folder: Path, sets: list[str], scenario: Path) -> tuple[str | None, float]:
    """Digest of the checkpointed federation's whole state (None where this checkout has no
    digest: a baseline run of older code), and its epsilon spent."""
    fed = load_federation(folder / "state", load_scenario(scenario, overrides=sets))
    assert fed is not None
    with CheckpointStore(folder / "state", fed) as store:
        store.load()
    try:
        from simulator.state_files import state_digest
    except ImportError:
        return None, fed.head.epsilon_spent
    return state_digest(fed.state_dict()), fed.head.epsilon_spent


def one_run(
    broker: LocalBroker,
    name: str,
    work: Path,
    plan: tuple[list[str], list[tuple[bytes, bytes]], list[int | None]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Produce the backlog to topics of its own, start the consumer once per kill (and once to
    its end), and collect what it answered and left."""
    sets, records, kills = plan
    topics = Topics(f"{name}-requests", f"{name}-receipts", f"{name}-dead-letters")
    folder = work / name
    built = work / "reference" / "state" / "federation.pkl"
    (folder / "state").mkdir(parents=True)
    if built.exists():  # the reference's federation, reloaded rather than built again
        shutil.copy(built, folder / "state")
    produce(broker.bootstrap, topics, records)
    command = consumer_command(broker.bootstrap, topics, folder, sets, args)
    rng = random.Random(args.seed)
    starts = [start(command, folder, kill, rng) for kill in [*kills, None]]
    got = receipts(broker.bootstrap, topics.receipts)
    done = starts[-1]["exit"] == 0
    digest, epsilon = final_state(folder, sets, args.scenario) if done else (None, None)
    return {
        "receipts": got,
        "counts": Counter(r["request_id"] for r in got),
        "starts": starts,
        "digest": digest,
        "epsilon_spent": epsilon,
        "batches": batches_done(folder),
    }


def compare(
    ref: dict[str, Any] | None, crashed: dict[str, Any], records: list[tuple[bytes, bytes]]
) -> dict[str, Any]:
    """Lost and twice-answered requests, and whether receipts and state equal the reference."""
    sent = Counter(k.decode() for k, _ in records if not k.startswith(b"garbage-"))
    fields = ("request_id", "status", "model_version", "residual", "epsilon_spent", "reason")

    def answers(run: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [tuple(r.get(f) for f in fields) for r in run["receipts"]]

    out = {
        "lost": sum(max(0, n - crashed["counts"][i]) for i, n in sent.items()),
        "answered_twice": sum(max(0, crashed["counts"][i] - n) for i, n in sent.items()),
        "epsilon_spent": crashed["epsilon_spent"],
        "batches": crashed["batches"],
        "starts": crashed["starts"],
    }
    if ref is not None:
        out["receipts_equal_reference"] = answers(ref) == answers(crashed)
        out["state_equal_reference"] = (
            ref["digest"] is not None and ref["digest"] == (crashed["digest"])
        )
        out["reference_epsilon_spent"] = ref["epsilon_spent"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", type=Path, default=QUICKSTART)
    p.add_argument("--n-train", type=int, default=30000, help="quickstart only")
    p.add_argument("--clients", type=int, default=5, help="quickstart only")
    p.add_argument("--requests", type=int, default=20000, help="about this many requests")
    p.add_argument("--kills", type=int, default=5, help="SIGKILLs at random moments")
    p.add_argument("--kill-at", type=int, nargs="+", help="SIGKILL after these batch counts")
    p.add_argument("--no-reference", action="store_true", help="only the crashed run")
    p.add_argument("--max-batch", type=int, default=200)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "crash-recovery-cpu.json"
    )
    args = p.parse_args()
    origin = provenance()
    sets = overrides(args)
    requests = scenario_requests(load_scenario(args.scenario, overrides=sets))
    records = hostile_records(requests, random.Random(args.seed))
    kills: list[int | None] = list(args.kill_at) if args.kill_at else [-1] * args.kills
    broker = LocalBroker()
    broker.start()
    try:
        with tempfile.TemporaryDirectory(prefix="crash-recovery-") as tmp:
            plan = (sets, records, kills)
            ref = (
                None
                if args.no_reference
                else one_run(broker, "reference", Path(tmp), (sets, records, []), args)
            )
            crashed = one_run(broker, "crashed", Path(tmp), plan, args)
    finally:
        broker.stop()
    summary = {"requests": len(requests), "records": len(records), **compare(ref, crashed, records)}
    show(summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    document = {"provenance": origin, "settings": settings, **summary}
    args.out.write_text(json.dumps(document, indent=1) + "\n")


def show(summary: dict[str, Any]) -> None:
    kills = len(summary["starts"]) - 1
    table = Table(title=f"crash recovery: {summary['requests']:,} requests, {kills} SIGKILLs")
    for column in ("measure", "value"):
        table.add_column(column)
    for key in ("records", "lost", "answered_twice", "receipts_equal_reference"):
        table.add_row(key, str(summary.get(key, "-")))
    table.add_row("state_equal_reference", str(summary.get("state_equal_reference", "-")))
    table.add_row(
        "epsilon spent (reference / crashed)",
        f"{summary.get('reference_epsilon_spent')!r} / {summary['epsilon_spent']!r}",
    )
    for i, one in enumerate(summary["starts"]):
        ready = one["to_ready_seconds"]
        shown = "never ready" if ready is None else f"{ready:.2f} s to ready"
        ended = f"exit {one['exit']}" if "exit" in one else f"killed after {one['killed_after']}"
        table.add_row(f"start {i + 1}", f"{shown}; {ended}")
    Console().print(table)


if __name__ == "__main__":
    main()
