"""Every exported metric: name, type, help, labels and buckets (``docs/metrics.md``).

Names carry the ``unlearn_`` prefix and follow Prometheus conventions: base units in the name
(``_seconds``, ``_bytes``), ``_total`` counters, ``_ratio`` only for dimensionless
shares and scores in [0, 1] (accuracy, AUC, TPR, budget used, relative distance). A number
measured on both the released head and a head retrained from scratch is one metric with the
label ``model="ours"|"retrained"``. No ``_created`` series; the process collector's
``process_*`` and the platform collector's ``python_info`` are exported too. Label values are
bounded (splits, models, attacks, FPRs, comparisons, detectors, streams, reasons, bound kinds,
accounting modes, pipeline stages, classes, client indices up to a cap, and one run id and
scenario per exporter); no request or sample id is ever a label.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.metrics import MetricWrapperBase

# No ``*_created`` series: they double the series count of every counter and histogram and no
# panel or rule reads them. Process-wide (prometheus_client keeps it in a module flag).
disable_created_metrics()  # type: ignore[no-untyped-call]

PREFIX = "unlearn_"
Kind = Literal["counter", "gauge", "histogram"]

#: Buckets of pipeline durations (a removal batch, a federated round, an evaluation stage).
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Buckets of request-to-receipt latency (stream clock).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


@dataclass(frozen=True)
class MetricDef:
    """One exported metric (``name`` without the prefix; counters end in ``_total``)."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = FAST_BUCKETS

    @property
    def full_name(self) -> str:
        """The exported name: the prefix is added except to process and Python metrics."""
        return self.name if self.name.startswith(("process_", "python_")) else PREFIX + self.name


def _c(name: str, help: str, *labels: str) -> MetricDef:
    return MetricDef(name, "counter", help, labels)


def _g(name: str, help: str, *labels: str) -> MetricDef:
    return MetricDef(name, "gauge", help, labels)


def _gauges(labels: tuple[str, ...], **helps: str) -> tuple[MetricDef, ...]:
    """Gauges that share their labels, ``name=help`` each (in order)."""
    return tuple(_g(name, help, *labels) for name, help in helps.items())


def _h(name: str, help: str, *labels: str, buckets: tuple[float, ...] = FAST_BUCKETS) -> MetricDef:
    return MetricDef(name, "histogram", help, labels, buckets)


METRICS: tuple[MetricDef, ...] = (
    # ---- pipeline (RED)
    _c("deletion_requests_total", "Deletion requests answered, by receipt status.", "status"),
    _c("deleted_samples_total", "Samples removed from the head."),
    _c("deletion_batches_total", "Deletion batches applied."),
    _h("deletion_batch_duration_seconds", "Wall time of one certified removal batch."),
    _h(
        "deletion_request_latency_seconds",
        "Request time to receipt time, stream clock.",
        buckets=LATENCY_BUCKETS,
    ),
    _g("deletion_lag_requests", "Requests received or scheduled but not yet applied."),
    _g("retained_samples", "Training rows the head is currently fitted on."),
    _c("retrains_total", "Retrains of the head from scratch, by reason.", "reason"),
    _c("stream_dead_letters_total", "Malformed stream messages set aside, by reason.", "reason"),
    _c(
        "stream_unauthorised_requests_total",
        "Requests refused before validation (bad_signature, not_owner, rate_limited, other).",
        "reason",
    ),
    _c(
        "stream_offset_gaps_total",
        "Times the requests log did not hold what the checkpoint expected, by action taken.",
        "action",
    ),
    _c(
        "stream_skipped_records_total",
        "Request records skipped past an offset gap (--on-offset-gap skip).",
    ),
    _g(
        "stream_held_requests", "Accepted requests held for a larger removal (--min-removal-batch)."
    ),
    _g("stream_ready", "1 while the consumer is ready (as /readyz), else 0."),
    _g("stream_startup_seconds", "Seconds from process start to ready, last start."),
    _h("federation_round_duration_seconds", "Wall time of one federated statistics round."),
    _g(
        "build_info",
        "Constant 1; labels say what runs (version, method, run id, scenario).",
        "version",
        "method",
        "run_id",
        "scenario",
    ),
    _g(
        "run_finished",
        "1 once the run (or the stream consumer) ended normally, else 0: an exporter that "
        "disappears after this was 1 finished, it did not fail.",
    ),
    _g("run_start_time_seconds", "Unix time the run started."),
    _g("head_model_version", "Version of the head (increments per update or retrain)."),
    # ---- utility (model: ours = the released head, retrained = retrained from scratch)
    _g("model_accuracy_ratio", "Accuracy of the head.", "split", "model"),
    _g("model_f1_ratio", "Support-weighted F1 of the head.", "split", "model"),
    _g("head_distance_to_retrain_ratio", "||W - W_retrained|| / ||W_retrained||."),
    _g(
        "prediction_agreement_ratio", "Share of equal predictions with the retrained head.", "split"
    ),
    # ---- membership inference
    _g("mia_auc_ratio", "ROC AUC of the attack, forget set vs holdout.", "attack", "model"),
    _g("mia_tpr_at_fpr_ratio", "TPR of the attack at a fixed low FPR.", "attack", "fpr", "model"),
    _g("mia_advantage_ratio", "max TPR - FPR of the attack.", "attack", "model"),
    _g(
        "mia_efficacy_ratio",
        "Share of the forget set an entropy attack calls non-member.",
        "model",
    ),
    _g("mia_samples", "Samples the MIA estimates used.", "set"),
    _g("forget_loss", "Mean one-vs-rest logistic loss of the head on the forget set.", "model"),
    # ---- drift
    *_gauges(
        ("comparison",),
        feature_mmd2="Unbiased MMD^2 (RBF, frozen median bandwidth).",
        feature_mmd2_p_value="Permutation p-value of the MMD^2.",
        label_tv_distance="Total variation between label distributions.",
        label_js_divergence="Jensen-Shannon divergence of labels (log base 2: 0 to 1).",
        label_chi2_p_value="Chi-square homogeneity p-value of label counts.",
    ),
    _g(
        "prediction_tv_distance",
        "Total variation between the head's predicted test labels and the initial head's.",
        "model",
    ),
    _g(
        "prediction_js_divergence",
        "Jensen-Shannon divergence (log base 2: 0 to 1) of the head's predicted test labels "
        "from the initial head's.",
        "model",
    ),
    _c("drift_detections_total", "Alarms of the online change detectors.", "detector", "stream"),
    # ---- certificate
    _g(
        "cr_residual",
        "Last removal's residual (L2 over the stacked head): the step's worst-case and "
        "data-dependent bounds, and the head's exact residual.",
        "bound",
    ),
    _g(
        "cr_residual_cumulative",
        "Charge of the released head under the accounting in use (monotone until a retrain, "
        "except under anchored, where an exact pass lowers it to the measured residual).",
    ),
    *_gauges(
        (),
        cr_residual_budget="Residual budget sigma * epsilon / c.",
        cr_budget_used_ratio="Charge of the released head / budget.",
        cr_epsilon_spent="Epsilon spent since the last retrain, c * charge / sigma (holds with "
        "cr_delta).",
        cr_epsilon_target="Target epsilon of the certificate.",
        cr_delta="Delta of the certificate (one delta for the whole stacked head).",
    ),
    _g(
        "cr_scope_info",
        "1 for what the certificate covers: scope whole_model (uncovered none) or head, with "
        "why the whole model is not (uncovered private_extractor: the extractor saw the "
        "clients' rows with no guarantee; dp_group_vacuous: a DP extractor's group bound over "
        "the rows removed since it was trained says nothing).",
        "scope",
        "extractor_data",
        "uncovered",
    ),
    *_gauges(
        (),
        cr_total_epsilon_spent="Epsilon of the whole model: cr_epsilon_spent plus the "
        "extractor's (0 for a public extractor); +Inf under scope head (the extractor has no "
        "guarantee, so the whole model has none).",
        cr_total_delta="Delta of the whole model's certificate (the head's under scope head, "
        "where the +Inf epsilon makes it vacuous).",
    ),
    _g(
        "cr_accounting_info",
        "1 for the accounting mode in use (anchored, guo, worst or exact).",
        "accounting",
    ),
    _g(
        "cr_residual_against_retrain",
        "Exact residual of the released head on the objective of a retrain from scratch "
        "(weights fitted cold on the retained rows), at the last checkpoint.",
    ),
    # ---- decorrelation weights (per client, after its last fit)
    *_gauges(
        ("client",),
        decorrelation_effective_sample_ratio="n_eff / n of a client's weights.",
        decorrelation_weight_max="Largest decorrelation weight of a client.",
        decorrelation_weight_min="Smallest decorrelation weight of a client.",
    ),
    _g(
        "decorrelation_class_mass_ratio",
        "A class's share of a client's weight mass.",
        "client",
        "class",
    ),
    # ---- evaluation cost and per-client
    _h("evaluation_duration_seconds", "Wall time of one evaluation stage.", "stage"),
    _c("retrain_reference_checkpoints_total", "Retrained-reference checkpoints computed."),
    _g("client_retained_samples", "Rows a client still holds.", "client"),
    _c("client_deleted_samples_total", "Rows removed from a client.", "client"),
    _c("client_withdrawals_total", "Clients withdrawn from the federation.", "client"),
)

#: Metrics of prometheus_client's process and platform collectors, exported next to ours
#: (no ``unlearn_`` prefix: the standard names every Prometheus user knows).
PROCESS_METRICS: tuple[MetricDef, ...] = (
    _c("process_cpu_seconds_total", "User and system CPU time of the process, seconds."),
    _g("process_resident_memory_bytes", "Resident memory of the process, bytes."),
    _g("process_virtual_memory_bytes", "Virtual memory of the process, bytes."),
    _g("process_start_time_seconds", "Start time of the process, Unix seconds."),
    _g("process_open_fds", "Open file descriptors."),
    _g("process_max_fds", "Maximum open file descriptors."),
    _g("python_info", "Python platform information (labels).", "implementation", "major"),
)


def build_registry(
    defs: tuple[MetricDef, ...] = METRICS,
) -> tuple[CollectorRegistry, dict[str, Any]]:
    """Registry with every metric of the exporter.

    A fresh registry holding every metric and the process and platform collectors; returns
    it and the metrics by short name (``Counter`` / ``Gauge`` / ``Histogram`` objects, typed
    ``Any`` for their label API).
    """
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    out: dict[str, Any] = {}
    for d in defs:
        metric: MetricWrapperBase
        if d.kind == "counter":
            metric = Counter(d.full_name, d.help, d.labels, registry=registry)
        elif d.kind == "gauge":
            metric = Gauge(d.full_name, d.help, d.labels, registry=registry)
        else:
            metric = Histogram(d.full_name, d.help, d.labels, registry=registry, buckets=d.buckets)
        out[d.name] = metric
    return registry, out
