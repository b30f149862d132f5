"""A scenario's sections as the core's configuration objects.

One conversion per internal config, used by the runner, the clients and ``unlearnsim compare``:
each config takes the fields it shares with its section (:func:`from_section`) plus what the
section does not say. The data layer needs none: it reads the ``data`` and ``partition``
sections themselves (:func:`simulator.data.load_source`, :func:`simulator.data.partition`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

from simulator.features.decorrelation import DecorrelationConfig
from simulator.head import HeadConfig
from simulator.models import BackboneConfig
from simulator.scenario import Scenario
from simulator.scenario._base import Section

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    ConfigT = TypeVar("ConfigT", bound=DataclassInstance)
else:
    ConfigT = TypeVar("ConfigT")


def from_section(section: Section, config: type[ConfigT], **extra: Any) -> ConfigT:
    """``config`` built from the fields it shares with ``section``, then ``extra``.

    Fields of ``config`` that the section does not have keep their defaults; ``extra`` gives
    the ones whose value is not a copy of a section key.
    """
    keys = type(section).model_fields
    shared = {f.name: getattr(section, f.name) for f in fields(config) if f.name in keys}
    return config(**{**shared, **extra})


def backbone_config(scenario: Scenario) -> BackboneConfig:
    """The extractor the ``model`` section names."""
    return from_section(scenario.model, BackboneConfig, kind=scenario.model.backbone)


def head_config(scenario: Scenario) -> HeadConfig:
    """The certified head's settings from the ``head`` section."""
    return from_section(scenario.head, HeadConfig, report_exact=reports_exact_residual(scenario))


def reports_exact_residual(scenario: Scenario) -> bool:
    """Whether the clients report exact accuracy.

    ``head.report_exact``, whose default is off on flower-deploy (a round trip to every
    client costs most of a deletion batch there, docs/flower.md) and on elsewhere.
    """
    chosen = scenario.head.report_exact
    return chosen if chosen is not None else scenario.transport != "flower-deploy"


def decorrelation_config(scenario: Scenario) -> DecorrelationConfig:
    """The decorrelation weights' settings from the ``decorrelation`` section."""
    return from_section(scenario.decorrelation, DecorrelationConfig)
