"""The federation on Flower's real engines, through the command line.

* simulation engine (Ray): the same head and the same receipts as the in-process transport;
* Deployment Engine (a SuperLink and 3 warm SuperNodes as processes): the same head and
  receipts, deletions reach only the client that owns the rows (the SuperNodes' own logs say
  which messages they received), every message is served by the SuperNode's warm worker, a
  SuperNode SIGKILLed while the run still needs it is reported instead of waited for (its
  worker goes with it), and every process the command started is stopped;
* stock SuperNodes (``flower-supernode``, a ``flwr-clientapp`` process per message) still run
  the app: marked slow (minutes of Flower's own polling).

The scenario is tiny (``scenarios/federation_tiny.yaml``: 300 rows, 1 FedAvg round, 2 deletion
batches); with warm SuperNodes a run takes well under a minute.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import load_scenario

ROOT = Path(__file__).parent.parent
SCENARIO = ROOT / "scenarios" / "federation_tiny.yaml"
#: no retrained reference: the deployed run's checks are about Flower, not evaluation
DEPLOY = ["evaluation.checkpoints=[]"]
#: seconds the server waits for a client's reply (a warm round trip takes about one)
TIMEOUT = "10"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process control is Linux-only")


def cli(folder: Path, transport: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "server.cli", "run", str(SCENARIO), "--transport", transport,
        "--output", str(folder), "--no-progress", "--no-plots", *extra,
    ]  # fmt: skip


def sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def inprocess(folder: Path, overrides: list[str]) -> Path:
    scenario = load_scenario(SCENARIO, overrides=overrides)
    run_scenario(scenario, ReportingConfig(progress=False, plots=False), output_dir=folder)
    return folder


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_same_run(reference: Path, out: Path) -> None:
    """Same head (float tolerance), same receipts, same client-side accounts."""
    a, b = np.load(reference / "head.npz"), np.load(out / "head.npz")
    np.testing.assert_allclose(b["W"], a["W"], rtol=1e-9, atol=1e-12)
    assert int(a["model_version"]) == int(b["model_version"])
    ra, rb = records(reference / "receipts.jsonl"), records(out / "receipts.jsonl")
    assert [(r["request_id"], r["status"], r["model_version"], r["reason"]) for r in ra] == [
        (r["request_id"], r["status"], r["model_version"], r["reason"]) for r in rb
    ]
    for x, y in zip(ra, rb, strict=True):
        assert y["residual"] == pytest.approx(x["residual"], rel=1e-9, abs=1e-15)
        assert y["epsilon_spent"] == pytest.approx(x["epsilon_spent"], rel=1e-9, abs=1e-15)
        assert y["scope"] == x["scope"]  # what the certificate covers, and its total
        if x["total_epsilon_spent"] is None:
            assert y["total_epsilon_spent"] is None
        else:
            assert y["total_epsilon_spent"] == pytest.approx(x["total_epsilon_spent"], rel=1e-9)
    ca = json.loads((reference / "clients.json").read_text())["clients"]
    cb = json.loads((out / "clients.json").read_text())["clients"]
    for c, report in cb.items():
        assert report["retained"] == ca[c]["retained"]
        assert report["deletion_batches"] == ca[c]["deletion_batches"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def stop(proc: subprocess.Popen[bytes], out: Path) -> None:
    """After a failed test: let the command stop its processes, then stop any left by PID."""
    if proc.poll() is None:
        proc.terminate()  # the command stops what it started on SIGTERM
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    listing = out / "flower" / "processes.json"
    if listing.exists():
        for pid in json.loads(listing.read_text())["pids"].values():
            if alive(pid):  # a session leader (SuperLink, launcher) or a launcher's child
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    os.kill(pid, signal.SIGKILL)


def served_warm(out: Path, client: int) -> int:
    """Tasks the warm worker of ``client`` served, checking none needed the stock path."""
    log = (out / "flower" / f"clientapp-{client}.log").read_text()
    assert "stock way" not in log, "the run's FAB is the preloaded code"
    return sum(1 for line in log.splitlines() if line.startswith("task ") and "exit 0" in line)


def wait_for_event(path: Path, kind: str, proc: subprocess.Popen[bytes], limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and any(
            f'"event":"{kind}"' in line.replace(" ", "") for line in path.read_text().splitlines()
        ):
            return
        assert proc.poll() is None, f"the run ended before its {kind} event"
        time.sleep(0.1)
    raise AssertionError(f"no {kind} event within {limit:g} s")


@pytest.mark.parametrize(
    ("provenance", "pool"),
    [
        ("private", "train_share"),
        ("public", "train_share"),
        ("public", "test_share"),
        ("dp", "train_share"),
    ],
)
def test_simulation_engine_gives_the_inprocess_run(
    tmp_path: Path, provenance: str, pool: str
) -> None:
    """Every extractor provenance: under public the server trains the extractor on its pool
    (a share of the training rows, or of the test split: ``model.public_source``) and the
    ClientApps fit their head statistics on features of the same encoder; under dp each
    ClientApp runs DP-SGD with its accountant's history carried by the server, and the
    accounted epsilon is the in-process run's."""
    pytest.importorskip("ray", reason="the simulation engine needs flwr[simulation] (Ray)")
    chosen = [f"model.extractor_data={provenance}", f"model.public_source={pool}"]
    reference = inprocess(tmp_path / "inprocess", chosen)
    out = tmp_path / "sim"
    done = subprocess.run(
        cli(out, "flower-sim", *sets(chosen)), capture_output=True, text=True, timeout=420
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for notice in ("DEPRECATED FEATURE", "FutureWarning"):  # no clutter (issue 29)
        assert notice not in done.stderr + done.stdout, notice
    assert_same_run(reference, out)
    scope = {"private": "head", "public": "whole_model", "dp": "whole_model"}[provenance]
    if provenance == "dp":
        ends = [json.loads((f / "metrics.json").read_text()) for f in (reference, out)]
        assert ends[1]["extractor_epsilon"] == pytest.approx(ends[0]["extractor_epsilon"])
        assert ends[1]["extractor_epsilon"] > 0
    scopes = [
        [r["scope"] for r in records(f / "receipts.jsonl") if r["status"] == "applied"]
        for f in (reference, out)
    ]
    assert scopes[1] == scopes[0]
    if provenance == "dp":  # whole_model until the group of every removed row is vacuous
        assert scopes[1][0] == "whole_model" and set(scopes[1]) <= {"whole_model", "head"}
    else:
        assert set(scopes[1]) == {scope}
    assert json.loads((out / "clients.json").read_text())["transport"] == "flower-sim"


def test_deployment_engine_gives_the_inprocess_run(tmp_path: Path) -> None:
    """3 SuperNodes; deletions only at client 1; a SuperNode killed before the end."""
    reference = inprocess(tmp_path / "inprocess", DEPLOY)
    out = tmp_path / "deploy"
    log = (tmp_path / "cli.log").open("wb")
    proc = subprocess.Popen(
        cli(out, "flower-deploy", "--client-timeout", TIMEOUT, *sets(DEPLOY)),
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        # the run's last step asks every client for its report: kill SuperNode 2 first
        wait_for_event(out / "events.jsonl", "end", proc, limit=540)
        pids = json.loads((out / "flower" / "processes.json").read_text())["pids"]
        os.kill(pids["supernode-2"], signal.SIGKILL)
        assert proc.wait(timeout=120) == 0, (tmp_path / "cli.log").read_text()[-3000:]
    finally:
        stop(proc, out)
    assert_same_run(reference, out)
    clients = json.loads((out / "clients.json").read_text())
    assert clients["transport"] == "flower-deploy"
    assert "2" in clients["unavailable"], "the killed SuperNode is reported, not waited for"
    # only SuperNode 1 ever received a deletion (its own log of received messages)
    logs = {c: (out / "flower" / f"supernode-{c}.log").read_text() for c in range(3)}
    assert "Receiving: train.unlearn" in logs[1]
    assert "train.unlearn" not in logs[0] and "train.unlearn" not in logs[2]
    assert all("Receiving: query.gradhess" in text for text in logs.values())
    # every message a SuperNode received was served by its warm worker; SuperNode 2 may have
    # received the final report request just before it was killed, leaving that task unserved
    for c, text in logs.items():
        received = text.count("Receiving:")
        assert received > 5
        assert served_warm(out, c) in ((received, received - 1) if c == 2 else (received,))
    # every process the command started is gone
    assert not [n for n, pid in pids.items() if alive(pid)]


def test_deployment_engine_survives_a_supernode_killed_mid_stream(tmp_path: Path) -> None:
    out = tmp_path / "deploy"
    log = (tmp_path / "cli.log").open("wb")
    proc = subprocess.Popen(
        cli(out, "flower-deploy", "--client-timeout", TIMEOUT, *sets(DEPLOY)),
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_event(out / "events.jsonl", "start", proc, limit=540)
        pids = json.loads((out / "flower" / "processes.json").read_text())["pids"]
        os.kill(pids["supernode-1"], signal.SIGKILL)  # client 1 owns every deletion
        # its worker goes with it while the run goes on (it waits for client 1's reply)
        deadline = time.monotonic() + 10
        while alive(pids["clientapp-1"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pids["clientapp-1"]) and proc.poll() is None
        assert alive(pids["clientapp-0"]) and alive(pids["supernode-0"])
        assert proc.wait(timeout=420) == 0, (tmp_path / "cli.log").read_text()[-3000:]
    finally:
        stop(proc, out)
    events = records(out / "events.jsonl")
    failed = [e for e in events if e.get("client_failures")]
    assert failed and "1" in failed[0]["client_failures"]
    assert failed[0]["retrain_reason"] == "client_failed"
    receipts = records(out / "receipts.jsonl")
    assert receipts and all(r["status"] == "rejected" for r in receipts)
    assert all("client 1" in r["reason"] for r in receipts)
    assert "1" in events[-1]["excluded_clients"]
    clients = json.loads((out / "clients.json").read_text())
    assert set(clients["clients"]) == {"0", "2"}
    assert not [n for n, pid in pids.items() if alive(pid)]


@pytest.mark.slow  # stock SuperNodes: a flwr-clientapp process per message, 3 s polls
def test_stock_supernodes_still_run_the_app(tmp_path: Path) -> None:
    """Without our workers or shorter waits (``flower-supernode``, as any Flower deployment
    runs it) the app gives the same run: it keeps nothing between messages but
    ``context.state``."""
    from rich.console import Console

    from server.flower.deployment import run_deployed
    from server.flower.settings import FleetSettings

    reference = inprocess(tmp_path / "inprocess", DEPLOY)
    out = tmp_path / "stock"
    scenario = load_scenario(SCENARIO, overrides=[*DEPLOY, "transport=flower-deploy"])
    run_deployed(
        scenario, out, FleetSettings(), console=Console(quiet=True), plots=False, stock=True
    )
    assert_same_run(reference, out)
    pids = json.loads((out / "flower" / "processes.json").read_text())["pids"]
    assert set(pids) == {"superlink", "supernode-0", "supernode-1", "supernode-2"}
    assert not (out / "flower" / "clientapp-0.log").exists()
    assert not [n for n, pid in pids.items() if alive(pid)]


def test_kafka_stream_on_the_simulation_engine_matches_inprocess(tmp_path: Path) -> None:
    """``--stream kafka`` over Flower: the ServerApp consumes the topic and answers the same
    receipts, with the same final head, as the in-process consumer."""
    from support.kafka import read_receipts

    from server.cli import main
    from server.kafka.broker import LocalBroker, free_port
    from server.kafka.producer import replay_requests, scenario_requests
    from server.kafka.topics import Topics

    requests = scenario_requests(load_scenario(SCENARIO))
    with LocalBroker(free_port()) as broker:
        replay_requests(requests, bootstrap=broker.bootstrap, topics=Topics())
        outs, receipts = {}, {}
        for transport in ("inprocess", "flower-sim"):
            out = tmp_path / transport
            topics = Topics(receipts=f"receipts-{transport}")
            args = [
                "--stream", "kafka", "--bootstrap", broker.bootstrap, "--group", transport,
                "--receipts-topic", topics.receipts, "--idle-timeout", "3",
            ]  # fmt: skip
            if transport == "inprocess":
                assert main(["run", str(SCENARIO), "--output", str(out), *args]) == 0
            else:
                done = subprocess.run(
                    cli(out, transport, *args), capture_output=True, text=True, timeout=420
                )
                assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            outs[transport] = json.loads((out / "metrics.json").read_text())
            receipts[transport] = {r.request_id: r for r in read_receipts(broker.bootstrap, topics)}
    a, b = receipts["inprocess"], receipts["flower-sim"]
    assert sorted(a) == sorted(r.request_id for r in requests) == sorted(b)
    for rid, r in a.items():
        assert (b[rid].status, b[rid].model_version) == (r.status, r.model_version)
        assert b[rid].residual == pytest.approx(r.residual, rel=1e-9, abs=1e-15)
    sa, sb = outs["inprocess"]["kafka"], outs["flower-sim"]["kafka"]
    assert (sb["applied"], sb["samples"], sb["model_version"]) == (
        sa["applied"], sa["samples"], sa["model_version"],
    )  # fmt: skip
    sa, sb = outs["inprocess"], outs["flower-sim"]
    assert sb["metrics"]["accuracy_test"] == pytest.approx(sa["metrics"]["accuracy_test"])
    evaluated = {  # the one pipeline: MIA and drift on the Kafka path over Flower too
        t: [
            (e["privacy"]["attacks"], e["drift"]["label"])
            for e in records(tmp_path / t / "events.jsonl")
            if e.get("event") == "deletion_batch" and "privacy" in e
        ]
        for t in outs
    }
    assert evaluated["flower-sim"] and evaluated["flower-sim"] == evaluated["inprocess"]
