"""Publish a run's events as Prometheus metrics, live, on 127.0.0.1.

:class:`MetricsExporter` is an ``on_event`` callback of ``simulator.runner.run_scenario`` (any
transport or stream source that emits the same event records can call it). It reads the event
records the runner writes to ``events.jsonl`` (start, every deletion batch, end; see
``docs/metrics.md`` for the keys it uses) and, for per-client gauges, the federation's clients.

The exporter also keeps the run's :class:`~server.health.Health` (fed by the same events) and
serves it as ``/healthz`` (liveness) and ``/readyz`` (readiness) next to ``/metrics``: HTTP 200
or 503 with a one-line reason.

Gauges that have no value yet (e.g. the retrained reference before the first checkpoint) have
no series; gauges whose value is undefined for a batch (e.g. an attack on an empty forget set)
are NaN. Labelled counters are created at 0 for every known label value, so rates and alert
expressions have series from the first scrape.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.metrics import MetricWrapperBase

from server.health import Health, process_age
from server.metrics.definitions import build_registry
from simulator.head import ACCOUNTING_MODES
from simulator.head.scope import PROVENANCES, SCOPES, UNCOVERED

#: Bounded label values.
STATUSES = ("applied", "rejected", "duplicate")
RETRAIN_REASONS = ("budget", "method", "requested", "extractor_limit")
DEAD_LETTER_REASONS = ("malformed", "oversized", "schema", "other")
UNAUTHORISED_REASONS = ("bad_signature", "not_owner", "rate_limited", "other")
GAP_ACTIONS = ("fail", "replay", "skip")
DETECTORS = ("adwin", "page_hinkley")
STREAMS = ("accuracy", "forget_loss", "mia_auc")
#: Evaluation stages (label ``stage``) and the event timing each one reads.
STAGES = {
    "setup": "monitor_start",
    "utility": "evaluation_utility",
    "mia": "evaluation_mia",
    "drift": "evaluation_drift",
    "lira_references": "lira_references",
    "reference": "reference",
}
#: Values of the ``model`` label: the released head, and the head retrained from scratch.
MODELS = ("ours", "retrained")
#: The model-dependent label comparison, exported as ``unlearn_prediction_*``.
PREDICTED = "predicted_test_vs_start"
#: Client ids at or above this are exported as client="other".
MAX_CLIENT_LABELS = 64
#: Class indices beyond this share the label ``other`` (bounded label values).
MAX_CLASS_LABELS = 100


def _f(value: Any) -> float:
    """A float for a gauge: None and non-numbers become NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def bounded_label(index: int | str, cap: int) -> str:
    """Label of an index in ``[0, cap)``; anything else (or not an integer) is ``other``."""
    try:
        c = int(index)
    except (TypeError, ValueError):
        return "other"
    return str(c) if 0 <= c < cap else "other"


def client_label(client: int | str) -> str:
    """Bounded label of a client index."""
    return bounded_label(client, MAX_CLIENT_LABELS)


def class_label(cls: int | str) -> str:
    """Bounded label of a class index (classes above the cap share ``other``)."""
    return bounded_label(cls, MAX_CLASS_LABELS)


#: Every (scope, uncovered) pair ``cr_scope_info`` may show: whole_model with nothing
#: uncovered, or head with why the whole model is not covered.
SCOPE_STATES: tuple[tuple[str, str], ...] = (
    ("whole_model", "none"),
    *(("head", why) for why in UNCOVERED if why != "none"),
)


class MetricsExporter:
    """Metrics of one run in their own registry, updated from event records.

    Parameters
    ----------
    version : the ``build_info`` version label.
    health : the liveness/readiness state served on ``/healthz`` and ``/readyz``.
    run_id : the ``build_info`` run id; default: the start event's ``run_id``, else
        ``<scenario>-<UTC time>-<6 hex>`` made at the start.
    """

    def __init__(
        self, version: str = "0.1.0", *, health: Health | None = None, run_id: str | None = None
    ) -> None:
        self.registry: CollectorRegistry
        self.registry, self.m = build_registry()
        self.version = version
        self.run_id = run_id
        self.health = health or Health()
        self._lock = threading.Lock()
        self._total_requests: int | None = None
        self._processed = 0
        self._server: Any = None
        self._scrapes = 0
        self._scraped = threading.Condition()
        self._built = False
        self.finished = False
        self.m["run_finished"].set(0)
        for s in STATUSES:
            self.m["deletion_requests_total"].labels(status=s)
        for r in RETRAIN_REASONS:
            self.m["retrains_total"].labels(reason=r)
        for r in DEAD_LETTER_REASONS:
            self.m["stream_dead_letters_total"].labels(reason=r)
        for r in UNAUTHORISED_REASONS:
            self.m["stream_unauthorised_requests_total"].labels(reason=r)
        for a in GAP_ACTIONS:
            self.m["stream_offset_gaps_total"].labels(action=a)
        self.m["stream_ready"].set(0)
        for d in DETECTORS:
            for s in STREAMS:
                self.m["drift_detections_total"].labels(detector=d, stream=s)

    # ------------------------------------------------------------------ serving
    def serve(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve the metrics and health endpoints.

        Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``addr:port`` in a daemon thread;
        returns the bound port.
        """
        metrics = make_wsgi_app(self.registry)
        checks = {"/healthz": self.health.liveness, "/readyz": self.health.readiness}

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            check = checks.get(environ.get("PATH_INFO", ""))
            if check is None:
                body = metrics(environ, start_response)
                with self._scraped:
                    self._scrapes += 1
                    self._scraped.notify_all()
                return body
            ok, why = check()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [f"{'ok' if ok else 'not ok'}: {why}\n".encode()]

        self._server = make_server(addr, port, app, _Server, handler_class=_QuietHandler)
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        return int(self._server.server_port)

    @property
    def scrapes(self) -> int:
        """Requests served on ``/metrics`` so far."""
        return self._scrapes

    def wait_for_scrape(self, timeout: float) -> bool:
        """Block until ``/metrics`` is served once more (True) or ``timeout`` seconds pass."""
        with self._scraped:
            seen = self._scrapes
            return self._scraped.wait_for(lambda: self._scrapes > seen, timeout=timeout)

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ------------------------------------------------------------------ events
    def __call__(self, event: dict[str, Any], fed: Any = None) -> None:
        """The ``on_event`` callback: route one event record."""
        self.health(event, fed)
        with self._lock:
            kind = event.get("event")
            self.m["stream_ready"].set(1 if self.health.readiness()[0] else 0)
            if kind in ("heartbeat", "consumer_ready", "consumer_waiting"):
                return
            if kind == "consumer_start":
                self._consumer_start(event, fed)
            elif kind == "offset_gap":
                self._offset_gap(event)
            elif kind == "start":  # a scenario run: running from here
                self._run_start(event, fed)
            elif kind == "deletion_batch":
                self._batch(event)
            elif kind in ("end", "consumer_end"):
                if kind == "end":
                    self._end(event)
                self.finished = True
                self.m["run_finished"].set(1)
            if fed is not None:
                self._clients(fed)

    def _consumer_start(self, event: dict[str, Any], fed: Any) -> None:
        """A Kafka consumer started (or resumed): build info, start-up time, held requests."""
        self._build_info(event, fed)
        seconds = event.get("process_seconds") or event.get("startup_seconds")
        self.m["stream_startup_seconds"].set(_f(seconds))
        self.m["stream_held_requests"].set(_f(event.get("held", 0)))
        self._scope(event)

    def _offset_gap(self, event: dict[str, Any]) -> None:
        """The consumer found a checkpointed offset the log no longer supports."""
        action = event.get("action")
        self.m["stream_offset_gaps_total"].labels(
            action=action if action in GAP_ACTIONS else "fail"
        ).inc()
        self.m["stream_skipped_records_total"].inc(int(event.get("skipped", 0)))

    def _run_start(self, event: dict[str, Any], fed: Any) -> None:
        """A scenario run started: start-up time, the run's settings and the head's target."""
        self.m["stream_startup_seconds"].set(_f(process_age()))
        self._start(event, fed)
        head = getattr(getattr(fed, "scenario", None), "head", None)
        if head is not None:
            self.m["cr_epsilon_target"].set(float(head.epsilon))
            self.m["cr_delta"].set(float(head.delta))

    def _build_info(self, e: dict[str, Any], fed: Any) -> None:
        """``build_info`` with the run id and scenario (once per exporter) and the start time."""
        if self._built:
            return
        scenario = getattr(fed, "scenario", None)
        name = str(e.get("scenario") or getattr(scenario, "name", None) or "unknown")
        method = str(e.get("method") or getattr(scenario, "method", None) or "unknown")
        if self.run_id is None:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            self.run_id = str(e.get("run_id") or f"{name}-{stamp}-{secrets.token_hex(3)}")
        self.m["build_info"].labels(
            version=self.version, method=method, run_id=self.run_id, scenario=name
        ).set(1)
        self.m["run_start_time_seconds"].set(time.time())
        self._built = True

    def _start(self, e: dict[str, Any], fed: Any = None) -> None:
        m = self.m
        self._build_info(e, fed)
        if isinstance(e.get("requests"), int):
            self._total_requests = e["requests"]
            m["deletion_lag_requests"].set(e["requests"])
        m["cr_residual_budget"].set(_f(e.get("budget")))
        m["cr_residual_cumulative"].set(_f(e.get("training_residual")))
        self._accounting(e.get("accounting"))
        self._scope(e)
        self._weights(e.get("decorrelation_weights") or {})
        if isinstance(e.get("budget"), int | float) and e["budget"] > 0:
            m["cr_budget_used_ratio"].set(_f(e.get("training_residual")) / e["budget"])
        for key in ("epsilon_target", "delta"):
            if key in e:
                m[f"cr_{key}"].set(_f(e[key]))
        for cid in e.get("clients", {}):
            m["client_deleted_samples_total"].labels(client=client_label(cid))
            m["client_withdrawals_total"].labels(client=client_label(cid))
        self._utility(e.get("metrics", {}))

    def _end(self, e: dict[str, Any]) -> None:
        self._utility(e.get("metrics", {}))
        m = self.m
        m["retained_samples"].set(_f(e.get("retained")))
        m["cr_epsilon_target"].set(_f(e.get("epsilon_target")))
        m["cr_delta"].set(_f(e.get("delta")))
        if self._total_requests is not None:
            m["deletion_lag_requests"].set(max(0, self._total_requests - self._processed))

    def _batch(self, e: dict[str, Any]) -> None:
        """A deletion batch: requests and samples, lag, timings, the head and its sections."""
        self._batch_requests(e)
        self._batch_lag(e)
        self._batch_timings(e.get("timings", {}), e.get("latency_seconds", []))
        self._batch_head(e)
        if "certificate" in e:
            self._certificate(e["certificate"])
        self._weights(e.get("decorrelation") or {})
        self._utility(e.get("metrics", {}))
        if "privacy" in e:
            self._privacy(e["privacy"], reference=False)
        if "drift" in e:
            self._drift(e["drift"])
        for c in e.get("checkpoints", []):
            self._checkpoint(c)

    def _batch_requests(self, e: dict[str, Any]) -> None:
        """Requests by status, samples and clients deleted, dead letters and refusals."""
        m = self.m
        requests, rejected = int(e.get("requests", 0)), int(e.get("rejected", 0))
        duplicates = int(e.get("duplicates", 0))
        m["deletion_requests_total"].labels(status="applied").inc(requests - rejected - duplicates)
        m["deletion_requests_total"].labels(status="rejected").inc(rejected)
        m["deletion_requests_total"].labels(status="duplicate").inc(duplicates)
        m["deleted_samples_total"].inc(int(e.get("samples", 0)))
        self.count_client_deletions((e.get("clients") or {}).items())
        for cid in e.get("withdrawn_clients") or ():
            m["client_withdrawals_total"].labels(client=client_label(cid)).inc()
        m["deletion_batches_total"].inc()
        for reason, n in (e.get("dead_letters") or {}).items():
            r = reason if reason in DEAD_LETTER_REASONS else "other"
            m["stream_dead_letters_total"].labels(reason=r).inc(int(n))
        for reason, n in (e.get("unauthorised") or {}).items():
            r = reason if reason in UNAUTHORISED_REASONS else "other"
            m["stream_unauthorised_requests_total"].labels(reason=r).inc(int(n))

    def _batch_lag(self, e: dict[str, Any]) -> None:
        """Held requests and the requests not processed yet."""
        m = self.m
        if "held" in e:
            m["stream_held_requests"].set(_f(e["held"]))
        self._processed += int(e.get("requests", 0))
        if "lag_requests" in e:
            m["deletion_lag_requests"].set(_f(e["lag_requests"]))
        elif self._total_requests is not None:
            m["deletion_lag_requests"].set(max(0, self._total_requests - self._processed))

    def _batch_timings(self, timings: dict[str, float], latencies: list[float]) -> None:
        """Durations of the batch, its federation round and evaluation stages; latencies."""
        m = self.m
        if "total" in timings:
            m["deletion_batch_duration_seconds"].observe(timings["total"])
        if "statistics" in timings:
            m["federation_round_duration_seconds"].observe(timings["statistics"])
        for latency in latencies:
            m["deletion_request_latency_seconds"].observe(latency)
        for stage, key in STAGES.items():
            if key in timings:
                m["evaluation_duration_seconds"].labels(stage=stage).observe(timings[key])

    def _batch_head(self, e: dict[str, Any]) -> None:
        """Retained samples, the head's version and whether (why) it was retrained."""
        m = self.m
        if "retained" in e:
            m["retained_samples"].set(_f(e["retained"]))
        if "model_version" in e:
            m["head_model_version"].set(_f(e["model_version"]))
        if e.get("retrained"):
            reason = e.get("retrain_reason")
            m["retrains_total"].labels(
                reason=reason if reason in RETRAIN_REASONS else "requested"
            ).inc()

    # ------------------------------------------------------------------ sections
    def _scope(self, e: dict[str, Any]) -> None:
        """What the certificate covers, and the whole model's total (``simulator.head.scope``)."""
        scope, provenance = e.get("scope"), e.get("extractor_data")
        if scope not in SCOPES:
            return
        uncovered = e.get("scope_uncovered") or (
            "none"
            if scope == "whole_model"
            else "dp_group_vacuous"
            if provenance == "dp"
            else "private_extractor"
        )
        if provenance in PROVENANCES:  # one scope at a time: a dp run's may change mid-stream
            for other, why in SCOPE_STATES:
                info = self.m["cr_scope_info"].labels(
                    scope=other, extractor_data=provenance, uncovered=why
                )
                info.set(1.0 if (other, why) == (scope, uncovered) else 0.0)
        if scope == "head":  # the extractor has no guarantee: the whole model's is vacuous
            self.m["cr_total_epsilon_spent"].set(math.inf)
            self.m["cr_total_delta"].set(_f(e.get("delta")))
        else:
            self.m["cr_total_epsilon_spent"].set(_f(e.get("total_epsilon_spent")))
            self.m["cr_total_delta"].set(_f(e.get("total_delta")))

    def _accounting(self, accounting: Any) -> None:
        if accounting in ACCOUNTING_MODES:
            for mode in ACCOUNTING_MODES:
                self.m["cr_accounting_info"].labels(accounting=mode).set(
                    1.0 if mode == accounting else 0.0
                )

    def _weights(self, weights: dict[str, dict[str, float]]) -> None:
        """Per-client decorrelation fits (``WeightReport.to_flat`` records)."""
        m = self.m
        for cid, w in weights.items():
            label = client_label(cid)
            m["decorrelation_effective_sample_ratio"].labels(client=label).set(
                _f(w.get("effective_sample_size_ratio"))
            )
            m["decorrelation_weight_max"].labels(client=label).set(_f(w.get("max")))
            m["decorrelation_weight_min"].labels(client=label).set(_f(w.get("min")))
            for key, value in w.items():
                if key.startswith("class_mass_"):
                    m["decorrelation_class_mass_ratio"].labels(
                        client=label, **{"class": class_label(key[len("class_mass_") :])}
                    ).set(_f(value))

    def _certificate(self, c: dict[str, Any]) -> None:
        m = self.m
        self._accounting(c.get("accounting"))
        for bound, value in c.get("residual", {}).items():
            m["cr_residual"].labels(bound=bound).set(_f(value))
        m["cr_residual_cumulative"].set(_f(c.get("cumulative")))
        m["cr_residual_budget"].set(_f(c.get("budget")))
        m["cr_budget_used_ratio"].set(_f(c.get("used_ratio")))
        m["cr_epsilon_spent"].set(_f(c.get("epsilon_spent")))
        m["cr_epsilon_target"].set(_f(c.get("epsilon_target")))
        m["cr_delta"].set(_f(c.get("delta")))
        self._scope(c)

    def _utility(self, metrics: dict[str, Any]) -> None:
        for key, value in metrics.items():
            kind, _, split = key.partition("_")
            if kind in ("accuracy", "f1") and split:
                name = "model_accuracy_ratio" if kind == "accuracy" else "model_f1_ratio"
                self.m[name].labels(split=split, model="ours").set(_f(value))

    def _privacy(self, p: dict[str, Any], *, reference: bool) -> None:
        m = self.m
        model = MODELS[1] if reference else MODELS[0]
        for attack, s in p.get("attacks", {}).items():
            m["mia_auc_ratio"].labels(attack=attack, model=model).set(_f(s.get("auc")))
            m["mia_advantage_ratio"].labels(attack=attack, model=model).set(_f(s.get("advantage")))
            for fpr, tpr in s.get("tpr_at_fpr", {}).items():
                m["mia_tpr_at_fpr_ratio"].labels(attack=attack, fpr=fpr, model=model).set(_f(tpr))
        m["mia_efficacy_ratio"].labels(model=model).set(_f(p.get("efficacy")))
        if "forget_loss" in p:
            m["forget_loss"].labels(model=model).set(_f(p["forget_loss"]))
        if not reference:
            for name, n in p.get("samples", {}).items():
                m["mia_samples"].labels(set=name).set(_f(n))

    def _prediction_shift(self, s: dict[str, Any], model: str) -> None:
        self.m["prediction_tv_distance"].labels(model=model).set(_f(s.get("tv")))
        self.m["prediction_js_divergence"].labels(model=model).set(_f(s.get("js")))

    def _drift(self, d: dict[str, Any]) -> None:
        m = self.m
        for comparison, s in d.get("feature", {}).items():
            m["feature_mmd2"].labels(comparison=comparison).set(_f(s.get("mmd2")))
            m["feature_mmd2_p_value"].labels(comparison=comparison).set(_f(s.get("p_value")))
        for comparison, s in d.get("label", {}).items():
            if comparison == PREDICTED:
                self._prediction_shift(s, MODELS[0])
                continue
            m["label_tv_distance"].labels(comparison=comparison).set(_f(s.get("tv")))
            m["label_js_divergence"].labels(comparison=comparison).set(_f(s.get("js")))
            if "chi2_p_value" in s:
                m["label_chi2_p_value"].labels(comparison=comparison).set(_f(s["chi2_p_value"]))
        for alarm in d.get("detections", []):
            det, stream = alarm.get("detector"), alarm.get("stream")
            if det in DETECTORS and stream in STREAMS:
                m["drift_detections_total"].labels(detector=det, stream=stream).inc()

    def _checkpoint(self, c: dict[str, Any]) -> None:
        m = self.m
        m["retrain_reference_checkpoints_total"].inc()
        m["head_distance_to_retrain_ratio"].set(_f(c.get("param_distance_relative")))
        if "residual_against_cold_fit" in c:
            m["cr_residual_against_retrain"].set(_f(c["residual_against_cold_fit"]))
        for key, value in c.items():
            for prefix, name in (
                ("reference_accuracy_", "model_accuracy_ratio"),
                ("reference_f1_", "model_f1_ratio"),
            ):
                if key.startswith(prefix):
                    m[name].labels(split=key[len(prefix) :], model=MODELS[1]).set(_f(value))
            if key.startswith("prediction_agreement_"):
                split = key[len("prediction_agreement_") :]
                m["prediction_agreement_ratio"].labels(split=split).set(_f(value))
        if "privacy" in c:
            self._privacy(c["privacy"], reference=True)
        predicted = c.get("drift", {}).get("label", {}).get(PREDICTED)
        if predicted is not None:
            self._prediction_shift(predicted, MODELS[1])

    def _clients(self, fed: Any) -> None:
        """Per-client gauges from the federation (rows held, rows removed so far)."""
        clients = getattr(fed, "clients", None)
        if not isinstance(clients, dict):
            return
        held: dict[str, float] = {}
        for cid, client in clients.items():
            label = client_label(cid)
            held[label] = held.get(label, 0.0) + float(len(client.retained_ids))
        for label, n in held.items():
            self.m["client_retained_samples"].labels(client=label).set(n)

    def count_client_deletions(self, routing: Iterable[tuple[str, int]]) -> None:
        """Add per-client removed rows (``event["clients"]`` items)."""
        for cid, n in routing:
            self.m["client_deleted_samples_total"].labels(client=client_label(cid)).inc(int(n))

    def metric(self, name: str) -> MetricWrapperBase:
        """A metric by its short name (without ``unlearn_``)."""
        metric: MetricWrapperBase = self.m[name]
        return metric


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per request; threads do not keep the process alive."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr (Prometheus scrapes every few seconds)."""

    def log_message(self, format: str, *args: Any) -> None:
        return
