"""Prometheus exporter of a run's metrics (``docs/metrics.md``): definitions, events, CLI."""

from server.metrics.definitions import METRICS, MetricDef, build_registry
from server.metrics.exporter import MetricsExporter

__all__ = ["METRICS", "MetricDef", "MetricsExporter", "build_registry"]
