"""Shared test set-up: ``tests/`` on the import path, the ``integration`` marker, and a check
that the suite leaves the working tree alone.

A test is marked ``integration`` when it uses a real service this project starts (the bundled
Kafka broker, Debian's Prometheus or promtool, Flower's engines and processes, the native
stack): by the fixtures it takes, or by its module. ``-m "not integration"`` runs the fast,
self-contained part; CI runs everything (``.ci/run``).

Tests write only under ``tmp_path``: :func:`checkout_left_alone` fails the session when
``git status`` shows anything new in the checkout (:mod:`support.checkout`).
"""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support.checkout import changes, new_changes

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def checkout_left_alone() -> Iterator[None]:
    """Fail the session when a test wrote into the checkout (a ``runs/`` folder, ...)."""
    before = changes(ROOT)
    yield
    after = changes(ROOT)
    if before is None or after is None:  # not a git checkout: nothing to compare
        return
    new = new_changes(before, after)
    assert not new, "the tests wrote into the checkout (tests write under tmp_path): " + "; ".join(
        new[:20]
    )


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
