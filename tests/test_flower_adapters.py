"""The Flower adapters (ServerApp side and ClientApp) over an in-process loopback grid.

The real ``clients.client_app:app`` answers every message, with its state in
``context.state``; only the transport between server and client is replaced (see
``flower_loopback.py``), so these tests check the protocol, the equivalence with the
in-process transport and the failure handling in seconds. The Flower engines themselves are
exercised in ``test_flower_engines.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from support.flower_loopback import LoopbackGrid

from server.flower.settings import FleetSettings
from server.server_app import run_on_grid
from simulator.errors import ClientUnavailableError
from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import load_scenario

SCENARIO = Path(__file__).parent.parent / "scenarios" / "federation_tiny.yaml"
FAST = FleetSettings(timeout=0.5, train_timeout=1.0, retries=1, poll_interval=0.001, node_wait=5.0)
#: a longer stream: deletions for client 1 keep coming after a failure
LONGER = ["stream.phases.0.ticks=6", "evaluation.checkpoints=[]"]


def quiet() -> Console:
    return Console(quiet=True)


def inprocess(folder: Path, overrides: list[str]) -> Path:
    scenario = load_scenario(SCENARIO, overrides=overrides)
    run_scenario(
        scenario, ReportingConfig(console=quiet(), progress=False, plots=False), output_dir=folder
    )
    return folder


def loopback(
    folder: Path, overrides: list[str], grid: LoopbackGrid, transport: str = "flower-sim"
) -> Path:
    scenario = load_scenario(SCENARIO, overrides=[*overrides, "transport=flower-sim"])
    run_on_grid(
        grid,
        scenario,
        FAST,
        output_dir=folder,
        transport=transport,
        console=quiet(),
        plots=False,
    )
    return folder


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return inprocess(tmp_path_factory.mktemp("inprocess"), [])


def test_flower_adapters_give_the_inprocess_run(reference: Path, tmp_path: Path) -> None:
    grid = LoopbackGrid(3)
    out = loopback(tmp_path, [], grid)
    a, b = np.load(reference / "head.npz"), np.load(out / "head.npz")
    np.testing.assert_array_equal(a["W"], b["W"])  # same code, same process: bit-identical
    assert int(a["model_version"]) == int(b["model_version"])
    assert (reference / "receipts.jsonl").read_text() == (out / "receipts.jsonl").read_text()
    ref_clients = json.loads((reference / "clients.json").read_text())["clients"]
    assert json.loads((out / "clients.json").read_text())["clients"] == ref_clients
    # every deletion of the stream targets client 1: only client 1 received one
    received = grid.unlearn_messages()
    assert received[0] == received[2] == 0 and received[1] >= 1
    assert ref_clients["1"]["deletion_batches"] == received[1]
    # the statistics cache: the training from zero (head.cold_solver lbfgs) asks once at zero
    # (one class's Hessian and the Gram matrix), once per iteration (the accepted trial of its
    # line search is the next iteration's point), and twice for the polish; a batch once (its
    # exact residual); a warm retrain (head.retrain, the default) counts its L-BFGS
    # iterations and the final Newton polish, and asks once more, for the Hessian at its
    # converged head
    transport = json.loads((out / "transport.json").read_text())["messages"]
    start = lines(out / "events.jsonl")[0]
    assert start["head_newton_iterations"] == 1  # the polish
    batches = [e for e in lines(out / "events.jsonl") if e["event"] == "deletion_batch"]
    rounds = (
        start["head_iterations"]
        + 3
        + sum(b["retrain_newton_iterations"] + 2 for b in batches if b["retrained"])
    )
    assert transport["query.gradhess"]["round_trips"] <= rounds + len(batches)
    # the retrained reference (checkpoint 4) read the weights that setup and every deletion
    # sent along: no query.weights round trip
    assert any(e.get("checkpoints") for e in lines(out / "events.jsonl"))
    assert "query.weights" not in transport
    assert not [k for k in grid.sent if k[1] == "query.weights"]


def test_a_rebuild_of_the_classes_that_moved_crosses_flower(tmp_path: Path) -> None:
    """``head.rereference_after`` asks the clients for some classes' Hessians (a column
    selection on the wire and in the statistics cache's key): the same head and receipts as
    in process."""
    # four classes and a small budget: exact passes, then rebuilds of two or three classes
    overrides = [*LONGER, "head.rereference_after=1", "head.epsilon=0.05"]
    overrides.append("data.synthetic.n_classes=4")
    here = inprocess(tmp_path / "inprocess", overrides)
    out = loopback(tmp_path / "flower", overrides, LoopbackGrid(3))
    rebuilt = [e for e in lines(here / "events.jsonl") if "rereference" in (e.get("timings") or {})]
    assert rebuilt, "no rebuild happened: the test checks nothing"
    a, b = np.load(here / "head.npz"), np.load(out / "head.npz")
    np.testing.assert_array_equal(a["W"], b["W"])
    assert (here / "receipts.jsonl").read_text() == (out / "receipts.jsonl").read_text()


def test_a_deletion_batch_is_one_round_trip_unless_the_exact_residual_is_needed(
    tmp_path: Path,
) -> None:
    """A bound that is charged (not the exact residual) needs no gradient round: on
    flower-deploy each batch is one round trip to the owners only; ``head.report_exact``
    brings back the diagnostic round to every client, and changes nothing else."""
    charged = ["head.accounting=guo", "head.epsilon=1000000"]  # a budget no batch exceeds
    runs = {}
    for name, extra in (("default", []), ("report", ["head.report_exact=true"])):
        grid = LoopbackGrid(3)
        out = loopback(tmp_path / name, [*charged, *extra], grid, transport="flower-deploy")
        events = lines(out / "events.jsonl")
        runs[name] = (grid, out, events, json.loads((out / "transport.json").read_text()))
    (g0, out0, ev0, t0), (g1, out1, ev1, t1) = runs["default"], runs["report"]
    batches = [e for e in ev0 if e["event"] == "deletion_batch"]
    assert batches and not any(e["retrained"] for e in batches)
    assert (out0 / "receipts.jsonl").read_text() == (out1 / "receipts.jsonl").read_text()
    np.testing.assert_array_equal(np.load(out0 / "head.npz")["W"], np.load(out1 / "head.npz")["W"])
    assert not t0["exact_residual_round"] and t1["exact_residual_round"]
    assert all(e["residual_exact"] is None for e in batches)
    assert all(e["residual_exact"] is not None for e in ev1 if e["event"] == "deletion_batch")
    # one round trip per batch, to client 1 only (it owns every deleted row) ...
    assert t0["messages"]["train.unlearn"]["round_trips"] == len(batches)
    assert g0.unlearn_messages() == {0: 0, 1: len(batches), 2: 0}
    # ... and the diagnostic adds exactly one statistics round trip per batch, to everyone
    gradhess = {
        n: t["messages"]["query.gradhess"]["round_trips"] for n, t in (("0", t0), ("1", t1))
    }
    assert gradhess["1"] - gradhess["0"] == len(batches)
    for c in range(3):
        assert g1.sent[(c, "query.gradhess")] - g0.sent[(c, "query.gradhess")] == len(batches)


def test_a_client_that_stops_answering_is_reported_and_excluded(tmp_path: Path) -> None:
    grid = LoopbackGrid(3, kill_after={(1, "train.unlearn"): 1})
    out = loopback(tmp_path, LONGER, grid)
    events = lines(out / "events.jsonl")
    failed = [e for e in events if e.get("client_failures")]
    assert len(failed) == 1, "one batch meets the failure"
    assert "1" in failed[0]["client_failures"]
    assert "no reply within" in failed[0]["client_failures"]["1"]
    assert failed[0]["retrain_reason"] == "client_failed"
    receipts = lines(out / "receipts.jsonl")
    requests = sum(e["requests"] for e in events if e["event"] == "deletion_batch")
    assert len(receipts) == requests, "every request has a receipt"
    rejected = [r for r in receipts if r["status"] == "rejected"]
    assert rejected and all("client 1" in r["reason"] for r in rejected)
    # the first deletion for client 1 went through before it failed
    assert receipts[0]["status"] == "applied"
    end = events[-1]
    assert end["event"] == "end" and "1" in end["excluded_clients"]
    clients = json.loads((out / "clients.json").read_text())
    assert set(clients["clients"]) == {"0", "2"} and "1" in clients["excluded"]
    # the head was retrained on the survivors' rows only
    assert (
        end["retained"] == clients["clients"]["0"]["retained"] + clients["clients"]["2"]["retained"]
    )


def test_error_replies_are_retried_and_change_nothing(reference: Path, tmp_path: Path) -> None:
    grid = LoopbackGrid(3, flaky={2: "query.gradhess", 0: "train.setup"})
    out = loopback(tmp_path, [], grid)
    np.testing.assert_array_equal(
        np.load(reference / "head.npz")["W"], np.load(out / "head.npz")["W"]
    )
    assert (reference / "receipts.jsonl").read_text() == (out / "receipts.jsonl").read_text()


def test_a_client_failing_fedavg_stops_the_run_with_the_reason(tmp_path: Path) -> None:
    grid = LoopbackGrid(3, broken={0: "train"})
    with pytest.raises(ClientUnavailableError, match=r"FedAvg round 1: client 0: error reply"):
        loopback(tmp_path, [], grid)


def test_missing_supernodes_are_reported(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIO, overrides=["transport=flower-sim"])
    settings = FAST.model_copy(update={"node_wait": 0.2})
    with pytest.raises(ClientUnavailableError, match="no SuperNode with partition-id 2"):
        run_on_grid(
            LoopbackGrid(2),
            scenario,
            settings,
            output_dir=tmp_path,
            transport="flower-sim",
            console=quiet(),
        )


def test_run_config_defaults_and_errors() -> None:
    """``run_simulation`` passes an empty run config; ``flwr run`` may override any key."""
    from server.flower.settings import RunSettings
    from simulator.errors import ConfigError

    default = RunSettings.from_run_config({})
    assert default.scenario_path().exists() and default.transport == "auto"
    config = RunSettings.from_run_config({"timeout": 5.0, "train-timeout": 9.0, "retries": 0})
    assert (config.fleet.timeout, config.fleet.train_timeout, config.fleet.retries) == (5, 9, 0)
    with pytest.raises(ConfigError, match="run-config timeout"):
        RunSettings.from_run_config({"timeout": -1.0})
    with pytest.raises(ConfigError, match="run-config colour"):
        RunSettings.from_run_config({"colour": "red"})


def test_run_config_round_trips_and_matches_pyproject() -> None:
    """Every key the submitter sends is declared in ``[tool.flwr.app.config]`` with its default
    (``flwr run`` rejects undeclared keys), and parsing the flat keys gives the settings back."""
    import tomllib

    from server.flower.settings import APP_DIR, ConsumerSettings, FleetSettings, RunSettings

    declared = tomllib.loads((APP_DIR / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert declared["config"] == RunSettings().to_run_config()
    config = RunSettings(
        scenario="x.yaml",
        fleet=FleetSettings(timeout=7.0),
        kafka=ConsumerSettings(bootstrap="127.0.0.1:9", idle_timeout=3.0, max_batch_requests=4),
    )
    again = RunSettings.from_run_config(config.to_run_config())
    assert again == config and again.kafka.enabled and not RunSettings().kafka.enabled
    # the settings' defaults are the consumer's own (one source of truth for both paths)
    from server.kafka.batcher import BatchConfig
    from server.kafka.launch import consumer_config
    from server.kafka.topics import Topics

    tiny = load_scenario(APP_DIR / "scenarios" / "federation_tiny.yaml")
    default = consumer_config(ConsumerSettings(bootstrap="x:1"), APP_DIR, tiny)
    assert default.topics == Topics()
    # micro-batches of the scenario's stream.max_batch_requests unless the settings say
    assert (default.batch.max_requests, default.batch.max_wait) == (
        tiny.stream.max_batch_requests,
        BatchConfig().max_wait,
    )
    capped = consumer_config(ConsumerSettings(bootstrap="x:1", max_batch_requests=3), APP_DIR, tiny)
    assert capped.batch.max_requests == 3
