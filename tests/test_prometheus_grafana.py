"""The Grafana provisioning and dashboard JSON, checked without a Grafana server (none can run
here): structure, datasource wiring, rows, that panels query only documented metrics, the run
variable, units, axes, layout and annotations, and that the JSON is what
``scripts/build_dashboard.py`` writes."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import yaml
from support.prometheus import dashboards, panel_exprs

from server.metrics import METRICS
from server.metrics.definitions import PROCESS_METRICS

ROOT = Path(__file__).parent.parent
GRAFANA = ROOT / "docker" / "grafana"
NAMES = {d.full_name for d in METRICS}
PROCESS_NAMES = {d.full_name for d in PROCESS_METRICS}


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
        for name in re.findall(r"\b(process_[a-z0-9_]+)", expr):
            assert name in PROCESS_NAMES, name
    # every exported metric appears on the dashboard
    assert NAMES - used == set()


def panels() -> list[dict]:
    return [p for p in dashboards()[0]["panels"] if p["type"] != "row"]


def test_the_json_is_what_the_generator_writes() -> None:
    script = ROOT / "scripts" / "build_dashboard.py"
    res = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_a_run_variable_filters_every_query() -> None:
    (dash,) = dashboards()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["run"]["query"] == "label_values(unlearn_build_info, run_id)"
    assert "$run" in variables["instance"]["query"] and variables["instance"]["hide"] == 2
    for expr in panel_exprs(dash):
        selectors = re.findall(r"\b(?:unlearn|process)_[a-z0-9_]+(\{[^}]*\})?", expr)
        assert selectors and all('instance=~"$instance"' in s for s in selectors), expr


def test_every_panel_has_units_and_one_scale_per_axis() -> None:
    for p in panels():
        defaults = p["fieldConfig"]["defaults"]
        assert defaults.get("unit"), p["title"]
        units = {defaults["unit"]}
        for o in p["fieldConfig"]["overrides"]:
            props = {x["id"]: x["value"] for x in o["properties"]}
            if "unit" in props and props["unit"] != defaults["unit"]:
                units.add(props["unit"])
                if p["type"] == "timeseries":  # a second unit goes on the right axis
                    assert props.get("custom.axisPlacement") == "right", p["title"]
        assert len(units) <= 2, p["title"]
    titles = {p["title"]: p for p in panels()}
    # the delta (1e-4) is no longer drawn on the axis of the residuals (~1)
    charge = titles["Charge since the last retrain vs budget"]
    assert not any("cr_delta" in t["expr"] for t in charge["targets"])


def test_no_panel_overlaps_another() -> None:
    boxes = [(p["title"], p["gridPos"]) for p in dashboards()[0]["panels"]]
    for (a, g), (b, h) in itertools.combinations(boxes, 2):
        apart = (
            g["x"] + g["w"] <= h["x"]
            or h["x"] + h["w"] <= g["x"]
            or g["y"] + g["h"] <= h["y"]
            or h["y"] + h["h"] <= g["y"]
        )
        assert apart, (a, g, b, h)


def test_retrains_withdrawals_and_the_end_are_annotated() -> None:
    (dash,) = dashboards()
    notes = {a["name"]: a for a in dash["annotations"]["list"] if "expr" in a}
    assert "unlearn_retrains_total" in notes["Retrains"]["expr"]
    assert "unlearn_client_withdrawals_total" in notes["Withdrawals"]["expr"]
    assert "unlearn_run_finished" in notes["Run finished"]["expr"]
    assert all(a["enable"] and 'instance=~"$instance"' in a["expr"] for a in notes.values())
