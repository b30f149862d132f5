"""promtool on the shipped Prometheus config and rules: syntax, and rule unit tests that fail
when a rule is wrong. Skips (with the reason) where Debian's ``prometheus`` is not installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PROM = Path(__file__).parent.parent / "docker" / "prometheus"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)"
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


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
