"""The broker dies (SIGKILL) during consumption and comes back: the consumer backs off, resumes.

A broker restart only keeps its data with durable storage, so this broker stores in S3, served
on loopback by ``moto_server`` (the ``moto[server]`` test dependency), as Apache Kafka keeps
its log on disk.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.kafka import BATCH, config, in_process, read_receipts
from support.scenarios import TEN_CLIENTS, scenario

from server.kafka.broker import LocalBroker, free_port, port_open
from server.kafka.consumer import DeletionConsumer
from server.kafka.producer import replay_requests
from server.kafka.topics import Topics
from simulator.runner.federation import Federation, build_federation

pytest.importorskip("moto.server", reason="needs moto[server] (the dev extra)")
import boto3

AWS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An S3 endpoint on loopback with a ``tansu`` bucket; yields the broker's environment."""
    port = free_port()
    log = (tmp_path / "moto.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **AWS},
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open(port):
            assert proc.poll() is None and time.monotonic() < deadline, "moto_server did not start"
            time.sleep(0.05)
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            region_name="us-east-1",
        ).create_bucket(Bucket="tansu")
        yield {**AWS, "AWS_ENDPOINT": endpoint}
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def durable_broker(s3: dict[str, str], tmp_path: Path) -> Iterator[LocalBroker]:
    b = LocalBroker(storage="s3://tansu/", env=s3, log_path=tmp_path / "broker.log")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_broker_killed_and_restarted_during_consumption(
    durable_broker: LocalBroker, tmp_path: Path
) -> None:
    fed: Federation = build_federation(scenario(TEN_CLIENTS))
    reference = copy.deepcopy(fed)
    requests = fed.requests
    topics = Topics()
    replay_requests(requests, bootstrap=durable_broker.bootstrap, topics=topics)
    restarted = threading.Event()

    seen: dict[str, float] = {}

    def outage(event: dict[str, Any], _: Federation) -> None:
        if event["event"] == "deletion_batch" and event["consumer_batch"] == 3:
            seen["batch 3"] = time.monotonic()
        if event["event"] == "deletion_batch" and event["consumer_batch"] == 2:
            durable_broker.kill()  # right after batch 2 was published

            def come_back() -> None:
                time.sleep(3.0)
                durable_broker.start()
                seen["back"] = time.monotonic()
                restarted.set()

            threading.Thread(target=come_back, daemon=True).start()

    settings = config(durable_broker.bootstrap, tmp_path, idle_timeout=6.0, flush_timeout=1.0)
    summary = DeletionConsumer(fed, settings, on_event=[outage]).run()
    assert restarted.is_set()
    # the batch fetched as the broker went away waits for it: its log cannot be checked before
    assert seen["batch 3"] > seen["back"]
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["consumer_batch"] for e in events if e["event"] == "deletion_batch"][:3] == [1, 2, 3]

    receipts = read_receipts(durable_broker.bootstrap, topics)
    assert [r.request_id for r in receipts] == [r.request_id for r in requests]
    assert [r.status for r in receipts] == in_process(reference, requests)
    np.testing.assert_array_equal(fed.head.W, reference.head.W)
    assert summary["batches"] == -(-len(requests) // BATCH)
