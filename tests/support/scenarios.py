"""Scenario files and the override lists that shrink them for tests."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from simulator.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parent.parent.parent
SCENARIOS = ROOT / "scenarios"
QUICKSTART = SCENARIOS / "quickstart.yaml"

#: The quickstart's stages, each shrunk to a few seconds (shared by SMALL and TEN_CLIENTS).
_SHRUNK = [
    "data.synthetic.n_test=300",
    "model.rounds=1",
    "rff.dim=64",
    "decorrelation.steps=10",
    "stream.phases.0.ticks=3",
    "stream.phases.1.ticks=3",
    "stream.phases.2.ticks=3",
    "stream.withdrawals.0.at=8",
    "shifts.0.start=4",
    "evaluation.checkpoints=[20]",
]

#: Shrinks the quickstart to a few seconds while keeping every stage.
SMALL = ["data.synthetic.n_train=600", *_SHRUNK]

#: A few seconds to build; ~100 requests of 2 samples over 9 ticks, 10 clients.
TEN_CLIENTS = [
    "partition.num_clients=10",
    "data.synthetic.n_train=800",
    "stream.phases.0.rate=10",
    "stream.phases.1.rate=10",
    "stream.phases.2.rate=6",
    *_SHRUNK,
]

#: Thousands of single-sample requests on the quickstart data with 10 clients.
LARGE = [
    "partition.num_clients=10",
    "rff.dim=64",
    "stream.phases.0.rate=130",
    "stream.phases.0.samples_per_request=1",
    "stream.phases.1.rate=90",
    "stream.phases.1.samples_per_request=1",
    "stream.phases.2.rate=25",
    "stream.phases.2.samples_per_request=1",
]


def scenario(overrides: list[str], *extra: str) -> Scenario:
    """The quickstart with ``overrides`` and ``extra`` applied."""
    return load_scenario(QUICKSTART, overrides=[*overrides, *extra])


def quiet() -> Console:
    return Console(quiet=True)


def tiny_compare(
    name: str,
    *,
    model: str = "rounds: 1, local_epochs: 2",
    evaluation: str = "\n  checkpoints: [5, 12]",
    extra: str = "",
) -> str:
    """A scenario (YAML text) whose comparison runs every stage in a few seconds.

    Synthetic data (240 training rows, 6 features, 2 classes), 3 IID clients, a small MLP
    extractor, ``exact`` accounting, ~16 two-sample requests in batches of 5. ``model`` adds to
    the ``model`` section (rounds and epochs, the extractor's provenance), ``evaluation`` is
    the ``evaluation`` section's body, ``extra`` more top-level YAML.
    """
    return f"""
name: {name}
description: a comparison of every stage in a few seconds
seed: 4
device: cpu
data:
  source: synthetic
  synthetic: {{n_train: 240, n_test: 120, n_features: 6, n_classes: 2, n_causal: 3}}
partition: {{kind: iid, num_clients: 3}}
model: {{backbone: mlp, feature_dim: 6, hidden: [12], batch_size: 32, {model}}}
rff: {{dim: 24}}
decorrelation: {{features: 6, steps: 5}}
head: {{accounting: exact}}
stream:
  max_batch_requests: 5
  phases:
    - {{name: a, ticks: 4, rate: 4, samples_per_request: 2}}
{extra}evaluation:{evaluation}
"""
