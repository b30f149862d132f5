"""Loading, validating and writing scenario files.

``load_scenario`` / ``parse_scenario`` read YAML, apply ``--set`` overrides and
validate; every problem becomes one line ``<file>:<line>: <path>: <message>``
in a :class:`~simulator.scenario.problems.ScenarioError`. ``scenario_to_yaml``
writes the fully resolved scenario (every default made explicit), which loads
back to an equal :class:`Scenario`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path as FilePath

import yaml
from pydantic import ValidationError

from simulator.errors import ConfigError
from simulator.scenario.overrides import apply_overrides, parse_override
from simulator.scenario.problems import ScenarioError, locate, problems_from_validation
from simulator.scenario.scenario_model import Scenario
from simulator.scenario.schema import Path, dotted
from simulator.scenario.yaml_source import parse_yaml


@dataclass(frozen=True)
class ValidationResult:
    """Outcome of validating one scenario file."""

    ok: bool
    path: str
    error: str | None = None


def _as_path(text: str) -> Path:
    return tuple(int(part) if part.isdigit() else part for part in text.split("."))


def parse_scenario(
    text: str, *, source: str = "<string>", overrides: Sequence[str] = ()
) -> Scenario:
    """Validate a scenario given as YAML text.

    Parameters
    ----------
    text
        The YAML document.
    source
        Name used in error messages (usually the file path).
    overrides
        ``dotted.path=value`` strings applied before validation.

    Raises
    ------
    ConfigError
        Malformed YAML, an empty document, a top level that is not a mapping or a
        bad override; :class:`ScenarioError` (a ConfigError) for schema problems.
    """
    document = parse_yaml(text, source)
    if document.data is None:
        raise ConfigError(
            "empty scenario: expected a mapping with at least 'name', 'data' and 'stream'", source
        )
    if not isinstance(document.data, dict):
        kind = type(document.data).__name__
        raise ConfigError(f"the top level should be a mapping of sections, got a {kind}", source)
    raw = apply_overrides(document.data, overrides)
    overridden = [dotted(parse_override(item)[0]) for item in overrides]
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        problems = problems_from_validation(Scenario, exc)

    def from_override(path: str) -> bool:
        return any(path == o or path.startswith(o + ".") for o in overridden)

    def line(path: str) -> int | None:
        return None if from_override(path) else document.line_of(_as_path(path))

    def origin(path: str) -> str:
        if from_override(path):
            return "--set"
        number = line(path)
        return f"{source}:{number}" if number is not None else source

    problems.sort(key=lambda p: (line(p.path) is None, line(p.path) or 0))
    raise ScenarioError(locate(problems, origin))


def load_scenario(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Scenario:
    """Read and validate the scenario file at ``path`` (see :func:`parse_scenario`).

    Raises
    ------
    ConfigError
        When the file cannot be read or the scenario is invalid.
    """
    try:
        text = FilePath(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read scenario: {exc}", str(path)) from exc
    return parse_scenario(text, source=str(path), overrides=overrides)


def validate_files(paths: Iterable[str | os.PathLike[str]]) -> list[ValidationResult]:
    """Validate several scenario files; one result per file, never raising for a bad file."""
    results = []
    for path in paths:
        try:
            load_scenario(path)
        except ConfigError as exc:
            results.append(ValidationResult(False, str(path), str(exc)))
        else:
            results.append(ValidationResult(True, str(path)))
    return results


def scenario_to_yaml(scenario: Scenario) -> str:
    """The resolved scenario as YAML (all defaults explicit, ``{name}`` expanded)."""
    header = f"# Resolved scenario '{scenario.name}' (unlearnsim): every default made explicit.\n"
    body = yaml.safe_dump(
        scenario.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=100
    )
    return header + body
