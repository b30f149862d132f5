"""A scenario's sections as the core's configuration objects.

One mapping, used by the runner, the clients and ``unlearnsim compare``.
"""

from __future__ import annotations

from simulator.features.decorrelation import DecorrelationConfig
from simulator.head import HeadConfig
from simulator.models import BackboneSpec
from simulator.scenario import Scenario


def backbone_spec(scenario: Scenario) -> BackboneSpec:
    """The extractor the ``model`` section names."""
    m = scenario.model
    return BackboneSpec(
        kind=m.backbone,
        feature_dim=m.feature_dim,
        hidden=tuple(m.hidden),
        embed_dim=m.embed_dim,
        heads=m.heads,
        layers=m.layers,
    )


def head_config(scenario: Scenario) -> HeadConfig:
    """The certified head's settings from the ``head`` section."""
    h = scenario.head
    return HeadConfig(
        lam=h.lam,
        sigma=h.sigma,
        epsilon=h.epsilon,
        delta=h.delta,
        accounting=h.accounting,
        report_exact=reports_exact_residual(scenario),
        tol=h.tol,
        refresh_every=h.refresh_every,
        retrain=h.retrain,
        device=h.device,
        backend=h.backend,
    )


def reports_exact_residual(scenario: Scenario) -> bool:
    """Whether the clients report exact accuracy.

    ``head.report_exact``, whose default is off on flower-deploy (a round trip to every
    client costs most of a deletion batch there, docs/flower.md) and on elsewhere.
    """
    chosen = scenario.head.report_exact
    return chosen if chosen is not None else scenario.transport != "flower-deploy"


def decorrelation_config(scenario: Scenario) -> DecorrelationConfig:
    """The decorrelation weights' settings from the ``decorrelation`` section."""
    dc = scenario.decorrelation
    return DecorrelationConfig(
        objective=dc.objective,
        features=dc.features,
        functions=dc.functions,
        steps=dc.steps,
        lr=dc.lr,
        penalty=dc.penalty,
        max_weight=dc.max_weight,
    )
