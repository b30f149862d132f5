"""Compare classes by method name, on top of the one registry (:mod:`simulator.methods`).

``register_unlearner(name, cls)`` registers a compare-only :class:`~simulator.methods.Method`
(like opacus' accountant registry) and refuses a name that is taken unless ``force=True``;
``create_unlearner(name, settings, **options)`` builds one, turning ``options`` into the class's
frozen options dataclass and naming unknown method names or option keys in a
:class:`~simulator.errors.ConfigError`.
"""

from __future__ import annotations

from typing import Any

from simulator.errors import ConfigError
from simulator.methods import Method, compare_methods, method, register_method, unregister_method
from simulator.unlearners.base import BaseUnlearner, ModelConfig, options_from_mapping


def register_unlearner(name: str, cls: type[BaseUnlearner[Any]], *, force: bool = False) -> None:
    """Register ``cls`` under ``name`` as a compare-only method.

    Raises
    ------
    ConfigError
        ``name`` is empty, or already registered to another class and ``force`` is False.
    """
    summary = getattr(cls, "guarantee", "") or cls.__name__
    try:
        current = method(name)
    except ConfigError:
        current = None
    if current is not None and not force:
        if current.unlearner_class() is cls:
            return
        raise ConfigError(
            f"{name!r} is already registered to {current.unlearner_class().__name__}; pass "
            "force=True to replace it",
            "method",
        )
    removal = current.removal if current is not None else None
    register_method(Method(name, summary, removal, cls), force=force)


def unregister_unlearner(name: str) -> None:
    """Remove ``name`` from the registry (no error when it is not there)."""
    unregister_method(name)


def registered_unlearners() -> tuple[str, ...]:
    """Names of every method ``compare`` can train, in registration order."""
    return compare_methods()


def unlearner_class(name: str) -> type[BaseUnlearner[Any]]:
    """The compare class registered under ``name``."""
    try:
        found = method(name)
    except ConfigError:
        known = ", ".join(compare_methods()) or "none"
        raise ConfigError(f"unknown method {name!r}; registered: {known}", "method") from None
    cls: type[BaseUnlearner[Any]] = found.unlearner_class()
    return cls


def create_unlearner(
    name: str, settings: ModelConfig | None = None, **options: Any
) -> BaseUnlearner[Any]:
    """A new, unfitted unlearner of method ``name`` with the given method options."""
    cls = unlearner_class(name)
    opts = options_from_mapping(cls.options_type, options, f"methods.{name}")
    return cls(settings, opts)
