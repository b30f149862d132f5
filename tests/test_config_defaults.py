"""Every default is written once: the CLI and the internal configs take theirs from the settings
and the scenario sections, and these tests keep them from drifting apart."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from server.cli import build_parser
from server.kafka.batcher import BatchConfig
from server.kafka.gate import GateConfig
from server.kafka.launch import stream_from_args
from server.kafka.settings import ConsumerSettings, consumer_default
from server.kafka.topics import Topics
from simulator.features.decorrelation import DecorrelationConfig
from simulator.head import HeadConfig
from simulator.models import BackboneConfig
from simulator.scenario import DecorrelationSpec, HeadSpec, ModelSpec
from simulator.scenario._base import Section


def test_run_options_default_to_the_consumer_settings() -> None:
    args = build_parser().parse_args(["run", "x.yaml", "--bootstrap", "host:1"])
    assert stream_from_args(args) == ConsumerSettings(bootstrap="host:1")


def test_produce_topics_default_to_the_consumer_settings() -> None:
    args = build_parser().parse_args(["produce", "x.yaml"])
    settings = ConsumerSettings()
    assert (args.requests_topic, args.receipts_topic, args.dead_letter_topic) == (
        settings.requests_topic,
        settings.receipts_topic,
        settings.dead_letter_topic,
    )


def test_kafka_objects_default_to_the_consumer_settings() -> None:
    settings = ConsumerSettings()
    assert Topics() == Topics.of(settings)
    assert BatchConfig(max_requests=1).max_wait == settings.max_wait
    gate = GateConfig()
    assert (gate.ownership, gate.rate_limit, gate.rate_window) == (
        settings.ownership,
        settings.subject_rate_limit,
        settings.subject_rate_window,
    )
    assert consumer_default("group") == settings.group


def shared_defaults(section: type[Section], config: type[Any]) -> list[tuple[str, Any, Any]]:
    """``(name, section default, config default)`` of every field both declare."""
    keys = section.model_fields
    return [
        (f.name, keys[f.name].default, f.default)
        for f in fields(config)
        if f.name in keys and keys[f.name].default is not None
    ]


@pytest.mark.parametrize(
    ("section", "config"),
    [(HeadSpec, HeadConfig), (DecorrelationSpec, DecorrelationConfig), (ModelSpec, BackboneConfig)],
)
def test_internal_configs_default_to_the_scenario_sections(
    section: type[Section], config: type[Any]
) -> None:
    for name, from_section, from_config in shared_defaults(section, config):
        expected = tuple(from_section) if isinstance(from_section, list) else from_section
        assert expected == from_config, name


def test_produce_and_broker_defaults_are_the_library_defaults() -> None:
    import inspect

    from server.kafka.broker import LocalBroker
    from server.kafka.settings import KAFKA_PORT, MEMORY_STORAGE
    from server.kafka.topics import ensure_topics

    produce = build_parser().parse_args(["produce", "x.yaml"])
    partitions = inspect.signature(ensure_topics).parameters["request_partitions"].default
    assert produce.partitions == partitions
    broker = build_parser().parse_args(["broker", "start"])
    storage = inspect.signature(LocalBroker).parameters["storage"].default
    assert (broker.port, broker.storage) == (KAFKA_PORT, storage) == (KAFKA_PORT, MEMORY_STORAGE)
