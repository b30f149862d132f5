"""Plumbing shared by the scenario models: the strict base class and cross-field checks.

Every section is a frozen pydantic model that forbids unknown keys and coerces
nothing (an ``int`` is still accepted where a ``float`` is expected).

Pydantic reports a model validator's error at the model's own location. The
scenario models instead collect each cross-field problem together with the
path (relative to the model) of the key that is wrong, and raise them all at
once; :mod:`simulator.scenario.problems` turns them into one line per problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

#: Error type used for the collected problems (see ``problems.py``).
CHECK_ERROR_TYPE = "scenario_check"

_NO_VALUE = object()

Loc = tuple[str | int, ...]


class Section(BaseModel):
    """Base of every scenario model: strict, frozen, unknown keys are errors.

    ``retired_keys`` maps keys that earlier versions accepted to what replaced them, so an old
    scenario gets that explanation instead of "extra inputs are not permitted".
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)
    retired_keys: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _no_retired_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.retired_keys:
            checks = Checks()
            for key, why in cls.retired_keys.items():
                if key in data:
                    checks.add((key,), why)
            checks.raise_if_any()
        return data


@dataclass
class Checks:
    """Collector of cross-field problems for one model validator.

    Examples
    --------
    >>> checks = Checks()
    >>> checks.add(("target", "client"), "needs target.client", got=None)
    >>> len(checks.problems)
    1
    """

    problems: list[tuple[Loc, str]] = field(default_factory=list)

    def add(self, loc: Loc, message: str, *, got: object = _NO_VALUE) -> None:
        """Record that the key at ``loc`` is wrong; ``got`` is shown when given."""
        if got is not _NO_VALUE:
            message = f"{message}, got {show_value(got)}"
        self.problems.append((loc, message))

    def raise_if_any(self) -> None:
        """Raise one pydantic error that carries every recorded problem."""
        if not self.problems:
            return
        summary = "; ".join(".".join(map(str, loc)) + ": " + msg for loc, msg in self.problems)
        raise PydanticCustomError(
            CHECK_ERROR_TYPE,
            "{summary}",
            {"summary": summary, "problems": list(self.problems)},
        )


def show_value(value: object, limit: int = 60) -> str:
    """A short ``repr`` of a user value for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
