"""Prometheus and Grafana helpers: the HTTP API, the documented metrics, the dashboards."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from typing import Any

from support.scenarios import ROOT

GRAFANA = ROOT / "docker" / "grafana"
#: Grafana's built-in and dashboard variables, as a query outside Grafana needs them.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__range": "30m",
    "$__interval": "15s",
    "$instance": ".*",
    "$run": ".*",
}


def api(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else base + path
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def query(base: str, expr: str) -> list[dict[str, Any]]:
    data = api(base, "/api/v1/query", query=expr)
    assert data["resultType"] == "vector", (expr, data)
    return list(data["result"])


def dashboards() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((GRAFANA / "dashboards").glob("*.json"))]


def panel_exprs(dash: dict) -> list[str]:
    return [t["expr"] for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]


def documented() -> dict[str, str]:
    """``{name: type}`` of the exported-metrics table of docs/metrics.md."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    rows = re.findall(r"^\| `(unlearn_[a-z0-9_]+)` \| (counter|gauge|histogram)", text, re.M)
    return dict(rows)
