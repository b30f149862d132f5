"""One method registry for ``run`` and ``compare`` (``simulator/methods.py``): every method
either runs under each command or is refused there with the command that runs it, and the
certified methods remove the same way under both."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from support.scenarios import TEN_CLIENTS, scenario
from support.unlearners import SETTINGS

from simulator.errors import ConfigError
from simulator.features import DecorrelationConfig
from simulator.head import HeadConfig
from simulator.methods import Method, method, methods, streaming_methods
from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import ScenarioError
from simulator.unlearners import TrainingSet, create_unlearner, unlearner_class

#: The contract's fast settings with a stronger regulariser (one 2-row removal charges ~0.5% of
#: the budget) and the default decorrelation.
TINY = replace(SETTINGS, head=HeadConfig(lam=0.1), decorrelation=DecorrelationConfig())


def tiny_data(n: int = 200) -> TrainingSet:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    return TrainingSet(x, (x[:, 0] > 0).astype(np.int64), 2, groups=np.arange(n) % 3)


@pytest.mark.parametrize("m", methods(), ids=lambda m: m.name)
def test_run_runs_every_streaming_method_and_names_compare_for_the_others(
    m: Method, tmp_path: Path
) -> None:
    if not m.streams:
        with pytest.raises(ScenarioError, match="unlearnsim compare"):
            scenario(TEN_CLIENTS, f"method={m.name}")
        return
    sc = scenario(TEN_CLIENTS, f"method={m.name}")
    options = ReportingConfig(console=Console(quiet=True), progress=False, plots=False)
    result = run_scenario(sc, options, output_dir=tmp_path)
    end = result.final
    assert end["method"] == m.name
    assert end["requests"] == end["requests_applied"] + end["requests_rejected"] > 0
    batches = [
        json.loads(x)
        for x in (tmp_path / "events.jsonl").read_text().splitlines()
        if '"deletion_batch"' in x
    ]
    removing = [b for b in batches if b["samples"]]
    if m.removal == "retrain_head":  # every removal retrains, nothing is charged
        assert all(b["retrained"] and b["retrain_reason"] == "method" for b in removing)
        assert end["retrains_method"] == len(removing)
        assert end["epsilon_spent"] < 1e-6  # only the retrain's own training residual
    else:  # certified Newton steps, charged against the budget
        assert end["retrains_method"] == 0
        assert any(b["charged"] > 0 for b in removing)


@pytest.mark.parametrize("m", methods(), ids=lambda m: m.name)
def test_compare_builds_every_method_with_a_class_and_names_run_for_the_others(
    m: Method,
) -> None:
    if m.unlearner is None:
        with pytest.raises(ConfigError, match="compare takes"):
            m.unlearner_class()
        return
    assert unlearner_class(m.name).name == m.name


@pytest.mark.parametrize("name", ["cr", "decoremoval", "retrain_head"])
def test_compare_removes_as_run_does(name: str) -> None:
    """The compare classes of the streaming methods remove through ``Method.remove``."""
    assert name in streaming_methods()
    u = create_unlearner(name, TINY)
    u.fit(tiny_data(), seed=0)
    version = u.head.model_version
    outcome = u.remove([0, 1])
    assert outcome.retrained == (method(name).removal == "retrain_head")
    assert u.head.model_version == version + 1


def test_retrain_is_refused_by_run_with_its_new_name() -> None:
    with pytest.raises(ScenarioError, match="retrain_head"):
        scenario(TEN_CLIENTS, "method=retrain")
    with pytest.raises(ConfigError, match="compare"):
        method("sisa").remove(None, [1])  # type: ignore[arg-type]
