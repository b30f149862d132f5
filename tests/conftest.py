"""Shared test set-up: ``tests/`` on the import path, and the ``integration`` marker.

A test is marked ``integration`` when it uses a real service this project starts (the bundled
Kafka broker, Debian's Prometheus or promtool, Flower's engines and processes, the native
stack): by the fixtures it takes, or by its module. ``-m "not integration"`` runs the fast,
self-contained part; CI runs everything (``.ci/run``).
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

#: Fixtures that start a real service.
SERVICE_FIXTURES = frozenset({"broker", "durable_broker", "prometheus"})
#: Modules whose tests start real services themselves (subprocesses, engines).
SERVICE_MODULES = frozenset(
    {
        "test_flower_engines",
        "test_prometheus_rules",
        "test_stack_native",
        "test_stack_supervisor",
        "test_kafka_crash",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SERVICE_FIXTURES or item.module.__name__ in SERVICE_MODULES:
            item.add_marker(pytest.mark.integration)
