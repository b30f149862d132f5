"""``unlearnsim stack up`` runs docker/compose.yaml's services as processes, end to end.

The real command starts the bundled broker (for the ``kafka`` service), Debian's Prometheus, a
Flower SuperLink and three SuperNodes, the server (the ServerApp consuming the requests topic
over the Deployment Engine) and the producer, all on 127.0.0.1, and waits for the server to
finish. Then: every request of the scenario has exactly one receipt on the receipts topic,
Prometheus holds the run's metrics scraped from the ServerApp, and ``stack down`` leaves none
of the processes (or their children) behind. The SuperNodes are warm (`unlearnsim supernode`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.kafka import read_receipts
from support.prometheus import GRAFANA_VARIABLES, api, dashboards

from server.kafka.producer import scenario_requests
from server.kafka.topics import Topics
from server.processes import alive, descendants
from server.stack.compose import ROOT
from simulator.scenario import load_scenario

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="prometheus not installed (apt-get install prometheus)",
)
UNLEARNSIM = [sys.executable, "-m", "server.cli"]


def stack(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*UNLEARNSIM, "stack", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def empty_panels(prom: str, since: float) -> list[str]:
    """Titles of the panels none of whose queries returned a sample during the run."""
    empty = []
    for dash in dashboards():
        stack = list(dash["panels"])
        while stack:  # rows may nest their panels
            panel = stack.pop(0)
            stack += panel.get("panels", [])
            exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
            if exprs and not has_data(prom, exprs, since):
                empty.append(f"{dash.get('title')}: {panel.get('title')}")
    return empty


def has_data(prom: str, exprs: list[str], since: float) -> bool:
    """Whether any of a panel's queries returned a sample during the run."""
    import time

    for expr in exprs:
        for var, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(var, value)
        data = api(
            prom, "/api/v1/query_range", query=expr, start=str(since - 60),
            end=str(time.time()), step="5",
        )  # fmt: skip
        if any(series["values"] for series in data["result"]):
            return True
    return False


def test_stack_up_answers_every_request_and_down_leaves_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "stack"
    family: set[int] = set()
    try:
        up = stack("up", "--dir", str(folder), "--wait", "--timeout", "1200", timeout=1300)
        state = json.loads((folder / "stack.json").read_text())
        logs = {n: Path(e["log"]) for n, e in state["services"].items()}
        assert up.returncode == 0, up.stdout + up.stderr + logs["server"].read_text()[-3000:]
        services = state["services"]
        assert set(services) >= {"kafka", "superlink", "server", "producer", "prometheus"}
        assert "grafana" in state["skipped"]

        # every request of the scenario answered exactly once, applied or rejected
        scenario = load_scenario(ROOT / services["server"]["argv"][2])
        requests = scenario_requests(scenario)
        bootstrap = f"127.0.0.1:{services['kafka']['ports']['9092']}"
        receipts = read_receipts(bootstrap, Topics())
        assert sorted(r.request_id for r in receipts) == sorted(r.request_id for r in requests)
        assert {r.status for r in receipts} <= {"applied", "rejected"}
        summary = json.loads((folder / "volumes/runs/stack/metrics.json").read_text())["kafka"]
        assert summary["applied"] + summary["rejected"] == len(requests) > 0
        assert summary["samples"] > 0

        # Prometheus scraped the ServerApp's exporter (under the SuperLink) during the run
        prom = f"http://127.0.0.1:{services['prometheus']['ports']['9090']}"
        deleted = api(
            prom, "/api/v1/query", query="max(last_over_time(unlearn_deleted_samples_total[30m]))"
        )
        assert float(deleted["result"][0]["value"][1]) == summary["samples"]
        answered = api(
            prom,
            "/api/v1/query",
            query="sum(max_over_time(unlearn_deletion_requests_total[30m]))",
        )
        assert float(answered["result"][0]["value"][1]) == len(requests)

        # every Grafana panel has data (the compose stack's dashboard shows every row)
        empty = empty_panels(prom, float(state["started_at"]))
        assert not empty, f"panels without data: {empty}"

        leaders = [int(e["pid"]) for e in services.values()]
        family = descendants(leaders) | set(leaders)
        assert any(alive(p) for p in family)  # the broker, SuperLink, SuperNodes, Prometheus
    finally:
        down = stack("down", "--dir", str(folder), "--volumes", timeout=120)
    assert down.returncode == 0, down.stderr
    assert not [p for p in family if alive(p)]
    assert not (folder / "stack.json").exists() and not (folder / "volumes").exists()
