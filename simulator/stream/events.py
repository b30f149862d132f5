"""Deletion stream events: requests in, receipts out (JSON on the wire, versioned).

The same models serve the in-process scenario stream and the Kafka topics: a
request names either sample ids or a whole client (client-level removal); a
receipt says what became of it. ``schema_version`` lets consumers reject
messages of a version they do not understand.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.errors import InputError
from simulator.head.config import Accounting

#: Time of tick 0 of every generated stream.
STREAM_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
#: Longest request id and subject accepted (characters): ids are kept in the ledger.
MAX_ID_CHARS = 256
#: Most sample ids one request may name.
MAX_SAMPLE_IDS = 100_000
#: Largest sample id, client id or tick accepted (ids are 64-bit integers downstream).
MAX_INDEX = 2**62

SampleId = Annotated[int, Field(ge=0, le=MAX_INDEX)]


class _Event(BaseModel):
    """Strict, frozen, versioned base of the wire events."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    schema_version: Literal[1] = Field(default=1, description="Version of the event schema.")

    def to_json(self) -> bytes:
        """UTF-8 JSON encoding of the event."""
        return self.model_dump_json().encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode and validate one event.

        Raises
        ------
        InputError
            When ``data`` is not JSON, not of this schema, or violates a rule;
            the message lists the offending fields (for a dead-letter reason).
        """
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            parts = [
                f"{'.'.join(str(p) for p in err['loc']) or '<event>'}: {err['msg']}"
                for err in exc.errors(include_url=False)[:5]
            ]
            raise InputError(f"malformed {cls.__name__}: " + "; ".join(parts)) from exc


class DeletionRequest(_Event):
    """Delete some samples, or a whole client, from the model.

    Exactly one of ``sample_ids`` (non-empty, no duplicates) and ``client_id``
    is given.
    """

    request_id: str = Field(
        min_length=1, max_length=MAX_ID_CHARS, description="Unique id; the ledger key."
    )
    subject: str = Field(
        min_length=1, max_length=MAX_ID_CHARS, description="Who asked (data subject or client)."
    )
    sample_ids: list[SampleId] | None = Field(
        default=None, max_length=MAX_SAMPLE_IDS, description="Global sample ids to delete."
    )
    client_id: int | None = Field(
        default=None, ge=0, le=MAX_INDEX, description="Client whose whole shard goes."
    )
    requested_at: AwareDatetime = Field(description="When the request was made.")
    tick: int = Field(
        default=0, ge=0, le=MAX_INDEX, description="Scenario tick (0 for outside requests)."
    )

    @model_validator(mode="after")
    def _one_target(self) -> DeletionRequest:
        if (self.sample_ids is None) == (self.client_id is None):
            raise ValueError("give exactly one of sample_ids and client_id")
        ids = self.sample_ids
        if ids is not None:
            if not ids:
                raise ValueError("sample_ids should not be empty")
            if len(set(ids)) != len(ids):
                raise ValueError("sample_ids should not repeat an id")
        return self

    @property
    def is_client_removal(self) -> bool:
        """Whether the request withdraws a whole client."""
        return self.client_id is not None


class DeletionReceipt(_Event):
    """What happened to a request: applied, a duplicate of an applied one, or rejected."""

    request_id: str = Field(min_length=1, description="Id of the request answered.")
    status: Literal["applied", "duplicate", "rejected"] = Field(description="Outcome.")
    reason: str | None = Field(default=None, description="Why it was rejected (required then).")
    model_version: int = Field(ge=0, description="Head version after the request.")
    residual: float | None = Field(default=None, ge=0, description="Gradient residual charged.")
    epsilon_spent: float | None = Field(
        default=None,
        ge=0,
        description="Epsilon of the released head's certificate: c * charge / sigma (the "
        "charge of head.accounting; it drops at a retrain, and under anchored at an exact pass).",
    )
    accounting: Accounting | None = Field(
        default=None, description="What the certificate charges (head.accounting)."
    )
    delta: float | None = Field(
        default=None, gt=0, lt=1, description="The delta epsilon_spent holds with."
    )
    scope: Literal["head", "whole_model"] | None = Field(
        default=None,
        description="What the certificate covers: the linear head only (extractor_data "
        "private, or a dp group too large for its delta) or the whole model (public: nothing "
        "before the head saw a client's row; dp: a DP-SGD extractor).",
    )
    total_epsilon_spent: float | None = Field(
        default=None,
        ge=0,
        description="Epsilon of the whole model: epsilon_spent plus the extractor's group "
        "epsilon for the request's rows (0 for a public extractor); null under scope head.",
    )
    total_delta: float | None = Field(
        default=None, gt=0, lt=1, description="The delta total_epsilon_spent holds with."
    )
    scope_reason: str | None = Field(
        default=None,
        description="Under scope head: why the whole model is not covered and the setting that "
        "would cover it (one line, simulator.head.scope); null under scope whole_model.",
    )
    applied_at: AwareDatetime = Field(description="When the outcome was decided.")

    @model_validator(mode="after")
    def _reason_when_rejected(self) -> DeletionReceipt:
        if self.status == "rejected" and not self.reason:
            raise ValueError("a rejected receipt needs a reason")
        return self
