"""Unlearning methods by name (like opacus' accountant registry).

``register_unlearner(name, cls)`` maps a scenario's method name to an :class:`Unlearner` class
and refuses a name that is taken unless ``force=True``; ``create_unlearner(name, settings,
**options)`` builds one, turning ``options`` into the class's frozen options dataclass and
naming unknown method names or option keys in a :class:`~simulator.errors.ConfigError`.
"""

from __future__ import annotations

from typing import Any

from simulator.errors import ConfigError
from simulator.unlearners.base import BaseUnlearner, ModelSettings, options_from_mapping

_REGISTRY: dict[str, type[BaseUnlearner[Any]]] = {}


def register_unlearner(name: str, cls: type[BaseUnlearner[Any]], *, force: bool = False) -> None:
    """Register ``cls`` under ``name``.

    Raises
    ------
    ConfigError
        ``name`` is empty, or already registered to another class and ``force`` is False.
    """
    if not name or not name.replace("_", "").isalnum():
        raise ConfigError(f"a method name is letters, digits and _, got {name!r}", "method")
    current = _REGISTRY.get(name)
    if current is not None and current is not cls and not force:
        raise ConfigError(
            f"{name!r} is already registered to {current.__name__}; pass force=True to replace it",
            "method",
        )
    _REGISTRY[name] = cls


def unregister_unlearner(name: str) -> None:
    """Remove ``name`` from the registry (no error when it is not there)."""
    _REGISTRY.pop(name, None)


def registered_unlearners() -> tuple[str, ...]:
    """Names of every registered method, in registration order."""
    return tuple(_REGISTRY)


def unlearner_class(name: str) -> type[BaseUnlearner[Any]]:
    """The class registered under ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(_REGISTRY) or "none"
        raise ConfigError(f"unknown method {name!r}; registered: {known}", "method") from None


def create_unlearner(
    name: str, settings: ModelSettings | None = None, **options: Any
) -> BaseUnlearner[Any]:
    """A new, unfitted unlearner of method ``name`` with the given method options."""
    cls = unlearner_class(name)
    opts = options_from_mapping(cls.options_type, options, f"methods.{name}")
    return cls(settings, opts)
