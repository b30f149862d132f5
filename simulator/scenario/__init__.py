"""Scenario files: the pydantic models of one experiment, YAML loading, overrides and errors.

One YAML file describes one experiment (data, partition, learner, certificate,
deletion stream, shifts, evaluation, transport); ``docs/scenarios.md`` is the
reference of every key. Typical use::

    scenario = load_scenario("scenarios/quickstart.yaml", ["stream.phases.0.rate=5"])
    scenario.check_against(num_classes=10)  # once the data is loaded
    Path(out, "resolved_scenario.yaml").write_text(scenario_to_yaml(scenario))
"""

from simulator.scenario.conditions_spec import EvaluationSpec, OODSpec, ShiftSpec
from simulator.scenario.data_spec import (
    IMAGE_SOURCES,
    TEXT_SOURCES,
    DataSource,
    DataSpec,
    PartitionSpec,
    SyntheticSpec,
    TextSpec,
)
from simulator.scenario.learning_spec import DecorrelationSpec, HeadSpec, ModelSpec, RFFSpec
from simulator.scenario.loader import (
    ValidationResult,
    load_scenario,
    parse_scenario,
    scenario_to_yaml,
    validate_files,
)
from simulator.scenario.overrides import apply_overrides
from simulator.scenario.problems import Problem, ScenarioError
from simulator.scenario.scenario_model import KNOWN_METHODS, Scenario
from simulator.scenario.stream_spec import Burst, Phase, StreamSpec, Target, Withdrawal

__all__ = [
    "IMAGE_SOURCES",
    "KNOWN_METHODS",
    "TEXT_SOURCES",
    "Burst",
    "DataSource",
    "DataSpec",
    "DecorrelationSpec",
    "EvaluationSpec",
    "HeadSpec",
    "ModelSpec",
    "OODSpec",
    "PartitionSpec",
    "Phase",
    "Problem",
    "RFFSpec",
    "Scenario",
    "ScenarioError",
    "ShiftSpec",
    "StreamSpec",
    "SyntheticSpec",
    "Target",
    "TextSpec",
    "ValidationResult",
    "Withdrawal",
    "apply_overrides",
    "load_scenario",
    "parse_scenario",
    "scenario_to_yaml",
    "validate_files",
]
