"""One deletion pipeline: the scenario stream and a Kafka stream of the same requests give the
same receipts, the same head, the same run folder and the same metrics (with MIA, accuracy and
drift values), and ``run`` and ``compare`` delete the same ids.

The Flower transports are held to the in-process run by ``tests/test_flower_engines.py``
(scenario stream over flower-sim and flower-deploy; Kafka stream over flower-sim).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest
from rich.console import Console
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker, free_port
from server.kafka.launch import as_kafka_source, consumer_config
from server.kafka.producer import replay_requests
from server.kafka.session import consume
from server.kafka.settings import ConsumerSettings
from server.kafka.topics import Topics
from server.metrics.exporter import MetricsExporter as Exporter
from simulator.compare.workload import expand_requests
from simulator.runner import ReportingConfig, run_scenario
from simulator.runner.federation import build_federation, split_clients
from simulator.stream import batches

#: One request per batch, so Kafka's micro-batches are the scenario's batches; the scenario's
#: evaluation schedule (every 4 batches) and one retrained-reference checkpoint.
PARITY = [*TEN_CLIENTS, "stream.max_batch_requests=1", "evaluation.every=4"]
FILES = ("events.jsonl", "receipts.jsonl", "metrics.json", "summary.md", "head.npz")


def samples(exporter: Exporter) -> dict[str, float]:
    """Every exported sample (name with labels) and its value."""
    out = {}
    for line in generate_latest(exporter.registry).decode().splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def names(values: dict[str, float]) -> set[str]:
    return {k.split("{", 1)[0] for k in values}


def receipts(folder: Path) -> list[tuple[str, str, int, str | None, str | None]]:
    rows = [json.loads(x) for x in (folder / "receipts.jsonl").read_text().splitlines()]
    return [
        (r["request_id"], r["status"], r["model_version"], r["reason"], r["scope"]) for r in rows
    ]


def assert_scope(folder: Path, provenance: str) -> None:
    """Every applied receipt states the certificate's scope and the whole model's total."""
    rows = [json.loads(x) for x in (folder / "receipts.jsonl").read_text().splitlines()]
    applied = [r for r in rows if r["status"] == "applied"]
    assert applied
    end = json.loads((folder / "metrics.json").read_text())
    for r in applied:
        if provenance == "public":
            assert r["scope"] == "whole_model"
            assert (r["total_epsilon_spent"], r["total_delta"]) == (r["epsilon_spent"], r["delta"])
        elif provenance == "dp" and r["scope"] == "whole_model":  # k rows so far: + k eps_x
            k = (r["total_epsilon_spent"] - r["epsilon_spent"]) / end["extractor_epsilon"]
            assert k == pytest.approx(round(k)) and round(k) >= 1
        else:
            assert r["scope"] == "head" and r["total_epsilon_spent"] is None
    if provenance == "dp":  # whole_model until the rows removed so far make the group vacuous
        assert applied[0]["scope"] == "whole_model"
    scope = "head" if provenance != "public" else "whole_model"
    assert end["scope"] == scope and end["extractor_data"] == provenance
    summary = (folder / "summary.md").read_text()
    assert f"scope: {scope} (extractor_data {provenance})" in summary


@pytest.mark.integration
@pytest.mark.parametrize(
    ("provenance", "pool"),
    [
        ("private", "train_share"),
        ("public", "train_share"),
        ("public", "test_share"),
        ("dp", "train_share"),
    ],
)
def test_kafka_stream_is_the_scenario_stream(tmp_path: Path, provenance: str, pool: str) -> None:
    """Every provenance, and the public pool from the test split (``model.public_source``)."""
    sc = scenario(PARITY, f"model.extractor_data={provenance}", f"model.public_source={pool}")
    ours, theirs = Exporter(), Exporter()
    run_scenario(
        sc,
        ReportingConfig(progress=False, plots=False, on_event=[ours]),
        output_dir=tmp_path / "run",
    )
    fed = build_federation(as_kafka_source(sc))
    with LocalBroker(free_port(), log_path=tmp_path / "broker.log") as broker:
        replay_requests(fed.requests, bootstrap=broker.bootstrap, topics=Topics())
        stream = ConsumerSettings(bootstrap=broker.bootstrap, idle_timeout=2.0)
        config = consumer_config(stream, tmp_path / "kafka", sc, fsync=False)
        assert config.batch.max_requests == 1  # the scenario's stream.max_batch_requests
        consume(
            fed,
            config,
            tmp_path / "kafka",
            ReportingConfig(console=Console(quiet=True), plots=False, on_event=[theirs]),
        )
    a, b = tmp_path / "run", tmp_path / "kafka"
    for name in FILES:  # one output contract
        assert (a / name).exists() and (b / name).exists(), name
    assert receipts(a) == receipts(b)
    assert_scope(a, provenance)
    assert_scope(b, provenance)
    np.testing.assert_array_equal(np.load(a / "head.npz")["W"], np.load(b / "head.npz")["W"])
    end_a = json.loads((a / "metrics.json").read_text())
    end_b = json.loads((b / "metrics.json").read_text())
    assert end_b["metrics"] == pytest.approx(end_a["metrics"])
    assert end_b["kafka"]["applied"] == end_a["requests_applied"]
    batch_a = [json.loads(x) for x in (a / "events.jsonl").read_text().splitlines()]
    batch_b = [json.loads(x) for x in (b / "events.jsonl").read_text().splitlines()]
    evaluated = [
        (e["batch"], e["metrics"], e["privacy"]["attacks"], e.get("checkpoints", []) != [])
        for e in batch_a
        if e["event"] == "deletion_batch" and "metrics" in e
    ]
    assert evaluated == [
        (e["batch"], e["metrics"], e["privacy"]["attacks"], e.get("checkpoints", []) != [])
        for e in batch_b
        if e["event"] == "deletion_batch" and "metrics" in e
    ]
    assert any(checked for *_, checked in evaluated)  # the checkpoint's reference, both paths

    va, vb = samples(ours), samples(theirs)
    assert names(va) <= names(vb)  # Kafka adds its own counters, never fewer
    scope = "whole_model" if provenance == "public" else "head"  # dp: vacuous by the end
    uncovered = {"public": "none", "private": "private_extractor", "dp": "dp_group_vacuous"}
    for v in (va, vb):  # the scope on the scrape, both paths
        info = {k: x for k, x in v.items() if k.startswith("unlearn_cr_scope_info{")}
        on = {k for k, x in info.items() if x == 1}
        assert on == {
            f'unlearn_cr_scope_info{{extractor_data="{provenance}",scope="{scope}",'
            f'uncovered="{uncovered[provenance]}"}}'
        }
        total = v["unlearn_cr_total_epsilon_spent"]
        if provenance == "public":
            assert total == v["unlearn_cr_epsilon_spent"] > 0
        else:  # private; dp once the rows removed so far make the extractor's group vacuous
            assert total == float("inf")
    for key in ("unlearn_mia_auc_ratio", "unlearn_model_accuracy_ratio", "unlearn_feature_mmd2"):
        found = {k: v for k, v in vb.items() if k.startswith(key + "{")}
        assert found and all(v != 0 for v in found.values()), key
        assert found == pytest.approx({k: va[k] for k in found}), key


def test_run_and_compare_delete_the_same_ids(tmp_path: Path) -> None:
    """Same stream, same validation: ``compare``'s removal steps are ``run``'s batches, also
    when requests name rows that are already deleted (rejected whole by both)."""
    sc = scenario(TEN_CLIENTS)
    fed = build_federation(sc)
    requests = list(fed.requests)
    again = requests[0].model_copy(update={"request_id": "again", "tick": requests[-1].tick})
    requests.append(again)  # names ids deleted by the first request: rejected whole
    max_batch = sc.stream.max_batch_requests
    shards, _ = split_clients(sc, fed.dataset)
    groups = np.full(fed.dataset.n_train, len(shards), dtype=np.int64)
    for c, rows in enumerate(shards):
        groups[rows] = c
    steps = expand_requests(requests, max_batch, groups, num_clients=len(shards))

    from simulator.runner.pipeline import apply_batch
    from simulator.runner.run_state import RunState

    run_fed, run = copy.deepcopy(fed), RunState(evaluate=False)
    removed = []
    for batch in batches(requests, max_batch):
        outcome = apply_batch(run_fed, run, batch)
        if outcome.removed:
            removed.append(list(outcome.removed))
    assert [list(map(int, s)) for s in steps] == removed
    assert outcome.receipts[-1] is not None and outcome.receipts[-1].status == "rejected"
