"""The Prometheus exporter: a short run's events, scraped over HTTP, equal the run's numbers.

Also checks that the documented set (``docs/metrics.md``) equals the definitions and that every
documented name is exported (the tests read only files of this repository).
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from support.prometheus import documented
from support.scenarios import SCENARIOS, SMALL

from server.cli import main
from server.metrics import METRICS, MetricsExporter
from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import load_scenario

ROOT = Path(__file__).parent.parent

#: Documented label values (docs/metrics.md); anything else would be unbounded.
ALLOWED = {
    "status": {"applied", "rejected", "duplicate"},
    "reason": {
        "budget",
        "method",
        "requested",
        "extractor_limit",
        "malformed",
        "oversized",
        "schema",
        "other",
        "bad_signature",
        "not_owner",
        "rate_limited",
    },
    "action": {"fail", "replay", "skip"},
    "split": {"test", "ood", "retain", "forget"},
    "attack": {"loss", "confidence", "entropy", "modified_entropy", "lira"},
    "fpr": {"0.01", "0.001"},
    "set": {"forget", "holdout", "retain"},
    "comparison": {
        "forget_vs_retain",
        "test_vs_reference",
        "retained_vs_initial",
        "predicted_test_vs_start",
    },
    "detector": {"adwin", "page_hinkley"},
    "stream": {"accuracy", "forget_loss", "mia_auc"},
    "bound": {"worst", "data", "tight", "exact"},
    "accounting": {"anchored", "guo", "worst", "exact"},
    "scope": {"head", "whole_model"},
    "extractor_data": {"private", "public", "dp"},
    "uncovered": {"none", "private_extractor", "dp_group_vacuous"},
    "class": {str(c) for c in range(100)} | {"other"},
    "stage": {"setup", "utility", "mia", "drift", "lira_references", "reference"},
    "method": {"decoremoval", "cr", "retrain_head"},
    "version": {"0.1.0"},
    "model": {"ours", "retrained"},
    "scenario": {"quickstart"},
}


def sample_names(name: str, kind: str) -> set[str]:
    return {f"{name}_count", f"{name}_bucket"} if kind == "histogram" else {name}


def test_docs_cover_the_definitions() -> None:
    docs = documented()
    assert docs == {d.full_name: d.kind for d in METRICS}


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[Any], str]:
    folder = tmp_path_factory.mktemp("exporter")
    exporter = MetricsExporter()
    port = exporter.serve(0)
    assert exporter._server.server_address[0] == "127.0.0.1"
    try:
        scenario = load_scenario(SCENARIOS / "quickstart.yaml", overrides=SMALL)
        result = run_scenario(
            scenario,
            ReportingConfig(
                console=Console(quiet=True), progress=False, plots=False, on_event=[exporter]
            ),
            output_dir=folder,
        )
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    finally:
        exporter.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    return result.final, events, text.decode()


def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_every_documented_name_is_exported(scraped: tuple[Any, Any, str]) -> None:
    _, _, text = scraped
    names = {name for name, _ in values(text)}
    missing = [n for n, kind in documented().items() if not sample_names(n, kind) & names]
    assert missing == []


def test_label_values_are_bounded(scraped: tuple[Any, Any, str]) -> None:
    _, events, text = scraped
    run_id = events[0]["run_id"]  # <scenario>-<run.json's id>, in the start event
    assert re.fullmatch(r"quickstart-[0-9a-f]{8}", run_id)
    for (name, labels), _ in values(text).items():
        if not name.startswith("unlearn_"):
            continue  # process_* and python_info: prometheus_client's collectors
        for key, value in labels:
            if key == "le":
                continue
            if key == "run_id":  # one per run
                assert value == run_id, value
                continue
            if key == "client":
                assert value == "other" or (value.isdigit() and int(value) < 64), (name, value)
            else:
                assert value in ALLOWED[key], (name, key, value)


def test_scraped_values_equal_the_run(scraped: tuple[dict[str, Any], list[Any], str]) -> None:
    final, events, text = scraped
    v = values(text)

    def get(name: str, **labels: str) -> float:
        return v[(name, tuple(sorted(labels.items())))]

    batches = [e for e in events if e["event"] == "deletion_batch"]
    assert get("unlearn_deleted_samples_total") == final["removed_total"]
    assert get("unlearn_deletion_requests_total", status="applied") == final["requests_applied"]
    assert get("unlearn_deletion_requests_total", status="rejected") == final["requests_rejected"]
    assert get("unlearn_deletion_batches_total") == len(batches)
    assert get("unlearn_deletion_batch_duration_seconds_count") == len(batches)
    assert get("unlearn_deletion_request_latency_seconds_count") == final["requests"]
    assert get("unlearn_deletion_lag_requests") == 0
    assert get("unlearn_retained_samples") == final["retained"]
    assert get("unlearn_retrains_total", reason="budget") == final["retrains_budget"]
    assert get("unlearn_cr_epsilon_target") == 1.0 and get("unlearn_cr_delta") == 1e-4
    # the quickstart's extractor is trained on the clients' rows: the head only, no total
    assert final["scope"] == "head"
    assert (
        get(
            "unlearn_cr_scope_info",
            scope="head",
            extractor_data="private",
            uncovered="private_extractor",
        )
        == 1.0
    )
    assert get("unlearn_cr_total_epsilon_spent") == math.inf
    last = batches[-1]
    assert get("unlearn_cr_budget_used_ratio") == pytest.approx(last["budget_used_ratio"])
    assert get("unlearn_cr_residual", bound="exact") == pytest.approx(last["residual_exact"])
    for attack, s in last["privacy"]["attacks"].items():
        assert get("unlearn_mia_auc_ratio", attack=attack, model="ours") == pytest.approx(s["auc"])
        assert get(
            "unlearn_mia_tpr_at_fpr_ratio", attack=attack, fpr="0.001", model="ours"
        ) == pytest.approx(s["tpr_at_fpr"]["0.001"])
    ref = [c for b in batches for c in b.get("checkpoints", [])][-1]
    for attack, s in ref["privacy"]["attacks"].items():
        assert get("unlearn_mia_auc_ratio", attack=attack, model="retrained") == pytest.approx(
            s["auc"]
        )
    assert get("unlearn_mia_efficacy_ratio", model="retrained") == pytest.approx(
        ref["privacy"]["efficacy"]
    )
    assert get("unlearn_forget_loss", model="ours") == pytest.approx(last["privacy"]["forget_loss"])
    predicted = last["drift"]["label"]["predicted_test_vs_start"]
    assert get("unlearn_prediction_tv_distance", model="ours") == pytest.approx(predicted["tv"])
    assert get("unlearn_prediction_js_divergence", model="retrained") == pytest.approx(
        ref["drift"]["label"]["predicted_test_vs_start"]["js"]
    )
    assert get("unlearn_model_accuracy_ratio", split="test", model="retrained") == pytest.approx(
        ref["reference_accuracy_test"]
    )
    assert get("unlearn_head_distance_to_retrain_ratio") == pytest.approx(
        ref["param_distance_relative"]
    )
    for comparison, s in last["drift"]["feature"].items():
        assert get("unlearn_feature_mmd2_p_value", comparison=comparison) == pytest.approx(
            s["p_value"]
        )
    alarms = sum(len(b["drift"]["detections"]) for b in batches)
    total = sum(val for (n, _), val in v.items() if n == "unlearn_drift_detections_total")
    assert total == alarms
    per_client = sum(
        val for (n, _), val in v.items() if n == "unlearn_client_deleted_samples_total"
    )
    held = sum(val for (n, _), val in v.items() if n == "unlearn_client_retained_samples")
    assert per_client == final["removed_total"] and held == final["retained"]
    assert get("unlearn_model_accuracy_ratio", split="test", model="ours") == pytest.approx(
        final["metrics"]["accuracy_test"]
    )
    withdrawn = [c for b in batches for c in b.get("withdrawn_clients", [])]
    total_withdrawn = sum(
        val for (n, _), val in v.items() if n == "unlearn_client_withdrawals_total"
    )
    assert total_withdrawn == len(withdrawn)
    # the run said it finished; build info names the run and the scenario
    assert get("unlearn_run_finished") == 1.0
    (info,) = [labels for (n, labels) in v if n == "unlearn_build_info"]
    assert dict(info)["scenario"] == "quickstart" and dict(info)["method"] == "decoremoval"


def test_no_created_series_and_process_metrics(scraped: tuple[Any, Any, str]) -> None:
    _, _, text = scraped
    names = {name for name, _ in values(text)}
    assert not [n for n in names if n.endswith("_created")]
    assert "_created" not in text
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"):
        assert name in names, name


def test_run_finished_is_zero_until_the_end() -> None:
    exporter = MetricsExporter(run_id="r1")
    assert exporter.metric("run_finished")._value.get() == 0.0
    exporter({"event": "start", "scenario": "s", "method": "cr", "requests": 3})
    assert exporter.metric("run_finished")._value.get() == 0.0
    exporter({"event": "consumer_end"})
    assert exporter.finished and exporter.metric("run_finished")._value.get() == 1.0
    text = exporter.registry.get_sample_value(
        "unlearn_build_info", {"version": "0.1.0", "method": "cr", "run_id": "r1", "scenario": "s"}
    )
    assert text == 1.0


def test_cli_flag_serves_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "run",
        str(SCENARIOS / "quickstart.yaml"),
        "--output",
        str(tmp_path),
        "--no-progress",
        "--no-plots",
        "--metrics-port",
        "0",
    ]
    for o in [*SMALL, "evaluation.attacks=[loss]", "evaluation.checkpoints=[]"]:
        args += ["--set", o]
    assert main(args) == 0
    assert re.search(r"metrics on http://127\.0\.0\.1:\d+/metrics", capsys.readouterr().out)
