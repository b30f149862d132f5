"""Stopping a consumer wherever it waits, not only between batches.

A consumer waits in places where a stop loses nothing: polling the requests topic (records
read but not yet applied are read again from the checkpointed offsets), sleeping between
retries while the broker is away, and connecting at start, or publishing an outbox at start
that is already in the checkpoint (the next start sends what did not arrive; a batch's own
publication runs on a thread of its own, which a stop ends through the back-off:
:mod:`server.kafka.delivery`). Such a place is an *abandonable* wait
(:meth:`Waits.abandonable`). Applying a batch and writing its checkpoint are not: a stop
there lets the batch finish, as before.

:meth:`Waits.stop` (what :meth:`DeletionConsumer.stop <server.kafka.consumer.DeletionConsumer.stop>`
calls, from the SIGTERM/SIGINT handler of :func:`simulator.runner.interrupt.graceful_stop` or
from another thread)

* sets :attr:`Waits.stopped` (a :class:`StopFlag`), which ends every back-off sleep within
  :data:`SLICE` seconds (:mod:`server.kafka.backoff`) and keeps a failed publication from being
  retried (:mod:`server.kafka.publisher`);
* raises :class:`ConsumerInterrupted` when called on the thread that is inside an abandonable
  wait, which is the case of a signal handler interrupting the main thread there: the
  exception leaves the wait wherever it is (a poll, a flush, a blocked connect, a client stuck
  in a loop that never returns) and the consumer ends its session as interrupted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: Longest a sleep goes on after a stop (seconds).
SLICE = 0.05


class StopFlag:
    """Whether a stop was asked; safe to set from a signal handler (no lock is taken)."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        """Ask to stop."""
        self._set = True

    def is_set(self) -> bool:
        """Whether a stop was asked."""
        return self._set

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or less: end within :data:`SLICE` seconds of a stop."""
        end = time.monotonic() + seconds
        while not self._set and (left := end - time.monotonic()) > 0:
            time.sleep(min(SLICE, left))


class ConsumerInterrupted(BaseException):
    """A stop arrived while the consumer waited where stopping loses nothing.

    A :class:`BaseException`, as ``KeyboardInterrupt`` is, so that no ``except Exception`` in
    a client library on the way swallows it.
    """


class Waits:
    """Where the consumer waits, and whether it was asked to stop (see the module docstring)."""

    def __init__(self) -> None:
        self.stopped = StopFlag()
        self._owner: int | None = None
        self._depth = 0

    def stop(self) -> None:
        """Ask to stop: end the sleeps; leave an abandonable wait of the calling thread at once.

        Raises
        ------
        ConsumerInterrupted
            The calling thread is inside :meth:`abandonable` (a signal handler interrupting it).
        """
        self.stopped.set()
        if self._depth and self._owner == threading.get_ident():
            raise ConsumerInterrupted("stopped while waiting")

    @contextmanager
    def abandonable(self, *, started: bool = False) -> Iterator[None]:
        """A wait that a stop leaves at any point (raises :class:`ConsumerInterrupted`).

        Once stopped, the wait is not entered at all, unless it belongs to work ``started``
        before the stop (then it is tried, and left at the next stop or failure).
        """
        if self.stopped.is_set() and not started:
            raise ConsumerInterrupted("stopped before waiting")
        outer = self._owner
        self._owner = threading.get_ident()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            self._owner = outer if self._depth else None
