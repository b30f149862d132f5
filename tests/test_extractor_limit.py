"""``model.dp.extractor_epsilon_limit``: the whole model retrained when the DP extractor's
group charge would pass the limit (``simulator.runner.extractor_limit``).

* the retrain happens at the batch the rule names, computed here from the accountants'
  ``epsilon_x`` and the rows each batch removed (``k epsilon_x > limit`` or a vacuous group
  delta), and its reason ``extractor_limit`` is in the events, the end counts and the summary;
* every receipt charges the rows removed since the extractor was trained: ``k`` restarts at 0
  on the retrain, and the scope stays ``whole_model``;
* the retrained extractor is the one trained from scratch on ``D'`` with the generation's seed
  (bit for bit), with fresh accountants; the clients' head rows and the head follow it; a
  saved state replays it;
* the Kafka stream gives the same receipts, retrains and Prometheus counter;
* a Flower transport retrains as the in-process one does (the clients are sent the rows
  they keep); the key is refused where it cannot be honoured (not dp).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rich.console import Console
from support.flower_loopback import LoopbackGrid
from support.scenarios import TEN_CLIENTS, scenario

from simulator.errors import ConfigError, InputError
from simulator.models import state_to_arrays
from simulator.models.dp_fedavg import ClientAccountants
from simulator.runner import ReportingConfig, run_scenario
from simulator.runner.extractor_refit import generation_scenario
from simulator.runner.featurize import in_process_round, train_featurizer
from simulator.runner.federation import build_federation
from simulator.runner.pipeline import apply_batch
from simulator.runner.run_state import RunState
from simulator.scenario import Scenario
from simulator.stream import batches

pytest.importorskip("opacus")

#: Ten clients of 80 rows, DP-SGD with enough noise for a few rows per extractor
#: (epsilon_x about 0.8), single-row requests, one request per batch, a withdrawal at tick 8.
DP = [
    *TEN_CLIENTS,
    "model.extractor_data=dp",
    "model.dp.noise_multiplier=4",
    "evaluation.checkpoints=[]",
    "stream.max_batch_requests=1",
    *(f"stream.phases.{p}.samples_per_request=1" for p in range(3)),
    *(f"stream.phases.{p}.rate=1" for p in range(3)),
]
CPU = torch.device("cpu")


def limited(epsilon_x: float, rows: float = 2.5) -> Scenario:
    """The scenario with a limit of ``rows`` times the extractor's epsilon."""
    return scenario(DP, f"model.dp.extractor_epsilon_limit={rows * epsilon_x!r}")


@pytest.fixture(scope="module")
def epsilon_x() -> float:
    part = build_federation(scenario(DP)).extractor_guarantee
    assert part is not None and part.epsilon is not None and part.epsilon > 0
    return float(part.epsilon)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, epsilon_x: float) -> tuple[Path, Any]:
    """The in-process run of ``limited(epsilon_x, rows=3.5)`` (the other transports' reference)
    and the Prometheus exporter that followed it."""
    from server.metrics.exporter import MetricsExporter

    exporter = MetricsExporter()
    folder = tmp_path_factory.mktemp("inprocess")
    config = ReportingConfig(progress=False, plots=False, on_event=[exporter])
    run_scenario(limited(epsilon_x, rows=3.5), config, output_dir=folder)
    return folder, exporter


def passes(k: int, eps: float, delta_x: float, limit: float, head_delta: float) -> bool:
    """The rule, written out: ``k eps > limit`` or ``delta_head + k e^((k-1) eps) delta_x >= 1``."""
    vacuous = head_delta + k * math.exp(min((k - 1) * eps, 700.0)) * delta_x >= 1
    return vacuous or k * eps > limit


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_whole_model_is_retrained_at_the_batch_the_rule_names(
    tmp_path: Path, epsilon_x: float
) -> None:
    sc = limited(epsilon_x)
    limit = sc.model.dp.extractor_epsilon_limit
    assert limit is not None
    run_scenario(sc, ReportingConfig(progress=False, plots=False), output_dir=tmp_path)
    events = lines(tmp_path / "events.jsonl")
    start = next(e for e in events if e["event"] == "start")
    eps, delta_x = start["extractor_epsilon"], start["extractor_delta"]
    assert eps == pytest.approx(epsilon_x)
    removing = [e for e in events if e["event"] == "deletion_batch" and e["samples"]]
    receipts = [r for r in lines(tmp_path / "receipts.jsonl") if r["status"] == "applied"]
    assert len(receipts) == len(removing)  # one request per batch
    k, retrains = 0, 0
    for event, receipt in zip(removing, receipts, strict=True):
        expected = passes(k + event["samples"], eps, delta_x, limit, sc.head.delta)
        assert (event.get("retrain_reason") == "extractor_limit") == expected, event["batch"]
        if expected:
            retrains += 1
            section = event["extractor_retrain"]
            assert section["generation"] == retrains and section["limit"] == limit
            eps = section["epsilon"]  # the new extractor's own accountants
            assert eps == pytest.approx(max(section["client_epsilons"].values()))
            k = 0  # the new extractor never read a removed row
        else:
            k += event["samples"]
        assert receipt["scope"] == "whole_model", event["batch"]
        assert receipt["total_epsilon_spent"] == pytest.approx(receipt["epsilon_spent"] + k * eps)
        assert event["certificate"]["scope"] == "whole_model"
    assert retrains >= 2 and retrains < len(removing)
    assert any(e["samples"] > 1 for e in removing)  # the withdrawal: a vacuous group alone
    end = json.loads((tmp_path / "metrics.json").read_text())
    assert end["retrains_extractor_limit"] == retrains
    assert end["extractor_generation"] == retrains and end["scope"] == "whole_model"
    assert "extractor_limit" in (tmp_path / "summary.md").read_text()


def test_the_retrained_extractor_is_the_one_trained_from_scratch_on_d_prime(
    epsilon_x: float,
) -> None:
    sc = limited(epsilon_x)
    fed = build_federation(sc)
    first = state_to_arrays(fed.featurizer.model)
    run = RunState(evaluate=False)
    for batch in batches(fed.requests, 1):
        outcome = apply_batch(fed, run, batch)
        if outcome.report is not None and outcome.report.retrain_reason == "extractor_limit":
            break
    assert fed.extractor.generation == 1 and fed.extractor.rows_since == 0
    ds = fed.dataset
    gone = np.asarray(run.forgotten, dtype=np.int64)
    d_prime = [s[~np.isin(s, gone)] for s in fed.client_indices]
    accountants = ClientAccountants()
    sc1 = generation_scenario(sc, 1)
    assert sc1.seed != sc.seed  # fresh noise, initial weights and RFF map
    pools = [(ds.x_train[s], ds.y_train[s]) for s in d_prime]
    scratch = train_featurizer(
        sc1,
        ds,
        ds.x_test,
        local_round=in_process_round(sc1, ds, pools, device=CPU, accountants=accountants),
        device=CPU,
    )
    ours = state_to_arrays(fed.featurizer.model)
    theirs = state_to_arrays(scratch.model)
    assert set(ours) == set(theirs)
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name])
        assert not np.array_equal(ours[name], first[name])
    for name, array in scratch.rff.to_arrays().items():
        np.testing.assert_array_equal(fed.featurizer.rff.to_arrays()[name], array)
    part = fed.extractor_guarantee
    assert part is not None
    assert part.epsilon == accountants.max_epsilon(sc.model.dp.delta)
    np.testing.assert_array_equal(fed.train_features, scratch(ds.x_train))
    for c, client in fed.clients.items():  # every client's head rows: the new features of D'
        np.testing.assert_array_equal(client.retained_ids, d_prime[c])
        np.testing.assert_array_equal(client.data.features, scratch(ds.x_train[d_prime[c]]))
    head = fed.head
    assert head.data.retained_count == sum(len(s) for s in d_prime)
    assert head.last_fit_reason == "extractor_limit"
    assert head.exact_residual() == pytest.approx(head.cumulative_residual, rel=1e-6)

    # a saved state replays the retrain: the same extractor, head and next removal
    again = build_federation(sc)
    again.load_state_dict(fed.state_dict())
    for name, array in state_to_arrays(again.featurizer.model).items():
        np.testing.assert_array_equal(array, ours[name])
    np.testing.assert_array_equal(again.head.W, head.W)
    nxt = next(b for b in batches(fed.requests, 1) if b[0].request_id not in run_ids(run, fed))
    apply_batch(fed, run, nxt)
    apply_batch(again, RunState.from_state_dict(run.state_dict()), nxt)
    np.testing.assert_array_equal(again.head.W, fed.head.W)


def run_ids(run: RunState, fed) -> set[str]:  # type: ignore[no-untyped-def]
    """Requests whose rows were removed already."""
    gone = set(run.forgotten)
    return {
        r.request_id
        for r in fed.requests
        if (r.sample_ids is not None and set(r.sample_ids) <= gone) or r.client_id is not None
    }


def test_the_limit_is_refused_where_it_cannot_be_honoured() -> None:
    with pytest.raises(ConfigError, match="only extractor_data 'dp'"):
        scenario(TEN_CLIENTS, "model.dp.extractor_epsilon_limit=3")
    with pytest.raises(ConfigError):
        scenario(DP, "model.dp.extractor_epsilon_limit=0")
    assert scenario(DP, "model.dp.extractor_epsilon_limit=3").model.dp.extractor_epsilon_limit == 3


def test_a_flower_transport_retrains_the_whole_model_as_the_in_process_one(
    tmp_path: Path, epsilon_x: float, reference: tuple[Path, Any]
) -> None:
    """flower-sim (the real ClientApp over an in-process grid): the clients train the new
    extractor on the retained rows the server sends, under the generation's seeds, and keep
    only those rows at their setup; head, receipts and retrains are the in-process run's, bit
    for bit."""
    from clients import protocol as rec
    from server.flower.settings import FleetSettings
    from server.server_app import run_on_grid

    sc = limited(epsilon_x, rows=3.5)
    ours, theirs = reference[0], tmp_path / "flower"
    grid = LoopbackGrid(sc.partition.num_clients, keep=True)
    settings = FleetSettings(timeout=5.0, train_timeout=30.0, retries=1, poll_interval=0.001)
    flower = sc.model_copy(update={"transport": "flower-sim"})
    run_on_grid(
        grid, flower, settings, output_dir=theirs, transport="flower-sim",
        console=Console(quiet=True), plots=False,
    )  # fmt: skip
    a, b = np.load(ours / "head.npz"), np.load(theirs / "head.npz")
    np.testing.assert_array_equal(a["W"], b["W"])
    assert (ours / "receipts.jsonl").read_text() == (theirs / "receipts.jsonl").read_text()
    end = json.loads((theirs / "metrics.json").read_text())
    assert end["retrains_extractor_limit"] >= 1
    assert end == json.loads((ours / "metrics.json").read_text()) | {
        k: end[k] for k in end if "seconds" in k or k in ("transport",)
    }
    # the retrains' messages carried the rows each client keeps
    retained = [m for m in grid.received if rec.RETAINED in rec.arrays_of(m.content)]
    assert {m.metadata.message_type for m in retained} == {rec.TRAIN, rec.SETUP}


def test_a_flower_client_refuses_to_keep_rows_outside_its_shard() -> None:
    """The ids a retrain sends are checked against the shard the client rebuilds: a row of
    another client's shard is an error, not a silently different extractor or head."""
    from clients.build import build_client, local_update
    from simulator.runner.federation import load_dataset, split_clients
    from simulator.scenario import scenario_to_yaml

    sc = scenario(DP)
    shards, _ = split_clients(sc, load_dataset(sc))
    text, foreign = scenario_to_yaml(sc), np.array([int(shards[1][0]), int(shards[2][0])])
    with pytest.raises(InputError, match="client 1 was asked to keep 1 row"):
        local_update(text, 1, 0, {}, None, foreign, 1)
    with pytest.raises(InputError, match="outside its shard"):
        build_client(text, 1, {}, {}, foreign)


@pytest.mark.integration
def test_kafka_gives_the_scenario_streams_receipts_and_retrains(
    tmp_path: Path, epsilon_x: float, reference: tuple[Path, Any]
) -> None:
    from prometheus_client import generate_latest

    from server.kafka.broker import LocalBroker, free_port
    from server.kafka.launch import as_kafka_source, consumer_config
    from server.kafka.producer import replay_requests
    from server.kafka.session import consume
    from server.kafka.settings import ConsumerSettings
    from server.kafka.topics import Topics
    from server.metrics.exporter import MetricsExporter

    sc = limited(epsilon_x, rows=3.5)
    (a, ours), theirs = reference, MetricsExporter()
    b = tmp_path / "kafka"
    fed = build_federation(as_kafka_source(sc))
    with LocalBroker(free_port(), log_path=tmp_path / "broker.log") as broker:
        replay_requests(fed.requests, bootstrap=broker.bootstrap, topics=Topics())
        stream = ConsumerSettings(bootstrap=broker.bootstrap, idle_timeout=2.0)
        config = consumer_config(stream, b, sc, fsync=False)
        consume(
            fed,
            config,
            b,
            ReportingConfig(console=Console(quiet=True), plots=False, on_event=[theirs]),
        )
    keys = ("request_id", "status", "model_version", "reason", "scope")
    got = [tuple(r[k] for k in keys) for r in lines(b / "receipts.jsonl")]
    want = [tuple(r[k] for k in keys) for r in lines(a / "receipts.jsonl")]
    assert got == want  # as tests/test_pipeline_parity.py; the epsilons to rounding
    for name in ("epsilon_spent", "total_epsilon_spent", "total_delta"):
        theirs_ = [r[name] for r in lines(b / "receipts.jsonl")]
        assert theirs_ == pytest.approx([r[name] for r in lines(a / "receipts.jsonl")]), name
    reasons = [
        [e.get("retrain_reason") for e in lines(folder / "events.jsonl") if e.get("retrained")]
        for folder in (a, b)
    ]
    assert reasons[0] == reasons[1] and "extractor_limit" in reasons[0]
    np.testing.assert_array_equal(np.load(a / "head.npz")["W"], np.load(b / "head.npz")["W"])
    counter = 'unlearn_retrains_total{reason="extractor_limit"}'
    for exporter in (ours, theirs):
        scrape = generate_latest(exporter.registry).decode().splitlines()
        value = next(float(x.rsplit(" ", 1)[1]) for x in scrape if x.startswith(counter + " "))
        assert value == reasons[0].count("extractor_limit")
