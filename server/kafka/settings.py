"""Settings of one consuming session, as plain values (light: no Kafka client imported).

The same settings come from ``unlearnsim run --stream kafka``'s options
(:func:`server.kafka.cli.stream_from_args`) and from a Flower run config's ``kafka-*`` keys
(:class:`server.flower.settings.RunConfig`); :func:`server.kafka.cli.consumer_config` turns
them into the consumer's configuration.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class StreamSettings(BaseModel):
    """Where the ServerApp takes deletion requests from (run-config keys ``kafka-*``).

    An empty ``bootstrap`` means the scenario's own generated stream; otherwise the ServerApp
    consumes the Kafka requests topic (:mod:`server.kafka.session`) with these settings, the
    same as ``unlearnsim run --stream kafka``'s options. ``idle_timeout`` 0 means no timeout.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str = ""
    requests_topic: str = "deletion-requests"
    receipts_topic: str = "deletion-receipts"
    dead_letter_topic: str = "deletion-dead-letters"
    group: str = "unlearnsim"
    max_batch_requests: int = Field(default=500, ge=1)
    max_wait: float = Field(default=0.2, ge=0)
    idle_timeout: float = Field(default=0.0, ge=0)
    state_dir: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.bootstrap)
