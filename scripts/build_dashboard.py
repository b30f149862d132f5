#!/usr/bin/env python3
"""Write docker/grafana/dashboards/unlearnsim.json from the panel table below.

    .venv/bin/python scripts/build_dashboard.py          # rewrite the JSON
    .venv/bin/python scripts/build_dashboard.py --check  # exit 1 if the JSON is stale

The table is the dashboard: rows of panels, each target with its PromQL, legend and unit.
What the script guarantees (and ``tests/test_prometheus_grafana.py`` checks on the JSON):

* every metric selector is filtered by the ``$instance`` of the chosen ``$run`` (the run
  variable lists ``unlearn_build_info``'s ``run_id``; a hidden variable maps it to the
  exporter's ``instance``);
* every panel has a unit; a panel whose targets have two units puts the second on the right
  axis (an override per target), never two scales on one axis;
* panels are laid out left to right, row by row, so none overlaps another;
* annotations mark retrains and client withdrawals (and the run's end) on every time series.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "docker/grafana/dashboards/unlearnsim.json"
DS = {"type": "prometheus", "uid": "unlearnsim-prometheus"}
RI = "$__rate_interval"
SELECTOR = 'instance=~"$instance"'

# (title, type, width, height, description, [(expr, legend, unit), ...], extra defaults)
Target = tuple[str, str, str]
Panel = tuple[str, str, int, int, str, list[Target], dict[str, Any]]

ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Run",
        [
            (
                "Run",
                "stat",
                8,
                4,
                "The run shown (variable run): id, scenario, method, version; start time; "
                "running or finished (unlearn_run_finished).",
                [
                    (
                        "unlearn_build_info",
                        "{{run_id}} {{scenario}} {{method}} {{version}}",
                        "none",
                    ),
                    ("unlearn_run_start_time_seconds * 1000", "started", "dateTimeAsIso"),
                    ("unlearn_run_finished", "state", "none"),
                ],
                {},
            ),
            (
                "Process CPU and memory",
                "timeseries",
                16,
                4,
                "CPU cores used by the exporting process (left) and its resident memory (right).",
                [
                    (f"rate(process_cpu_seconds_total[{RI}])", "CPU", "suffix: cores"),
                    ("process_resident_memory_bytes", "resident memory", "bytes"),
                ],
                {},
            ),
        ],
    ),
    (
        "Deletion pipeline (RED)",
        [
            (
                "Request rate by status",
                "timeseries",
                8,
                8,
                "Rate: deletion requests answered per second, by receipt status.",
                [
                    (
                        f"sum by (status) (rate(unlearn_deletion_requests_total[{RI}]))",
                        "{{status}}",
                        "reqps",
                    )
                ],
                {},
            ),
            (
                "Rejected share",
                "timeseries",
                8,
                8,
                "Errors: share of answered requests that were rejected.",
                [
                    (
                        f'sum(rate(unlearn_deletion_requests_total{{status="rejected"}}[{RI}])) / '
                        f"clamp_min(sum(rate(unlearn_deletion_requests_total[{RI}])), 1e-9)",
                        "rejected",
                        "percentunit",
                    )
                ],
                {},
            ),
            (
                "Batch duration",
                "timeseries",
                8,
                8,
                "Duration: wall time of one certified removal batch, quantiles.",
                [
                    (
                        f"histogram_quantile({q}, sum by (le) "
                        f"(rate(unlearn_deletion_batch_duration_seconds_bucket[{RI}])))",
                        f"p{int(float(q) * 100)}",
                        "s",
                    )
                    for q in ("0.5", "0.95")
                ],
                {},
            ),
            (
                "Request latency (request to receipt)",
                "timeseries",
                8,
                8,
                "Request time to receipt time on the stream clock.",
                [
                    (
                        "histogram_quantile(0.95, sum by (le) "
                        f"(rate(unlearn_deletion_request_latency_seconds_bucket[{RI}])))",
                        "p95",
                        "s",
                    ),
                    (
                        f"rate(unlearn_deletion_request_latency_seconds_sum[{RI}]) / "
                        f"rate(unlearn_deletion_request_latency_seconds_count[{RI}])",
                        "mean",
                        "s",
                    ),
                ],
                {},
            ),
            (
                "Samples and batches per second",
                "timeseries",
                8,
                8,
                "Samples removed per second (left) and deletion batches per second (right).",
                [
                    (f"rate(unlearn_deleted_samples_total[{RI}])", "samples/s", "suffix: rows/s"),
                    (
                        f"rate(unlearn_deletion_batches_total[{RI}])",
                        "batches/s",
                        "suffix: batches/s",
                    ),
                ],
                {},
            ),
            (
                "Deletion lag",
                "timeseries",
                8,
                8,
                "Requests received or scheduled but not yet applied.",
                [("unlearn_deletion_lag_requests", "pending requests", "suffix: requests")],
                {},
            ),
            (
                "Retained samples and head version",
                "timeseries",
                8,
                8,
                "Rows the head is fitted on (left) and the head's version (right).",
                [
                    ("unlearn_retained_samples", "retained rows", "suffix: rows"),
                    ("unlearn_head_model_version", "head version", "none"),
                ],
                {},
            ),
            (
                "Retrains and dead letters",
                "timeseries",
                8,
                8,
                "Head retrains by reason and dead-lettered records by reason (counts).",
                [
                    ("sum by (reason) (unlearn_retrains_total)", "retrains: {{reason}}", "short"),
                    (
                        "sum by (reason) (unlearn_stream_dead_letters_total)",
                        "dead letters: {{reason}}",
                        "short",
                    ),
                ],
                {},
            ),
            (
                "Federated round duration",
                "timeseries",
                8,
                8,
                "One federated statistics round of a removal.",
                [
                    (
                        "histogram_quantile(0.95, sum by (le) "
                        f"(rate(unlearn_federation_round_duration_seconds_bucket[{RI}])))",
                        "p95",
                        "s",
                    ),
                    (
                        f"rate(unlearn_federation_round_duration_seconds_sum[{RI}]) / "
                        f"rate(unlearn_federation_round_duration_seconds_count[{RI}])",
                        "mean",
                        "s",
                    ),
                ],
                {},
            ),
        ],
    ),
    (
        "Utility (ours vs retrained)",
        [
            (
                "Accuracy by split",
                "timeseries",
                8,
                8,
                "Accuracy of the released head (ours) and of the head retrained from scratch "
                "at the checkpoints (retrained).",
                [("unlearn_model_accuracy_ratio", "{{split}} ({{model}})", "percentunit")],
                {"min": 0, "max": 1},
            ),
            (
                "Weighted F1 by split",
                "timeseries",
                8,
                8,
                "Support-weighted F1, ours and retrained.",
                [("unlearn_model_f1_ratio", "{{split}} ({{model}})", "percentunit")],
                {"min": 0, "max": 1},
            ),
            (
                "Distance to the retrained head",
                "timeseries",
                8,
                8,
                "||W - W_retrained|| / ||W_retrained|| (left) and the share of equal "
                "predictions per split (right).",
                [
                    ("unlearn_head_distance_to_retrain_ratio", "relative L2", "none"),
                    ("unlearn_prediction_agreement_ratio", "agreement: {{split}}", "percentunit"),
                ],
                {},
            ),
        ],
    ),
    (
        "Privacy (membership inference, ours vs retrained)",
        [
            (
                "MIA AUC",
                "timeseries",
                8,
                8,
                "ROC AUC of each attack, forget set vs holdout; 50% = no membership signal.",
                [("unlearn_mia_auc_ratio", "{{attack}} ({{model}})", "percentunit")],
                {"min": 0, "max": 1},
            ),
            (
                "MIA AUC above the retrained head",
                "timeseries",
                8,
                8,
                "Each attack's AUC on our head minus on the retrained head (alert above 10%).",
                [
                    (
                        'unlearn_mia_auc_ratio{model="ours"} - ignoring(model) '
                        'unlearn_mia_auc_ratio{model="retrained"}',
                        "{{attack}}",
                        "percentunit",
                    )
                ],
                {},
            ),
            (
                "TPR at low FPR",
                "timeseries",
                8,
                8,
                "True-positive rate of each attack at 1% and 0.1% false positives.",
                [
                    (
                        "unlearn_mia_tpr_at_fpr_ratio",
                        "{{attack}} @ {{fpr}} ({{model}})",
                        "percentunit",
                    )
                ],
                {},
            ),
            (
                "Membership advantage",
                "timeseries",
                8,
                8,
                "max TPR - FPR of each attack.",
                [("unlearn_mia_advantage_ratio", "{{attack}} ({{model}})", "percentunit")],
                {},
            ),
            (
                "MIA efficacy",
                "timeseries",
                8,
                8,
                "Share of the forget set an entropy attack calls non-member.",
                [("unlearn_mia_efficacy_ratio", "{{model}}", "percentunit")],
                {"min": 0, "max": 1},
            ),
            (
                "Forget loss and sample counts",
                "timeseries",
                8,
                8,
                "Mean logistic loss on the forget set (left, nats) and the samples the MIA "
                "estimates used (right).",
                [
                    ("unlearn_forget_loss", "forget loss ({{model}})", "suffix: nats"),
                    ("unlearn_mia_samples", "samples: {{set}}", "suffix: samples"),
                ],
                {},
            ),
        ],
    ),
    (
        "Drift",
        [
            (
                "Feature MMD^2",
                "timeseries",
                8,
                8,
                "Unbiased MMD^2 (RBF kernel, frozen median bandwidth); dimensionless.",
                [("unlearn_feature_mmd2", "{{comparison}}", "none")],
                {},
            ),
            (
                "MMD^2 permutation p-value",
                "timeseries",
                8,
                8,
                "Permutation p-value; its floor is 1/(1 + permutations), not a measurement.",
                [("unlearn_feature_mmd2_p_value", "{{comparison}}", "none")],
                {"min": 0, "max": 1},
            ),
            (
                "Label total variation",
                "timeseries",
                8,
                8,
                "TV between label distributions (true labels), and between the head's "
                "predicted test labels and the initial head's (ours, retrained).",
                [
                    ("unlearn_label_tv_distance", "{{comparison}}", "none"),
                    ("unlearn_prediction_tv_distance", "predictions ({{model}})", "none"),
                ],
                {"min": 0, "max": 1},
            ),
            (
                "Label Jensen-Shannon",
                "timeseries",
                8,
                8,
                "Jensen-Shannon divergence of label distributions and of predicted labels.",
                [
                    ("unlearn_label_js_divergence", "{{comparison}}", "none"),
                    (
                        "unlearn_prediction_js_divergence",
                        "predictions ({{model}})",
                        "none",
                    ),
                ],
                {"min": 0, "max": 1},
            ),
            (
                "Label chi-square p-value",
                "timeseries",
                8,
                8,
                "Chi-square homogeneity p-value of label counts.",
                [("unlearn_label_chi2_p_value", "{{comparison}}", "none")],
                {"min": 0, "max": 1},
            ),
            (
                "Detector alarms",
                "timeseries",
                8,
                8,
                "Online change-detector alarms per rate interval.",
                [
                    (
                        "sum by (detector, stream) "
                        f"(increase(unlearn_drift_detections_total[{RI}]))",
                        "{{detector}} on {{stream}}",
                        "short",
                    )
                ],
                {},
            ),
        ],
    ),
    (
        "Certificate",
        [
            (
                "Budget used",
                "gauge",
                6,
                8,
                "Charge since the last retrain / budget.",
                [("unlearn_cr_budget_used_ratio", "used", "percentunit")],
                {"min": 0, "max": 1},
            ),
            (
                "Epsilon spent vs target",
                "timeseries",
                6,
                8,
                "Epsilon spent since the last retrain and the target (holds with delta), and "
                "the whole model's total: the head's plus the extractor's (equal under "
                "extractor_data public; +Inf under private, where only the head is certified).",
                [
                    ("unlearn_cr_epsilon_spent", "spent", "none"),
                    ("unlearn_cr_epsilon_target", "target", "none"),
                    ("unlearn_cr_total_epsilon_spent", "whole model (total)", "none"),
                ],
                {},
            ),
            (
                "Residual by bound (last batch)",
                "timeseries",
                6,
                8,
                "The last removal's residual: worst-case and data-dependent bounds, exact "
                "(log scale: they differ by orders of magnitude).",
                [("unlearn_cr_residual", "{{bound}}", "none")],
                {"log": True},
            ),
            (
                "Charge since the last retrain vs budget",
                "timeseries",
                6,
                8,
                "Cumulative charge under the accounting in use against the budget.",
                [
                    ("unlearn_cr_residual_cumulative", "cumulative", "none"),
                    ("unlearn_cr_residual_budget", "budget", "none"),
                ],
                {},
            ),
            (
                "Accounting, delta and scope",
                "stat",
                6,
                8,
                "What the certificate charges: anchored (the tight bound since the last exact "
                "gradient, the default), guo (Guo et al.'s data-dependent bound, summed), worst, "
                "or exact; the delta it holds with; and what it covers: scope whole_model "
                "(extractor_data public, or dp while the DP-SGD extractor's group bound holds), "
                "with the whole model's delta, or head, with why the whole model is not "
                "covered: private_extractor (model.extractor_data: public or dp would cover "
                "it) or dp_group_vacuous (model.dp.extractor_epsilon_limit would).",
                [
                    ("unlearn_cr_accounting_info == 1", "{{accounting}}", "none"),
                    ("unlearn_cr_delta", "delta", "sci"),
                    (
                        "unlearn_cr_scope_info == 1",
                        "scope {{scope}} ({{extractor_data}}; not covered: {{uncovered}})",
                        "none",
                    ),
                    ("unlearn_cr_total_delta", "whole-model delta", "sci"),
                ],
                {},
            ),
            (
                "Residual against a retrain from scratch",
                "timeseries",
                18,
                8,
                "Exact residual of the released head on the objective of a retrain from "
                "scratch (cold-fit weights), at the checkpoints, against the budget (log "
                "scale: the residual is many orders of magnitude below the budget).",
                [
                    (
                        "unlearn_cr_residual_against_retrain",
                        "released head on A(D') objective",
                        "none",
                    ),
                    ("unlearn_cr_residual_budget", "budget", "none"),
                ],
                {"log": True},
            ),
        ],
    ),
    (
        "Evaluation cost",
        [
            (
                "Share of wall time spent evaluating, by stage",
                "timeseries",
                12,
                8,
                "Seconds of evaluation per second of run, by stage.",
                [
                    (
                        f"sum by (stage) (rate(unlearn_evaluation_duration_seconds_sum[{RI}]))",
                        "{{stage}}",
                        "percentunit",
                    )
                ],
                {},
            ),
            (
                "Retrained-reference checkpoints and evaluations",
                "timeseries",
                12,
                8,
                "Retrained-reference checkpoints computed (left) and evaluations by stage "
                "(right), counts.",
                [
                    ("unlearn_retrain_reference_checkpoints_total", "checkpoints", "short"),
                    (
                        "sum by (stage) (unlearn_evaluation_duration_seconds_count)",
                        "evaluations: {{stage}}",
                        "suffix: evaluations",
                    ),
                ],
                {},
            ),
        ],
    ),
    (
        "Per client",
        [
            (
                "Rows held by client",
                "timeseries",
                12,
                8,
                "Rows each client still holds.",
                [("unlearn_client_retained_samples", "client {{client}}", "suffix: rows")],
                {},
            ),
            (
                "Rows deleted per second by client",
                "timeseries",
                12,
                8,
                "Rows removed per second from each client; withdrawals are annotated.",
                [
                    (
                        f"sum by (client) (rate(unlearn_client_deleted_samples_total[{RI}]))",
                        "client {{client}}",
                        "suffix: rows/s",
                    ),
                    (
                        "sum by (client) (unlearn_client_withdrawals_total)",
                        "withdrawn: client {{client}}",
                        "suffix: withdrawals",
                    ),
                ],
                {},
            ),
            (
                "Decorrelation weights by client",
                "timeseries",
                12,
                8,
                "Largest and smallest weight as multiples of the mean weight (left) and "
                "n_eff / n (right).",
                [
                    ("unlearn_decorrelation_weight_max", "max {{client}}", "suffix: x mean"),
                    ("unlearn_decorrelation_weight_min", "min {{client}}", "suffix: x mean"),
                    (
                        "unlearn_decorrelation_effective_sample_ratio",
                        "n_eff/n {{client}}",
                        "percentunit",
                    ),
                ],
                {},
            ),
            (
                "Class share of the weight mass",
                "timeseries",
                12,
                8,
                "Each class's share of a client's decorrelation weight mass.",
                [
                    (
                        "unlearn_decorrelation_class_mass_ratio",
                        "client {{client}} class {{class}}",
                        "percentunit",
                    )
                ],
                {"min": 0, "max": 1},
            ),
        ],
    ),
    (
        "Stream health and security",
        [
            (
                "Unauthorised requests by reason",
                "timeseries",
                8,
                8,
                "Requests refused before validation, per second, by reason.",
                [
                    (
                        f"sum by (reason) (rate(unlearn_stream_unauthorised_requests_total[{RI}]))",
                        "{{reason}}",
                        "reqps",
                    )
                ],
                {},
            ),
            (
                "Offset gaps and skipped records",
                "timeseries",
                8,
                8,
                "Offset gaps by action taken (left) and request records skipped (right), "
                "over the dashboard's range.",
                [
                    (
                        "sum by (action) (increase(unlearn_stream_offset_gaps_total[$__range]))",
                        "gaps: {{action}}",
                        "suffix: gaps",
                    ),
                    (
                        "increase(unlearn_stream_skipped_records_total[$__range])",
                        "skipped records",
                        "suffix: records",
                    ),
                ],
                {},
            ),
            (
                "Consumer readiness and start-up",
                "timeseries",
                8,
                8,
                "1 while ready (left) and seconds from process start to ready (right).",
                [
                    ("unlearn_stream_ready", "ready", "bool_yes_no"),
                    ("unlearn_stream_startup_seconds", "start to ready", "s"),
                ],
                {},
            ),
            (
                "Held requests",
                "timeseries",
                8,
                8,
                "Accepted requests held for a larger removal (--min-removal-batch).",
                [("unlearn_stream_held_requests", "held requests", "suffix: requests")],
                {},
            ),
        ],
    ),
]

#: Value texts of stat targets: panel title -> refId -> value -> text.
VALUE_TEXTS = {
    "Run": {"A": {"1": "this run"}, "C": {"0": "running", "1": "finished"}},
    "Accounting, delta and scope": {"A": {"1": "in use"}, "C": {"1": "certified"}},
}

ANNOTATIONS = [
    (
        "Retrains",
        "red",
        'sum by (reason) (increase(unlearn_retrains_total{instance=~"$instance"}[1m])) > 0',
        "retrain ({{reason}})",
    ),
    (
        "Withdrawals",
        "orange",
        'sum by (client) (increase(unlearn_client_withdrawals_total{instance=~"$instance"}[1m]))'
        " > 0",
        "client {{client}} withdrew",
    ),
    (
        "Run finished",
        "green",
        'changes(unlearn_run_finished{instance=~"$instance"}[1m]) > 0 '
        'and unlearn_run_finished{instance=~"$instance"} == 1',
        "run finished",
    ),
]


def filtered(expr: str) -> str:
    """Add the ``$instance`` filter to every metric selector of ``expr``."""

    def add(match: re.Match[str]) -> str:
        name, labels = match.group(1), match.group(3)
        inner = f"{labels},{SELECTOR}" if labels else SELECTOR
        return f"{name}{{{inner}}}"

    return re.sub(r"\b((?:unlearn|process)_[a-z0-9_]+)(\{([^}]*)\})?", add, expr)


def panel(pid: int, spec: Panel, x: int, y: int) -> dict[str, Any]:
    title, kind, w, h, description, targets, extra = spec
    units = list(dict.fromkeys(unit for _, _, unit in targets))
    assert len(units) <= 2, f"{title}: more than two units"
    overrides = []
    for ref, (_, _, unit) in zip("ABCDEFGH", targets, strict=False):
        if unit != units[0]:
            properties: list[dict[str, Any]] = [{"id": "unit", "value": unit}]
            if kind == "timeseries":
                properties.append({"id": "custom.axisPlacement", "value": "right"})
            overrides.append(
                {"matcher": {"id": "byFrameRefID", "options": ref}, "properties": properties}
            )
    log = bool(extra.get("log"))
    defaults: dict[str, Any] = {"unit": units[0], **{k: v for k, v in extra.items() if k != "log"}}
    if kind == "timeseries":
        defaults["custom"] = {"axisPlacement": "left", "showPoints": "always", "pointSize": 4}
        if log:  # values that span orders of magnitude (bounds vs exact residuals)
            defaults["custom"]["scaleDistribution"] = {"type": "log", "log": 10}
    options: dict[str, Any] = (
        {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
        if kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"]}, "textMode": "value_and_name"}
    )
    for ref, texts in VALUE_TEXTS.get(title, {}).items():
        mapping = {"type": "value", "options": {k: {"text": v} for k, v in texts.items()}}
        overrides.append(
            {
                "matcher": {"id": "byFrameRefID", "options": ref},
                "properties": [{"id": "mappings", "value": [mapping]}],
            }
        )
    return {
        "type": kind,
        "title": title,
        "id": pid,
        "datasource": DS,
        "description": description,
        "gridPos": {"h": h, "w": w, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": options,
        "targets": [
            {"datasource": DS, "refId": ref, "expr": filtered(expr), "legendFormat": legend}
            for ref, (expr, legend, _) in zip("ABCDEFGH", targets, strict=False)
        ],
    }


def build() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y, pid = 0, 1
    for row_title, specs in ROWS:
        panels.append(
            {
                "type": "row",
                "title": row_title,
                "id": pid,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        pid += 1
        y += 1
        x, line_h = 0, 0
        for spec in specs:
            w, h = spec[2], spec[3]
            if x + w > 24:
                x, y, line_h = 0, y + line_h, 0
            panels.append(panel(pid, spec, x, y))
            pid += 1
            x += w
            line_h = max(line_h, h)
        y += line_h
    variable = {"type": "query", "datasource": DS, "refresh": 2, "sort": 1, "includeAll": True}
    return {
        "uid": "unlearnsim-run",
        "title": "unlearnsim: certified removal under a deletion stream",
        "description": "One unlearnsim run (variable run): deletion pipeline RED, utility and "
        "privacy (ours vs retrained), drift, certificate, evaluation cost, per client, stream "
        "health. Retrains, withdrawals and the run's end are annotated. Metrics: "
        "docs/metrics.md. Generated by scripts/build_dashboard.py.",
        "tags": ["unlearnsim", "unlearning"],
        "timezone": "browser",
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 2,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "templating": {
            "list": [
                {
                    **variable,
                    "name": "run",
                    "label": "Run",
                    "query": "label_values(unlearn_build_info, run_id)",
                    "definition": "label_values(unlearn_build_info, run_id)",
                    "multi": False,
                    "allValue": ".*",
                },
                {
                    **variable,
                    "name": "instance",
                    "label": "Exporter",
                    "hide": 2,
                    "query": 'label_values(unlearn_build_info{run_id=~"$run"}, instance)',
                    "definition": 'label_values(unlearn_build_info{run_id=~"$run"}, instance)',
                    "multi": True,
                    "allValue": ".*",
                },
            ]
        },
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                },
                *(
                    {
                        "datasource": DS,
                        "enable": True,
                        "hide": False,
                        "iconColor": color,
                        "name": name,
                        "expr": expr,
                        "step": "5s",
                        "titleFormat": title,
                        "useValueForTime": False,
                    }
                    for name, color, expr, title in ANNOTATIONS
                ),
            ]
        },
        "panels": panels,
    }


def main() -> int:
    text = json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
    if "--check" in sys.argv[1:]:
        if OUT.read_text() != text:
            print(f"{OUT} is stale: run scripts/build_dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
