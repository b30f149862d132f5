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
    res = promtool(
        "check", "rules", str(PROM / "rules" / "recording.yml"), str(PROM / "rules" / "alerts.yml")
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_rule_unit_tests_pass() -> None:
    res = promtool("test", "rules", str(PROM / "rules" / "tests.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("unlearn_cr_budget_used_ratio > 0.9", "unlearn_cr_budget_used_ratio > 0.99"),
        ("unlearn_mia_auc_retrain_reference > 0.1", "unlearn_mia_auc_retrain_reference > 0.3"),
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
    for name in ("recording.yml", "alerts.yml", "tests.yml"):
        shutil.copy(PROM / "rules" / name, tmp_path / name)
    alerts = (tmp_path / "alerts.yml").read_text()
    assert old in alerts
    (tmp_path / "alerts.yml").write_text(alerts.replace(old, new))
    res = promtool("test", "rules", str(tmp_path / "tests.yml"))
    assert res.returncode != 0 and "FAILED" in res.stdout + res.stderr
