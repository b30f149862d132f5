"""The deletion stream section: phases of Poisson request arrivals, bursts and withdrawals.

Time is counted in ticks. Phases run one after the other; in each tick of a
phase the number of requests is Poisson(``rate``), plus ``burst.size`` on every
``burst.every``-th tick of the phase. ``simulator.stream.generator`` turns this
into concrete :class:`~simulator.stream.events.DeletionRequest` events.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from simulator.scenario._base import (
    MAX_CLIENTS,
    MAX_REQUESTS_PER_TICK,
    MAX_TICKS,
    Checks,
    Loc,
    Rows,
    Section,
    TickSeconds,
)


class Target(Section):
    """Which retained samples a phase deletes from."""

    kind: Literal["random", "class", "client"] = Field(
        default="random", description="random: any sample; class: one label; client: one client."
    )
    class_id: int | None = Field(
        default=None, ge=0, description="Label to delete from (kind class; original label)."
    )
    client: int | None = Field(
        default=None, ge=0, description="Client to delete from (kind client)."
    )

    @model_validator(mode="after")
    def _fields_match_kind(self) -> Target:
        checks = Checks()
        if self.kind == "class" and self.class_id is None:
            checks.add(("class_id",), "target kind 'class' needs class_id, got nothing")
        if self.kind != "class" and self.class_id is not None:
            checks.add(("class_id",), f"only for kind 'class', kind is '{self.kind}'")
        if self.kind == "client" and self.client is None:
            checks.add(("client",), "target kind 'client' needs client, got nothing")
        if self.kind != "client" and self.client is not None:
            checks.add(("client",), f"only for kind 'client', kind is '{self.kind}'")
        checks.raise_if_any()
        return self


class Burst(Section):
    """Extra requests on every ``every``-th tick of a phase (ticks 0, every, 2 every, ...)."""

    every: int = Field(ge=1, le=MAX_TICKS, description="Period in ticks.")
    size: int = Field(ge=1, le=MAX_REQUESTS_PER_TICK, description="Extra requests on a burst tick.")


class Phase(Section):
    """A stretch of ticks with one arrival rate and one target."""

    name: str = Field(min_length=1, description="Label of the phase (unique).")
    ticks: int = Field(ge=1, le=MAX_TICKS, description="Length in ticks.")
    rate: float = Field(
        ge=0, le=MAX_REQUESTS_PER_TICK, description="Mean requests per tick (Poisson)."
    )
    samples_per_request: Rows = Field(default=1, description="Sample ids named by one request.")
    target: Target = Field(default=Target(), description="Which samples are deleted.")
    burst: Burst | None = Field(default=None, description="Periodic extra requests.")


class Withdrawal(Section):
    """A whole client leaves the federation at a tick (client-level removal)."""

    client: int = Field(ge=0, le=MAX_CLIENTS, description="Client index.")
    at: int = Field(ge=0, le=MAX_TICKS, description="Tick of the withdrawal.")


class StreamSpec(Section):
    """Where deletion requests come from and how they are timed and batched."""

    source: Literal["scenario", "kafka"] = Field(
        default="scenario",
        description="scenario: generated in-process from phases; kafka: read from a topic.",
    )
    tick_seconds: TickSeconds = Field(
        default=1.0, description="Simulated seconds per tick (timestamps of requests)."
    )
    max_batch_requests: Rows = Field(
        default=100, description="Most requests applied as one deletion batch."
    )
    rows_per_subject: Rows = Field(
        default=16,
        description="Rows of one data subject (a client's rows in id order, cut into groups); "
        "a request deletes rows of one subject.",
    )
    phases: list[Phase] = Field(min_length=1, description="Phases, in order.")
    withdrawals: list[Withdrawal] = Field(default=[], description="Client withdrawals.")

    @model_validator(mode="after")
    def _consistent(self) -> StreamSpec:
        checks = Checks()
        seen_names: set[str] = set()
        for i, phase in enumerate(self.phases):
            if phase.name in seen_names:
                checks.add(("phases", i, "name"), "should be unique", got=phase.name)
            seen_names.add(phase.name)
            if phase.samples_per_request > self.rows_per_subject:
                checks.add(
                    ("phases", i, "samples_per_request"),
                    f"a request deletes rows of one subject: at most rows_per_subject "
                    f"({self.rows_per_subject})",
                    got=phase.samples_per_request,
                )
        seen_clients: set[int] = set()
        for i, withdrawal in enumerate(self.withdrawals):
            self.check_tick(checks, ("withdrawals", i, "at"), withdrawal.at)
            if withdrawal.client in seen_clients:
                checks.add(("withdrawals", i, "client"), "withdraws twice", got=withdrawal.client)
            seen_clients.add(withdrawal.client)
        checks.raise_if_any()
        return self

    def check_tick(self, checks: Checks, loc: Loc, tick: int) -> None:
        """Record a problem at ``loc`` unless ``tick`` is a tick of the stream."""
        if tick >= self.total_ticks:
            checks.add(loc, f"should be a tick of the stream (< {self.total_ticks})", got=tick)

    @property
    def total_ticks(self) -> int:
        """Number of ticks of all phases together."""
        return sum(phase.ticks for phase in self.phases)

    def phase_starts(self) -> list[int]:
        """First tick of every phase."""
        starts, tick = [], 0
        for phase in self.phases:
            starts.append(tick)
            tick += phase.ticks
        return starts

    def phase_at(self, tick: int) -> Phase:
        """The phase that contains ``tick`` (``0 <= tick < total_ticks``)."""
        if not 0 <= tick < self.total_ticks:
            raise IndexError(f"tick {tick} outside the stream (0..{self.total_ticks - 1})")
        for start, phase in zip(self.phase_starts(), self.phases, strict=True):
            if tick < start + phase.ticks:
                return phase
        raise AssertionError("unreachable")  # pragma: no cover
