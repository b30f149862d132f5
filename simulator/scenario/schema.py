"""Walking the scenario schema by YAML path (used for error messages and ``--set`` overrides).

A path is a tuple of mapping keys (``str``) and list indices (``int``), e.g.
``("stream", "phases", 0, "rate")``; its dotted form is ``stream.phases.0.rate``.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

Path = tuple[str | int, ...]


def dotted(path: Path) -> str:
    """``("stream", "phases", 0, "rate")`` -> ``"stream.phases.0.rate"``."""
    return ".".join(str(part) for part in path)


def _members(annotation: Any) -> list[Any]:
    """The alternatives of a (possibly ``Annotated`` / optional) type, without ``None``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [] if annotation is type(None) else [annotation]


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model among the alternatives of ``annotation``, if any."""
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def is_list(annotation: Any) -> bool:
    """Whether ``annotation`` (or one of its alternatives) is a ``list[...]``."""
    return any(get_origin(member) is list for member in _members(annotation))


def child(annotation: Any, key: str | int) -> Any | None:
    """Type found under ``key`` of a value of type ``annotation``; None if there is no such key."""
    for member in _members(annotation):
        is_model = isinstance(member, type) and issubclass(member, BaseModel)
        if isinstance(key, str) and is_model and key in member.model_fields:
            return member.model_fields[key].annotation
        if isinstance(key, int) and get_origin(member) is list:
            return get_args(member)[0]
    return None


def allowed_keys(annotation: Any) -> list[str]:
    """Keys a mapping of type ``annotation`` accepts (empty if it is not a model)."""
    model = model_of(annotation)
    return list(model.model_fields) if model is not None else []


def clean_loc(root: type[BaseModel], loc: Path) -> Path:
    """Drop pydantic's union-member tags (``'float'``, ``"literal['median']"``) from ``loc``.

    Keeps every element that is a real key or index of the schema, and keeps an
    element the schema does not know only when it is the last one (an unknown key).
    """
    kept: list[str | int] = []
    current: Any = root
    for i, part in enumerate(loc):
        nxt = child(current, part)
        if nxt is not None:
            kept.append(part)
            current = nxt
        elif i == len(loc) - 1 and model_of(current) is not None:
            kept.append(part)
    return tuple(kept)


def resolve(root: type[BaseModel], path: Path) -> tuple[Any, Path | None]:
    """Follow ``path`` through the schema.

    Returns
    -------
    annotation, bad_prefix
        The type at ``path`` (None when it does not exist) and, when it does not
        exist, the shortest prefix of ``path`` that leaves the schema.
    """
    current: Any = root
    for i, part in enumerate(path):
        nxt = child(current, part)
        if nxt is None:
            return None, path[: i + 1]
        current = nxt
    return current, None


def leaf_paths(root: type[BaseModel], prefix: Path = ()) -> list[Path]:
    """Every key path of the schema, lists written with index ``0`` (for documentation checks)."""
    paths: list[Path] = []
    for name, field in root.model_fields.items():
        path = (*prefix, name)
        paths.append(path)
        annotation: Any = field.annotation
        if is_list(annotation):
            item = child(annotation, 0)
            sub = model_of(item)
            if sub is not None:
                paths.extend(leaf_paths(sub, (*path, 0)))
            continue
        sub = model_of(annotation)
        if sub is not None:
            paths.extend(leaf_paths(sub, path))
    return paths
