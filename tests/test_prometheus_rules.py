"""promtool on the exported metrics and the shipped Prometheus config and rules: metric names,
syntax, and rule unit tests that fail when a rule is wrong. Skips (with the reason) where
Debian's ``prometheus`` is not installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from server.metrics import METRICS, MetricsExporter

PROM = Path(__file__).parent.parent / "docker" / "prometheus"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)"
)


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, input=stdin
    )


def populated_exposition() -> str:
    """The exporter's registry with a sample in every metric (one child per labelled one)."""
    exporter = MetricsExporter()
    for d in METRICS:
        metric = exporter.m[d.name]
        if d.labels:
            metric = metric.labels(*("x" for _ in d.labels))
        if d.kind == "counter":
            metric.inc()
        elif d.kind == "gauge":
            metric.set(0.5)
        else:
            metric.observe(0.5)
    return generate_latest(exporter.registry).decode()


def test_metric_names_pass_promtool_check_metrics() -> None:
    text = populated_exposition()
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert {d.full_name for d in METRICS} <= families  # every metric is in the exposition
    res = promtool("check", "metrics", stdin=text)
    assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_check_metrics_rejects_a_bits_unit() -> None:
    bad = "# HELP unlearn_x_bits x\n# TYPE unlearn_x_bits gauge\nunlearn_x_bits 1\n"
    res = promtool("check", "metrics", stdin=bad)
    assert res.returncode != 0 and "unlearn_x_bits" in res.stdout + res.stderr


def test_config_and_rules_are_valid() -> None:
    res = promtool("check", "config", str(PROM / "prometheus.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 rule files found" in res.stdout
    # every file under rules/ is a rule file (the unit tests live in tests/)
    rule_files = sorted(str(p) for p in (PROM / "rules").glob("*.yml"))
    assert [Path(f).name for f in rule_files] == ["alerts.yml", "recording.yml"]
    res = promtool("check", "rules", *rule_files)
    assert res.returncode == 0, res.stdout + res.stderr


def test_rule_unit_tests_pass() -> None:
    res = promtool("test", "rules", str(PROM / "tests" / "rules.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("unlearn_cr_budget_used_ratio > 0.9", "unlearn_cr_budget_used_ratio > 0.99"),
        (
            'ignoring(model) unlearn_mia_auc_ratio{model="retrained"} > 0.1',
            'ignoring(model) unlearn_mia_auc_ratio{model="retrained"} > 0.3',
        ),
        # without the run-finished signal the exporter-down alert fires after a normal end
        (
            "unless on(job, instance) (last_over_time(unlearn_run_finished[1h]) == 1)",
            "unless on(job, instance) (last_over_time(unlearn_run_finished[1h]) == 2)",
        ),
        (
            "deriv(unlearn_deletion_lag_requests[5m]) > 0",
            "deriv(unlearn_deletion_lag_requests[5m]) < 0",
        ),
        (
            'increase(unlearn_retrains_total{reason="budget"}[30m])) >= 3',
            'increase(unlearn_retrains_total{reason="budget"}[30m])) >= 1',
        ),
        (
            "and on() unlearn_cr_budget_used_ratio > 0.5",
            "and on() unlearn_cr_budget_used_ratio > 0.2",
        ),
        (
            "sum(rate(unlearn_stream_unauthorised_requests_total[5m])) > 1",
            "sum(rate(unlearn_stream_unauthorised_requests_total[5m])) > 0.1",
        ),
    ],
)
def test_rule_tests_catch_a_wrong_threshold(tmp_path: Path, old: str, new: str) -> None:
    shutil.copytree(PROM / "rules", tmp_path / "rules")
    shutil.copytree(PROM / "tests", tmp_path / "tests")
    alerts = (tmp_path / "rules" / "alerts.yml").read_text()
    assert old in alerts
    (tmp_path / "rules" / "alerts.yml").write_text(alerts.replace(old, new))
    res = promtool("test", "rules", str(tmp_path / "tests" / "rules.yml"))
    assert res.returncode != 0 and "FAILED" in res.stdout + res.stderr
