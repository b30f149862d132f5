"""``--set dotted.path=value`` overrides applied to a raw scenario mapping before validation.

The value is parsed as YAML (``50`` is an int, ``0.5`` a float, ``true`` a
bool, ``[3, 8]`` a list, ``null`` None); list items are addressed by index
(``stream.phases.0.rate=50``). The path must exist in the schema (else an error
``--set: dotted.path: unknown key ...``, the origin every problem of an override names);
the result goes through the same validation as the file.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import yaml

from simulator.errors import ConfigError
from simulator.scenario.schema import Path, allowed_keys, dotted, is_list, resolve

#: Where an override's problems say they come from (as the schema problems of its values do).
ORIGIN = "--set"


def parse_override(text: str) -> tuple[Path, Any]:
    """Split ``"a.b.0.c=value"`` into ``(("a", "b", 0, "c"), value)``.

    Raises
    ------
    ConfigError
        When there is no ``=``, the path is empty, or the value is not valid YAML.
    """
    key, sep, value_text = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError("expected dotted.path=value", f"--set {text}")
    path: Path = tuple(int(part) if part.isdigit() else part for part in key.split("."))
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else ""
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        mark = getattr(exc, "problem_mark", None)
        where = f" at column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(
            f"value is not valid YAML ({problem}{where}; quote a string: {key}='...')",
            f"--set {key}",
        ) from exc
    return path, value


def _check_path(root: type[Any], path: Path) -> None:
    annotation, bad = resolve(root, path)
    if annotation is not None or bad is None:
        return
    parent, _ = resolve(root, bad[:-1])
    name = dotted(path)
    if isinstance(bad[-1], int) or is_list(parent):
        kind = "an index" if is_list(parent) else "a key"
        raise ConfigError(
            f"'{bad[-1]}' is not {kind} of {dotted(bad[:-1]) or 'the scenario'}",
            name,
            origin=ORIGIN,
        )
    allowed = ", ".join(allowed_keys(parent))
    raise ConfigError(f"unknown key '{bad[-1]}' (allowed: {allowed})", name, origin=ORIGIN)


def _set(node: Any, path: Path, value: Any, done: Path = ()) -> Any:
    """Return ``node`` with ``value`` stored at ``path`` (creating missing mappings)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    here = (*done, head)
    if isinstance(head, int):
        size = len(node) if isinstance(node, list) else 0
        if not isinstance(node, list) or head >= size:
            raise ConfigError(
                f"index {head} out of range (the list has {size} items)",
                dotted(here),
                origin=ORIGIN,
            )
        node[head] = _set(node[head], rest, value, here)
        return node
    if not isinstance(node, dict):
        node = {}
    node[head] = _set(node.get(head), rest, value, here)
    return node


def apply_overrides(
    raw: dict[str, Any], overrides: Sequence[str], *, root: type[Any] | None = None
) -> dict[str, Any]:
    """Return a copy of ``raw`` with every ``dotted.path=value`` override applied, in order.

    Parameters
    ----------
    raw
        The scenario mapping as read from YAML (not modified).
    overrides
        Strings such as ``"stream.phases.0.rate=50"``.
    root
        Schema to check paths against (defaults to :class:`Scenario`).

    Raises
    ------
    ConfigError
        For a malformed override, a path that is not in the schema, or a list
        index past the end of the list.
    """
    if root is None:
        from simulator.scenario.scenario_model import Scenario

        root = Scenario
    result = copy.deepcopy(raw)
    for text in overrides:
        path, value = parse_override(text)
        _check_path(root, path)
        result = _set(result, path, value)
    return result
