"""Debian's real Prometheus scrapes the exporter while a short scenario runs.

Prometheus runs on 127.0.0.1 (a free port, temporary storage, 1 s scrape and rule-evaluation
interval) with the shipped recording and alert rules. After the run, through the HTTP API:
every documented metric name, every recording rule and every PromQL expression of every
Grafana panel (``$__rate_interval`` etc. substituted) must return data. Skips, saying why,
where ``prometheus`` is not installed (``apt-get install prometheus``).
"""

from __future__ import annotations

import math
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from support.prometheus import GRAFANA_VARIABLES, api, dashboards, documented, panel_exprs, query
from support.scenarios import SCENARIOS, SMALL

from server.metrics import MetricsExporter
from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import load_scenario

ROOT = Path(__file__).parent.parent
RULES = ROOT / "docker" / "prometheus" / "rules"
PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (apt-get install prometheus)"
)
#: Grafana's built-in variables, as a panel would expand them on a 15-minute dashboard.


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Any, what: str, timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            value = check()
            if value:
                return value
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("prometheus")
    exporter = MetricsExporter()
    target = exporter.serve(0)
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES / "recording.yml"), str(RULES / "alerts.yml")],
        "scrape_configs": [
            {"job_name": "unlearnsim", "static_configs": [{"targets": [f"127.0.0.1:{target}"]}]}
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    assert PROMETHEUS is not None
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: urllib.request.urlopen(base + "/-/ready", timeout=2).status == 200,
            "prometheus ready",
        )
        wait_for(lambda: query(base, 'up{job="unlearnsim"} == 1'), "first scrape")
        scenario = load_scenario(SCENARIOS / "quickstart.yaml", overrides=SMALL)
        result = run_scenario(
            scenario,
            ReportingConfig(
                console=Console(quiet=True), progress=False, plots=False, on_event=[exporter]
            ),
            output_dir=tmp / "run",
        )
        final = result.final
        # the final state has been scraped, then a few more scrapes so every rate has a window
        wait_for(
            lambda: [
                r
                for r in query(base, "unlearn_deleted_samples_total")
                if float(r["value"][1]) == final["removed_total"]
            ],
            "final scrape",
        )
        time.sleep(3.0)
        yield base, final
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        exporter.close()


def test_target_is_up_and_rules_are_healthy(prometheus: tuple[str, dict[str, Any]]) -> None:
    base, _ = prometheus
    targets = api(base, "/api/v1/targets")["activeTargets"]
    assert [t["health"] for t in targets] == ["up"]
    groups = api(base, "/api/v1/rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 19
    assert all(r["health"] == "ok" for r in rules), [r for r in rules if r["health"] != "ok"]


def test_every_documented_metric_has_data(prometheus: tuple[str, dict[str, Any]]) -> None:
    base, final = prometheus
    missing = []
    for name, kind in documented().items():
        series = name + "_count" if kind == "histogram" else name
        if not query(base, series):
            missing.append(name)
    assert missing == []
    (r,) = query(base, "unlearn_deleted_samples_total")
    assert float(r["value"][1]) == final["removed_total"]


def test_every_recording_rule_returns_data(prometheus: tuple[str, dict[str, Any]]) -> None:
    base, _ = prometheus
    records = [
        r["record"]
        for g in yaml.safe_load((RULES / "recording.yml").read_text())["groups"]
        for r in g["rules"]
    ]
    assert [rec for rec in records if not query(base, rec)] == []


def test_every_dashboard_panel_query_returns_data(prometheus: tuple[str, dict[str, Any]]) -> None:
    base, _ = prometheus
    empty, undefined = [], []
    for dash in dashboards():
        for expr in panel_exprs(dash):
            for var, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, f"unsubstituted variable in {expr}"
            result = query(base, expr)
            if not result:
                empty.append(expr)
            elif all(math.isnan(float(r["value"][1])) for r in result):
                undefined.append(expr)
    assert empty == []
    assert undefined == []


def test_the_run_variable_and_annotations_query_data(
    prometheus: tuple[str, dict[str, Any]],
) -> None:
    base, final = prometheus
    (dash,) = dashboards()
    (info,) = query(base, "unlearn_build_info")
    labels = info["metric"]
    assert labels["scenario"] == "quickstart" and labels["run_id"].startswith("quickstart-")
    # the hidden variable resolves the run to its exporter, and the panels filter by it
    instances = query(base, f'unlearn_build_info{{run_id=~"{labels["run_id"]}"}}')
    assert [r["metric"]["instance"] for r in instances] == [labels["instance"]]
    (done,) = query(base, "unlearn_run_finished")
    assert float(done["value"][1]) == 1.0
    for note in dash["annotations"]["list"]:
        if "expr" not in note:
            continue
        expr = note["expr"].replace("$instance", labels["instance"]).replace("[1m]", "[15m]")
        result = query(base, expr)
        if note["name"] == "Retrains" and final["retrains_budget"]:
            assert result, note["name"]
        if note["name"] == "Run finished":
            assert result, note["name"]


def test_process_metrics_and_no_created_series(prometheus: tuple[str, dict[str, Any]]) -> None:
    base, _ = prometheus
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"):
        assert query(base, name), name
    assert query(base, '{__name__=~"unlearn_.*_created"}') == []
