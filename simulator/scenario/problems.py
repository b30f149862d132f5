"""Turning validation failures into one readable line per problem.

Each line reads ``<file>:<line>: <dotted.path>: <what is expected>, got <value>``;
for a value given with ``--set`` the origin is ``--set`` instead of a file line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from simulator.errors import ConfigError
from simulator.scenario._base import CHECK_ERROR_TYPE, show_value
from simulator.scenario.schema import Path, allowed_keys, clean_loc, dotted, resolve


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a scenario.

    Attributes
    ----------
    path
        Dotted YAML path of the offending key (``""`` for the whole document).
    message
        What is expected and what was found.
    origin
        Where the value came from: ``file:line``, ``file`` or ``--set``.
    """

    path: str
    message: str
    origin: str = ""

    def __str__(self) -> str:
        where = f"{self.origin}: " if self.origin else ""
        return f"{where}{self.path}: {self.message}" if self.path else f"{where}{self.message}"


class ScenarioError(ConfigError):
    """A scenario failed validation; ``problems`` lists every problem found.

    ``location`` is the dotted path of the first problem; ``str(error)`` has one
    line per problem.
    """

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems) or "invalid scenario")
        self.location = self.problems[0].path if self.problems else None


def _expectation(error: Any) -> str:
    """Pydantic's message rephrased as an expectation (``Input should be`` -> ``should be``)."""
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Input "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg


def problems_from_validation(root: type[BaseModel], error: ValidationError) -> list[Problem]:
    """Problems (without origin) of a pydantic ``error`` raised while validating ``root``."""
    merged: dict[Path, list[str]] = {}
    values: dict[Path, str] = {}
    for item in error.errors(include_url=False):
        loc = clean_loc(root, tuple(item["loc"]))
        if item["type"] == CHECK_ERROR_TYPE:
            for rel, message in item["ctx"]["problems"]:
                merged.setdefault((*loc, *rel), []).append(message)
            continue
        if item["type"] == "extra_forbidden":
            parent, _ = resolve(root, loc[:-1])
            allowed = ", ".join(allowed_keys(parent))
            merged.setdefault(loc, []).append(f"unknown key '{loc[-1]}' (allowed: {allowed})")
            continue
        if item["type"] == "missing":
            merged.setdefault(loc, []).append("required key missing")
            continue
        expectation = _expectation(item)
        messages = merged.setdefault(loc, [])
        if expectation not in messages:
            messages.append(expectation)
        values[loc] = show_value(item["input"])
    problems = []
    for loc, messages in merged.items():
        text = " or ".join(messages)
        if loc in values:
            text += f", got {values[loc]}"
        problems.append(Problem(dotted(loc), text))
    return problems


def locate(problems: Iterable[Problem], line_of: Callable[[str], str]) -> list[Problem]:
    """Attach an origin to each problem; ``line_of(dotted_path)`` gives ``file:line``."""
    return [Problem(p.path, p.message, line_of(p.path)) for p in problems]
