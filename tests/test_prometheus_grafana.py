"""The Grafana provisioning and dashboard JSON, checked without a Grafana server (none can run
here): structure, datasource wiring, rows, and that panels query only documented metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from server.metrics import METRICS

GRAFANA = Path(__file__).parent.parent / "docker" / "grafana"
NAMES = {d.full_name for d in METRICS}


def dashboards() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((GRAFANA / "dashboards").glob("*.json"))]


def panel_exprs(dash: dict) -> list[str]:
    return [t["expr"] for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]


def test_provisioning_points_at_the_dashboards_and_prometheus() -> None:
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    prov = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "unlearnsim.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    for dash in dashboards():
        for p in dash["panels"]:
            if p["type"] != "row":
                assert p["datasource"]["uid"] == source["uid"]
                assert all(t["datasource"]["uid"] == source["uid"] for t in p["targets"])


def test_dashboard_structure() -> None:
    (dash,) = dashboards()
    assert dash["uid"] and dash["schemaVersion"] >= 36
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    for wanted in ("Deletion pipeline (RED)", "Privacy", "Drift", "Certificate", "Per client"):
        assert any(r.startswith(wanted) for r in rows), wanted
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0
        if p["type"] != "row":
            assert p["targets"] and len({t["refId"] for t in p["targets"]}) == len(p["targets"])


def test_panels_use_only_documented_metrics() -> None:
    used: set[str] = set()
    for expr in panel_exprs(dashboards()[0]):
        for name in re.findall(r"\b(unlearn_[a-z0-9_]+)", expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in NAMES or base in NAMES, name
            used.add(base if base in NAMES else name)
    # every exported metric appears on the dashboard
    assert NAMES - used == set()
