"""``unlearnsim broker start|stop|status`` and ``unlearnsim produce`` against the real binary."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from support.kafka import broker, read_topic
from support.scenarios import QUICKSTART, TEN_CLIENTS, scenario

from server.cli import main
from server.health import Health
from server.kafka.broker import LocalBroker, free_port, port_open
from server.kafka.producer import scenario_requests
from server.kafka.signing import verify
from server.metrics.exporter import MetricsExporter
from simulator.stream import DeletionRequest

__all__ = ["broker"]


def sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def test_broker_start_status_stop(tmp_path: Path) -> None:
    pid_file, port = tmp_path / "broker.json", free_port()
    cmd = ["--pid-file", str(pid_file)]
    assert main(["broker", "start", "--port", str(port), *cmd]) == 0
    try:
        info = json.loads(pid_file.read_text())
        assert info["bootstrap"] == f"127.0.0.1:{port}" and port_open(port)
        assert main(["broker", "status", *cmd]) == 0
        assert main(["broker", "start", "--port", str(port), *cmd]) == 2  # one per pid file
    finally:
        assert main(["broker", "stop", *cmd]) == 0
    deadline = time.monotonic() + 5
    while port_open(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not port_open(port) and not pid_file.exists()
    assert main(["broker", "status", *cmd]) == 1


def test_produce_replays_the_scenario_stream(broker: LocalBroker) -> None:
    base = ["produce", str(QUICKSTART), *sets(TEN_CLIENTS), "--bootstrap", broker.bootstrap]
    assert main([*base, "--as-fast-as-possible", "--requests-topic", "fast"]) == 0
    sent = [DeletionRequest.from_json(m.value) for m in read_topic(broker.bootstrap, "fast")]
    assert sent == scenario_requests(scenario(TEN_CLIENTS))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:  # created explicitly: one partition, not the broker's default
        (described,) = admin.describe_topics(["fast"])
        assert len(described["partitions"]) == 1
    finally:
        admin.close()

    t = time.perf_counter()
    assert main([*base, "--rate", "100", "--limit", "30", "--requests-topic", "paced"]) == 0
    assert time.perf_counter() - t >= 0.29  # 30 requests at 100/s
    assert len(read_topic(broker.bootstrap, "paced")) == 30


def test_kafka_run_needs_a_bootstrap_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the scenario's output_dir is relative: never the checkout's
    assert main(["run", str(QUICKSTART), "--stream", "kafka"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "error: --bootstrap: --stream kafka needs --bootstrap HOST:PORT"
    assert list(tmp_path.iterdir()) == []  # refused at pre-flight: no run folder


def test_produce_signs_with_a_key_from_a_file(broker: LocalBroker, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"s" * 24 + b"\n")
    base = ["produce", str(QUICKSTART), *sets(TEN_CLIENTS), "--bootstrap", broker.bootstrap]
    assert main([*base, "--as-fast-as-possible", "--limit", "3", "--requests-topic", "signed",
                 "--signing-key-file", str(key)]) == 0  # fmt: skip
    for m in read_topic(broker.bootstrap, "signed"):
        assert verify(m.value, list(m.headers), b"s" * 24) is None


def test_broker_never_touches_a_pid_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: ``--pid-file`` naming someone's file is refused, never replaced or deleted."""
    for text in ("my notes\n", '{"pid": 1}\n', "{}\n"):
        notes = tmp_path / "notes.json"
        notes.write_text(text)
        for action in ("stop", "status", "start"):
            port = ["--port", "9"] if action == "start" else []
            assert main(["broker", action, "--pid-file", str(notes), *port]) == 2
            (line,) = capsys.readouterr().err.strip().splitlines()
            assert line.startswith(f"error: --pid-file: {notes} is not a broker record")
            assert notes.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json"]


def _becomes_ready(health: Health, after: float) -> threading.Timer:
    """A timer that, ``after`` seconds, passes ``health`` the events of a consumer that starts."""

    def start() -> None:
        for event in ("consumer_loading", "start", "consumer_start"):
            health({"event": event})

    timer = threading.Timer(after, start)
    timer.start()
    return timer


def test_produce_waits_for_the_consumers_ready_file(broker: LocalBroker, tmp_path: Path) -> None:
    ready = tmp_path / "state" / "ready"
    health = Health(ready_file=ready)
    base = ["produce", str(QUICKSTART), *sets(TEN_CLIENTS), "--bootstrap", broker.bootstrap]
    t = time.monotonic()
    timer = _becomes_ready(health, 1.0)
    try:
        assert main([*base, "--as-fast-as-possible", "--limit", "3", "--requests-topic", "waited",
                     "--wait-ready", str(ready)]) == 0  # fmt: skip
        assert time.monotonic() - t >= 1.0  # not before the file appeared
    finally:
        timer.join()
        health.close()
    assert len(read_topic(broker.bootstrap, "waited")) == 3


def test_produce_waits_for_readyz_and_gives_up_without_sending(
    broker: LocalBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    health = Health()
    exporter = MetricsExporter(health=health)
    url = f"http://127.0.0.1:{exporter.serve(0)}/readyz"
    base = ["produce", str(QUICKSTART), *sets(TEN_CLIENTS), "--bootstrap", broker.bootstrap]
    try:
        code = main([*base, "--as-fast-as-possible", "--requests-topic", "never",
                     "--wait-ready", url, "--wait-timeout", "1"])  # fmt: skip
        assert code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("error: --wait-ready: the consumer was not ready within 1 s")
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            assert "never" not in admin.list_topics()  # nothing sent, no topic created
        finally:
            admin.close()

        t = time.monotonic()
        timer = _becomes_ready(health, 1.0)
        code = main([*base, "--as-fast-as-possible", "--limit", "4", "--requests-topic", "later",
                     "--wait-ready", url])  # fmt: skip
        timer.join()
        assert code == 0 and time.monotonic() - t >= 1.0
        assert "consumer ready after" in capsys.readouterr().out
    finally:
        exporter.close()
    assert len(read_topic(broker.bootstrap, "later")) == 4
