"""What a run accumulates from batch to batch, whatever feeds it (scenario stream, Kafka, Flower).

:class:`RunState` holds the ids forgotten so far, the batch count, the next reference
checkpoint, the last tick seen, the receipts answered per status and the retrains per reason.
:meth:`RunState.state_dict` / :meth:`RunState.from_state_dict` give a versioned plain dict (a
checkpoint writes it; the evaluation monitor is rebuilt, not saved).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simulator.errors import InputError

if TYPE_CHECKING:
    from simulator.runner.monitoring import RunMonitor

#: Version of :meth:`RunState.state_dict`'s layout.
STATE_VERSION = 1


@dataclass
class RunState:
    """The run's running totals (module docstring).

    ``evaluate``: run the scenario's evaluation schedule (utility, MIA, drift, references) on
    the batches; off only where a caller measures removal alone (tests, benchmarks).
    ``on_step``: told the name of each slow sub-step of a batch as it starts (``removal``,
    ``LiRA references``, ``evaluation``, ``reference retrain at N removals``) and ``""`` when
    the batch is done, e.g. to show it in a progress bar; never saved.
    """

    forgotten: list[int] = field(default_factory=list)
    batches: int = 0
    next_checkpoint: int = 0
    last_tick: int = 0
    answered: dict[str, int] = field(default_factory=dict)
    retrains: dict[str, int] = field(default_factory=dict)
    evaluate: bool = True
    monitor: RunMonitor | None = field(default=None, repr=False)
    on_step: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    def step(self, name: str) -> None:
        """Tell ``on_step`` that sub-step ``name`` starts (``""``: the batch is done)."""
        if self.on_step is not None:
            self.on_step(name)

    def count(self, status: str) -> int:
        """Requests answered with ``status`` so far."""
        return self.answered.get(status, 0)

    def state_dict(self) -> dict[str, Any]:
        """A plain, versioned copy of everything but the monitor."""
        return {
            "version": STATE_VERSION,
            "forgotten": list(self.forgotten),
            "batches": self.batches,
            "next_checkpoint": self.next_checkpoint,
            "last_tick": self.last_tick,
            "answered": dict(self.answered),
            "retrains": dict(self.retrains),
            "evaluate": self.evaluate,
        }

    @classmethod
    def from_state_dict(cls, saved: dict[str, Any]) -> RunState:
        """The state :meth:`state_dict` wrote (any version up to :data:`STATE_VERSION`).

        Raises
        ------
        InputError
            The dict was written by a newer version.
        """
        version = int(saved.get("version", 1))
        if version > STATE_VERSION:
            raise InputError(f"run state version {version} is newer than {STATE_VERSION}")
        return cls(
            forgotten=[int(i) for i in saved.get("forgotten", [])],
            batches=int(saved.get("batches", 0)),
            next_checkpoint=int(saved.get("next_checkpoint", 0)),
            last_tick=int(saved.get("last_tick", 0)),
            answered={str(k): int(v) for k, v in saved.get("answered", {}).items()},
            retrains={str(k): int(v) for k, v in saved.get("retrains", {}).items()},
            evaluate=bool(saved.get("evaluate", True)),
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the monitor (it holds the whole federation)."""
        return self.state_dict()

    def __setstate__(self, saved: dict[str, Any]) -> None:
        self.__dict__.update(RunState.from_state_dict(saved).__dict__)
