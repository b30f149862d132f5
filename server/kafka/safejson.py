"""A bounded JSON parse for bytes from anyone: nothing in the input can crash the reader.

:func:`parse_bounded` accepts strict UTF-8 JSON (RFC 8259) with limits a hostile record cannot
get past: the nesting depth is measured *before* parsing (so a record of 100,000 ``[`` costs
one linear scan, never a ``RecursionError``), numbers longer than ``max_number_chars`` and
non-finite numbers (``NaN``, ``Infinity``, ``1e999``) are refused, and so is an object that
repeats a key (two parsers could disagree about which value counts). Every refusal is an
:class:`UnsafeJSONError` that says what was wrong; the caller also bounds the input size.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

#: Deepest nesting of arrays and objects accepted (a request needs 2).
MAX_DEPTH = 16
#: Longest number literal accepted, in characters (a 64-bit id has 20 digits).
MAX_NUMBER_CHARS = 32

#: A JSON string literal (escapes included); what is left outside them is structure.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


class UnsafeJSONError(ValueError):
    """The bytes are not JSON this reader accepts (the message says why)."""


def nesting_depth(value: bytes) -> int:
    """Deepest nesting of ``[``/``{`` outside string literals (linear, no recursion)."""
    openers = value.count(b"[") + value.count(b"{")
    if openers <= 1:  # the common case, and the cheap one
        return openers
    structure = np.frombuffer(_STRING.sub(b'""', value), dtype=np.uint8)
    steps = np.zeros(structure.shape, dtype=np.int64)
    steps[(structure == ord("[")) | (structure == ord("{"))] = 1
    steps[(structure == ord("]")) | (structure == ord("}"))] = -1
    return int(np.cumsum(steps).max(initial=0))


def _refuse_constant(name: str) -> Any:
    raise UnsafeJSONError(f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise UnsafeJSONError(f"number with {len(text)} digits (at most {MAX_NUMBER_CHARS})")
    return int(text)


def _finite_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise UnsafeJSONError(f"number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    number = float(text)
    if not math.isfinite(number):
        raise UnsafeJSONError(f"number {text} is out of range")
    return number


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, val in pairs:
        if key in out:
            raise UnsafeJSONError(f"duplicate key {key[:80]!r} in an object")
        out[key] = val
    return out


def parse_bounded(value: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in ``value``, or :class:`UnsafeJSONError` saying why it is refused.

    Refused: bytes that are not UTF-8, nesting deeper than ``max_depth``, ``NaN`` /
    ``Infinity`` / out-of-range floats, number literals over ``MAX_NUMBER_CHARS`` characters,
    repeated keys in an object, lone surrogate escapes, anything that is not one JSON text.
    """
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeJSONError(f"not UTF-8: {exc}") from None
    few = value.count(b"[") + value.count(b"{") <= max_depth  # then no deeper than that
    depth = 0 if few else nesting_depth(value)
    if depth > max_depth:
        raise UnsafeJSONError(f"nested {depth} levels deep (at most {max_depth})")
    try:
        parsed = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except UnsafeJSONError:
        raise
    except ValueError as exc:  # json.JSONDecodeError: not JSON
        raise UnsafeJSONError(f"not JSON: {exc}") from None
    _check_strings(parsed)
    return parsed


def _check_strings(node: Any) -> None:
    r"""Refuse strings that cannot be encoded back to UTF-8.

    A lone surrogate escape such as ``"\ud800"`` is valid JSON syntax, but no character.
    Depth is already bounded.
    """
    if isinstance(node, str):
        try:
            node.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UnsafeJSONError(f"string with a lone surrogate escape: {exc}") from None
    elif isinstance(node, dict):
        for key, val in node.items():
            _check_strings(key)
            _check_strings(val)
    elif isinstance(node, list):
        for item in node:
            _check_strings(item)
