"""Liveness and readiness: from events, as a ready file, and as /healthz and /readyz."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from server.health import Health, process_age
from server.metrics.exporter import MetricsExporter


def test_health_follows_the_consumer_events(tmp_path: Path) -> None:
    now = [0.0]
    ready = tmp_path / "ready"
    health = Health(stall_after=10.0, ready_file=ready, clock=lambda: now[0])
    assert health.liveness() == (True, "starting")
    assert health.readiness() == (False, "starting")
    now[0] = 60.0  # a long build: still alive
    assert health.liveness()[0] and not ready.exists()

    health({"event": "consumer_loading"})  # a consumer: its run's start is not ready yet
    health({"event": "start"})
    assert not health.readiness()[0] and not ready.exists()
    health({"event": "consumer_start"})
    assert health.readiness() == (True, "consuming")
    info = json.loads(ready.read_text())
    age = process_age()
    assert info["pid"] > 0 and age is not None and 0 < info["seconds_to_ready"] <= age
    health({"event": "consumer_waiting", "reason": "broker: gone"})
    assert health.readiness() == (False, "broker: gone") and not ready.exists()
    health({"event": "heartbeat"})  # alive, but the broker is still away
    assert not health.readiness()[0] and not ready.exists()
    health({"event": "consumer_ready"})
    assert health.readiness()[0] and ready.exists()
    now[0] = 75.0  # no heartbeat for 15 s > 10 s: the loop is stuck
    assert health.liveness() == (False, "no heartbeat for 15 s")
    assert not health.readiness()[0]
    health({"event": "deletion_batch"})
    assert health.liveness()[0]
    health({"event": "consumer_end"})
    assert health.readiness() == (False, "stopping") and not ready.exists()
    assert health.liveness()[0]  # stopping is not dead


def test_the_metrics_port_serves_healthz_and_readyz() -> None:
    exporter = MetricsExporter()
    port = exporter.serve(0)
    base = f"http://127.0.0.1:{port}"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    try:
        assert get("/healthz") == (200, "ok: starting\n")
        assert get("/readyz") == (503, "not ok: starting\n")
        exporter({"event": "consumer_start", "process_seconds": 2.5, "held": 0})
        assert get("/readyz") == (200, "ok: consuming\n")
        status, text = get("/metrics")
        assert status == 200
        assert "unlearn_stream_ready 1.0" in text and "unlearn_stream_startup_seconds 2.5" in text
        exporter({"event": "offset_gap", "action": "skip", "skipped": 7})
        exporter({"event": "deletion_batch", "requests": 3, "unauthorised": {"not_owner": 2}})
        text = get("/metrics")[1]
        assert 'unlearn_stream_offset_gaps_total{action="skip"} 1.0' in text
        assert "unlearn_stream_skipped_records_total 7.0" in text
        assert 'unlearn_stream_unauthorised_requests_total{reason="not_owner"} 2.0' in text
        exporter({"event": "consumer_end"})
        assert get("/readyz")[0] == 503 and get("/healthz")[0] == 200
    finally:
        exporter.close()


def test_process_age_is_measured() -> None:
    age = process_age()
    assert age is not None and 0 <= age < 3600
