"""Topic names of the deletion stream and their explicit creation.

Topics are always created explicitly (an auto-created topic gets the broker's default partition
count, 4 on Tansu, and the order of requests across partitions is not kept). The requests topic
has one partition by default so that requests are applied in the order they were produced.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from server.kafka.errors import BrokerUnavailableError
from server.kafka.security import client_options
from server.kafka.settings import REQUEST_PARTITIONS, ConsumerSettings, consumer_default


@dataclass(frozen=True)
class Topics:
    """Names of the three topics: requests in, receipts out, malformed input out."""

    requests: str = consumer_default("requests_topic")
    receipts: str = consumer_default("receipts_topic")
    dead_letters: str = consumer_default("dead_letter_topic")

    @classmethod
    def of(cls, settings: ConsumerSettings) -> Topics:
        """The topics ``settings`` name."""
        return cls(settings.requests_topic, settings.receipts_topic, settings.dead_letter_topic)

    def all(self) -> tuple[str, str, str]:
        """The three topic names: requests, receipts, dead letters."""
        return (self.requests, self.receipts, self.dead_letters)


def ensure_topics(
    bootstrap: str,
    topics: Topics,
    *,
    request_partitions: int = REQUEST_PARTITIONS,
    timeout: float = 30.0,
) -> None:
    """Create the topics that do not exist yet (existing ones are left as they are).

    Retries while the broker is unreachable, up to ``timeout`` seconds.

    Raises
    ------
    BrokerUnavailableError
        The broker did not answer, or a topic could not be created, within ``timeout``.
    """
    from kafka import KafkaAdminClient  # here: the CLI imports the Topics names at start
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    deadline = time.monotonic() + timeout
    wanted = {
        topics.requests: request_partitions,
        topics.receipts: 1,
        topics.dead_letters: 1,
    }
    last: Exception | None = None
    while time.monotonic() < deadline:
        admin = None
        try:
            admin = KafkaAdminClient(
                bootstrap_servers=bootstrap,
                request_timeout_ms=5000,
                bootstrap_timeout_ms=5000,
                **client_options(),
            )
            missing = [name for name in wanted if name not in set(admin.list_topics())]
            for name in missing:
                with contextlib.suppress(TopicAlreadyExistsError):
                    admin.create_topics([NewTopic(name, wanted[name], 1)])
            if all(name in set(admin.list_topics()) for name in wanted):
                return
        except (KafkaError, OSError) as exc:
            last = exc
        finally:
            if admin is not None:
                admin.close()
        time.sleep(0.2)
    raise BrokerUnavailableError(f"could not create topics {sorted(wanted)} on {bootstrap}: {last}")
