"""A checkpointed batch's receipts, published while the next batch is applied.

Publishing a batch's outbox is per-record Python in ``kafka-python`` (about 0.15 ms a record:
0.3-0.5 s for 2,000 receipts on two cores) and waits for the broker's acknowledgements. The
consumer used to do it between batches, so every request of the next batch waited for it too.
:class:`Delivery` runs the publication on one thread of its own while the main thread reads,
decodes and applies the next batch; the main thread takes the result back (:meth:`finish`)
before anything else is persisted. The exactly-once protocol is unchanged, because its
invariant is kept: **the checkpoint of batch t+1 is saved only once batch t's outbox is on the
broker** (its ``published_until`` is the end the publication reached). A crash while the
publication runs is a crash during the publication of the last checkpointed batch, as
before: the next start sends what did not arrive.

One case needs more: a stop during the publication of batch t ends its retries (the broker
being away), after the main thread has applied batch t+1 to the federation. Batch t+1 is not
saved then (its predecessor's outbox is not delivered), and the consumer restores the last
checkpoint into the federation before it ends (:meth:`DeletionConsumer._deliver
<server.kafka.consumer.DeletionConsumer._deliver>`), so that the state it reports and
snapshots is the checkpointed one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from server.kafka.publisher import Position, Publisher
from server.kafka.waits import ConsumerInterrupted
from server.kafka.wire import OutRecord
from simulator.runner.pipeline import BatchOutcome


@dataclass(frozen=True)
class Published:
    """What one publication did.

    Attributes
    ----------
    ends : per output partition, where the publication ended (the next batch's ``start``);
        None when a stop ended it first (the outbox is in the checkpoint).
    done_ms : wall-clock time (ms since the epoch) when the broker had every record.
    seconds : how long the publication took on its thread.
    finished : ``time.perf_counter()`` when it ended.
    """

    ends: dict[Position, int] | None
    done_ms: float
    seconds: float
    finished: float


@dataclass(frozen=True)
class InFlight:
    """A batch whose outbox is being published.

    Attributes
    ----------
    outcome : the batch's outcome; its event is emitted once the publication is over.
    sent_ms : broker timestamps (ms) of the requests it answered, for their latencies.
    started : ``time.perf_counter()`` when the batch began (its ``total`` time).
    future : the publication.
    """

    outcome: BatchOutcome
    sent_ms: tuple[float, ...]
    started: float
    future: Future[Published]


class Delivery:
    """At most one publication in flight, on a thread of its own (see the module docstring)."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="receipts")
        self.in_flight: InFlight | None = None

    def start(
        self,
        outbox: Sequence[OutRecord],
        batch: int,
        *,
        start: dict[Position, int],
        outcome: BatchOutcome,
        sent_ms: Sequence[float],
        started: float,
    ) -> None:
        """Publish ``batch``'s checkpointed ``outbox`` from ``start`` in the background."""
        assert self.in_flight is None, "finish() the publication in flight first"
        future = self._pool.submit(_publish, self.publisher, list(outbox), batch, dict(start))
        self.in_flight = InFlight(outcome, tuple(sent_ms), started, future)

    def finish(self) -> tuple[InFlight, Published] | None:
        """Wait for the publication in flight; None when there is none.

        A publication a stop ended returns ``ends=None``; any other error of the publisher is
        raised here.
        """
        flight, self.in_flight = self.in_flight, None
        if flight is None:
            return None
        return flight, flight.future.result()

    def close(self) -> None:
        """Wait for the thread to end (a stop or a closed producer ends a publication)."""
        self._pool.shutdown(wait=True)


def _publish(
    publisher: Publisher, outbox: list[OutRecord], batch: int, start: dict[Position, int]
) -> Published:
    t0 = time.perf_counter()
    try:
        ends: dict[Position, int] | None = publisher.publish(
            outbox, batch, start=start, verify=False
        )
    except ConsumerInterrupted:  # stopped while the broker was away: the checkpoint has it
        ends = None
    t1 = time.perf_counter()
    return Published(ends, time.time() * 1000.0, t1 - t0, t1)
