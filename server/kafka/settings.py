"""Settings of one consuming session, as plain values (light: no Kafka client imported).

The same settings come from ``unlearnsim run --stream kafka``'s options
(:func:`server.kafka.launch.stream_from_args`) and from a Flower run config's ``kafka-*`` keys
(:class:`server.flower.settings.RunSettings`); :func:`server.kafka.launch.consumer_config` turns
them into the consumer's configuration.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

#: What to do when the requests log no longer holds what the checkpoint expects.
OffsetGap = Literal["fail", "replay", "skip"]
OFFSET_GAP_POLICIES: tuple[str, ...] = get_args(OffsetGap)
#: Kafka's usual port, where ``unlearnsim broker start`` listens unless told otherwise.
KAFKA_PORT = 9092
#: Tansu's in-memory storage, the bundled broker's default (lost when it stops).
MEMORY_STORAGE = "memory://tansu/"
#: Partitions of a new requests topic: one, so that requests are applied in the order sent.
REQUEST_PARTITIONS = 1


class ConsumerSettings(BaseModel):
    """Where the ServerApp takes deletion requests from (run-config keys ``kafka-*``).

    An empty ``bootstrap`` means the scenario's own generated stream; otherwise the ServerApp
    consumes the Kafka requests topic (:mod:`server.kafka.session`) with these settings, the
    same as ``unlearnsim run --stream kafka``'s options. ``idle_timeout`` 0 means no timeout.
    Authorisation (docs/security.md): ``ownership`` enforces the subject registry; a signing
    key (``signing_key_file``, else the variable ``signing_key_env``, else
    ``$UNLEARNSIM_SIGNING_KEY``) requires signed requests; ``subject_rate_limit`` requests per
    subject per ``subject_rate_window`` seconds (0: no limit).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str = ""
    requests_topic: str = "deletion-requests"
    receipts_topic: str = "deletion-receipts"
    dead_letter_topic: str = "deletion-dead-letters"
    group: str = "unlearnsim"
    #: most requests in one certified removal; 0: the scenario's ``stream.max_batch_requests``
    max_batch_requests: int = Field(default=0, ge=0)
    max_wait: float = Field(default=0.2, ge=0)
    idle_timeout: float = Field(default=0.0, ge=0)
    state_dir: str = ""
    ownership: bool = True
    signing_key_env: str = ""
    signing_key_file: str = ""
    subject_rate_limit: int = Field(default=60, ge=0)
    subject_rate_window: float = Field(default=3600.0, gt=0)
    on_offset_gap: OffsetGap = "fail"
    min_removal_batch: int = Field(default=1, ge=1)
    #: a full checkpoint every N batches; the batches between are journaled (docs/stream.md)
    snapshot_every: int = Field(default=10, ge=1)
    ready_file: str = ""

    @property
    def enabled(self) -> bool:
        """Whether Kafka is configured (a bootstrap address is set)."""
        return bool(self.bootstrap)


def consumer_default(name: str) -> Any:
    """The default of the setting ``name``: the one place a Kafka default is written.

    The command-line options (:mod:`server.kafka.options`), :class:`~server.kafka.topics.Topics`
    and :class:`~server.kafka.batcher.BatchConfig` take their defaults from here.
    """
    return ConsumerSettings.model_fields[name].default
