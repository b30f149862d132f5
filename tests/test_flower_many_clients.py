"""Many clients: the same head and receipts on every transport, and the engine settings for it.

* the simulation engine's one-pass message queue (``server/flower/sim_engine.py``): Flower's
  internals it replaces are still there, it hands each SuperNode at most one message per sweep
  in the order they were pushed, marks them delivered and leaves expired ones to Flower's check;
* ``--ray-address`` / ``RAY_ADDRESS``: the Ray backend joins a running cluster (no ``num_cpus``
  then) or starts one here with one actor per core;
* 200 clients: the in-process federation and the simulation engine (slow: Ray and 200 virtual
  SuperNodes) give the same head and the same receipts.
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("flwr", reason="the Flower extra is not installed")

from test_flower_engines import assert_same_run, cli, inprocess, sets

from server.flower import sim_engine
from server.flower.simulation import backend_config

#: 200 clients of 20 rows, single-sample requests over all of them, every batch with its
#: all-client exact round (``report_exact``), no evaluation extras.
MANY = [
    "partition.num_clients=200",
    "data.synthetic.n_train=4000",
    "stream.phases.0.target.kind=random",
    "stream.phases.0.target.client=null",
    "stream.phases.0.ticks=4",
    "stream.phases.0.rate=3",
    "stream.phases.0.samples_per_request=1",
    "head.report_exact=true",
    "evaluation.checkpoints=[]",
    "evaluation.attacks=[]",
]


def test_the_simulation_engine_internals_still_match() -> None:
    assert sim_engine.pin_problems() == []


@dataclass
class FakeState:
    """What :func:`sim_engine.sweep_once` uses of ``InMemoryLinkState``."""

    message_ins_store: dict[str, Any]
    expired: set[str] = field(default_factory=set)
    lock: Any = field(default_factory=threading.RLock)
    checked: list[set[str]] = field(default_factory=list)

    def _check_stored_messages(self, message_ids: set[str]) -> None:
        self.checked.append(set(message_ids))
        for mid in message_ids & self.expired:
            self.message_ins_store.pop(mid)


def message(node: int) -> Any:
    return SimpleNamespace(metadata=SimpleNamespace(dst_node_id=node, delivered_at=""))


def test_a_sweep_hands_each_node_its_first_undelivered_message_once() -> None:
    store = {"a": message(1), "b": message(2), "c": message(1), "d": message(3), "e": message(9)}
    state = FakeState(store, expired={"d"})
    first = sim_engine.sweep_once(state, {1: 0, 2: 1, 3: 2})  # type: ignore[arg-type]
    assert first == [store["a"], store["b"]]  # "d" expired, node 9 is not in the simulation
    assert state.checked == [{"a", "b", "c", "d", "e"}]  # one expiry check of the whole store
    assert all(m.metadata.delivered_at for m in first)
    assert sim_engine.sweep_once(state, {1, 2, 3}) == [store["c"]]  # type: ignore[arg-type]
    assert sim_engine.sweep_once(state, {1, 2, 3}) == []  # type: ignore[arg-type]


def test_the_one_pass_queue_is_installed_for_the_simulation_only() -> None:
    from flwr.server.superlink.fleet.vce import vce_api

    flower = vce_api.add_messages_to_queue
    with sim_engine.one_pass_queue():
        assert vce_api.add_messages_to_queue is sim_engine.add_messages_to_queue
    assert vce_api.add_messages_to_queue is flower


def test_ray_joins_a_running_cluster_or_starts_here() -> None:
    local = backend_config(3, None, env={})
    assert "address" not in local["init_args"]
    assert 1 <= local["init_args"]["num_cpus"] <= 3
    for given, env in (("auto", {}), (None, {"RAY_ADDRESS": "10.0.0.5:6379"})):
        init = backend_config(1000, given, env=env)["init_args"]
        assert init["address"] == (given or env["RAY_ADDRESS"])
        assert "num_cpus" not in init  # Ray refuses num_cpus when it joins a cluster
    given_first = backend_config(2, "head:6379", env={"RAY_ADDRESS": "x:1"})
    assert given_first["init_args"]["address"] == "head:6379"  # the option before the variable
    assert (
        local["client_resources"]
        == given_first["client_resources"]
        == {
            "num_cpus": 1,
            "num_gpus": 0.0,
        }
    )


def test_run_takes_a_ray_address() -> None:
    from server.cli import build_parser

    args = build_parser().parse_args(
        ["run", "scenarios/federation_tiny.yaml", "--transport", "flower-sim",
         "--ray-address", "auto"]
    )  # fmt: skip
    assert args.ray_address == "auto"
    assert build_parser().parse_args(["run", "x.yaml"]).ray_address is None


@pytest.mark.slow  # Ray, 200 virtual SuperNodes and their setup: about 30 s on 2 cores
def test_two_hundred_clients_on_the_simulation_engine_give_the_inprocess_run(
    tmp_path: Path,
) -> None:
    pytest.importorskip("ray", reason="the simulation engine needs flwr[simulation] (Ray)")
    reference = inprocess(tmp_path / "inprocess", MANY)
    out = tmp_path / "sim"
    done = subprocess.run(
        cli(out, "flower-sim", *sets(MANY)), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_same_run(reference, out)
