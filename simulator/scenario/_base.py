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
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

#: Error type used for the collected problems (see ``problems.py``).
CHECK_ERROR_TYPE = "scenario_check"

_NO_VALUE = object()

Loc = tuple[str | int, ...]

# Upper bounds of every size in the schema. They are far above what any machine can run (the
# pre-flight estimate, ``simulator/scenario/preflight.py``, refuses what does not fit *this*
# machine); they exist so that no validation step, estimate or loop ever meets a number so
# large that it hangs or overflows (``n_classes: 10**18`` used to hang ``validate``).
#: Rows of a data set, a batch or a sample (10^9).
MAX_ROWS = 10**9
#: Widths: input features, RFF features, hidden layers, vocabulary, sequence length (10^7).
MAX_WIDTH = 10**7
#: Classes of a synthetic task (10^5).
MAX_CLASSES = 10**5
#: Federated clients (10^5).
MAX_CLIENTS = 10**5
#: Attention heads, layers, RFF functions per column (10^4).
MAX_LAYERS = 10**4
#: Rounds, epochs, optimiser steps, batches between evaluations (10^7).
MAX_ITERATIONS = 10**7
#: Ticks of the deletion stream (10^8).
MAX_TICKS = 10**8
#: Deletion requests arriving in one tick (10^6).
MAX_REQUESTS_PER_TICK = 10**6
#: Simulated seconds of one tick (one year).
MAX_TICK_SECONDS = 365 * 24 * 3600
#: Real-valued scales: learning rates, noise, regularisation, sigma, epsilon (10^12).
MAX_SCALE = 1e12
#: Any other integer (seeds, class ids, checkpoints): beyond this it is not a real setting.
MAX_INT = 2**53

# The bounded kinds of setting, each bound written once (a field adds its default and text).
#: A width: features, hidden units, vocabulary, sequence length (1 .. MAX_WIDTH).
Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]
#: Simulated seconds of one tick (0 < x <= MAX_TICK_SECONDS).
TickSeconds = Annotated[float, Field(gt=0, le=MAX_TICK_SECONDS)]
#: A number of rows, samples or requests (1 .. MAX_ROWS).
Rows = Annotated[int, Field(ge=1, le=MAX_ROWS)]
#: Rounds, steps or batches, possibly none (0 .. MAX_ITERATIONS).
Iterations = Annotated[int, Field(ge=0, le=MAX_ITERATIONS)]
#: Epochs or a cadence, at least one (1 .. MAX_ITERATIONS).
PositiveIterations = Annotated[int, Field(ge=1, le=MAX_ITERATIONS)]
#: Attention heads, layers, functions per column (1 .. MAX_LAYERS).
Layers = Annotated[int, Field(ge=1, le=MAX_LAYERS)]
#: A positive real scale: learning rates, regularisation, sigma, epsilon (0 < x <= MAX_SCALE).
PositiveScale = Annotated[float, Field(gt=0, le=MAX_SCALE)]
#: A real scale that may be zero: noise, penalties, severities (0 <= x <= MAX_SCALE).
NonNegativeScale = Annotated[float, Field(ge=0, le=MAX_SCALE)]


def _too_large(value: Any) -> bool:
    """Whether ``value`` (or an item of a list) is an integer beyond :data:`MAX_INT`."""
    if isinstance(value, list):
        return any(_too_large(item) for item in value)
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT


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

    @field_validator("*", mode="after")
    @classmethod
    def _bounded_integers(cls, value: Any) -> Any:
        if _too_large(value):
            raise ValueError(f"integers should be at most 2**53 in magnitude (about {MAX_INT:.1e})")
        return value


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


def refuse(loc: Loc, message: str, *, got: object = _NO_VALUE) -> None:
    """Raise the one problem of a validator that checks a single thing (see :class:`Checks`)."""
    checks = Checks()
    checks.add(loc, message, got=got)
    checks.raise_if_any()


def show_value(value: object, limit: int = 60) -> str:
    """A short ``repr`` of a user value for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
