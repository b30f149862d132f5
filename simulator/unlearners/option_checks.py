"""Checks of a method's options, with the ``method.option`` location every error names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulator.errors import ConfigError


def _check(
    options: Any, method: str, names: tuple[str, ...], test: Callable[[Any], bool], rule: str
) -> None:
    for name in names:
        value = getattr(options, name)
        if not test(value):
            raise ConfigError(f"must be {rule}, got {value}", f"{method}.{name}")


def require_positive(options: Any, method: str, *names: str) -> None:
    """Raise a :class:`~simulator.errors.ConfigError` unless every named option is ``> 0``."""
    _check(options, method, names, lambda v: v > 0, "> 0")


def require_non_negative(options: Any, method: str, *names: str) -> None:
    """Raise a :class:`~simulator.errors.ConfigError` unless every named option is ``>= 0``."""
    _check(options, method, names, lambda v: v >= 0, ">= 0")


def require_positive_int(options: Any, method: str, *names: str) -> None:
    """Raise a :class:`~simulator.errors.ConfigError` unless every named option is an int >= 1.

    Booleans are refused, though Python counts them as integers.
    """
    for name in names:
        value = getattr(options, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"must be a positive integer, got {value!r}", f"{method}.{name}")
