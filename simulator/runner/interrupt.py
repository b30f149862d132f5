"""Stopping a run cleanly on SIGINT/SIGTERM: the current batch finishes, the outputs are written.

:func:`graceful_stop` installs handlers (main thread only) for the duration of a deletion
stream: the first SIGINT or SIGTERM sets the returned :class:`StopRequest` (and calls
``on_stop``, e.g. a Kafka consumer's ``stop``); the stream loop checks it after every batch, the
recorder writes the outputs marked "interrupted at batch k of N", and the CLI exits with
:data:`EXIT_INTERRUPTED` (130). A second signal abandons the batch (``KeyboardInterrupt``).
Outside a stream (loading data, training) SIGINT is Python's ``KeyboardInterrupt``; the CLI
turns it into the same exit code without a traceback. Every source of requests (the scenario
stream, ``--stream kafka``) uses this one mechanism.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

#: The exit code of an interrupted run (128 + SIGINT, as shells report Ctrl-C).
EXIT_INTERRUPTED = 130
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class StopRequest:
    """Whether (and by which signal) the run was asked to stop."""

    signum: int | None = None
    callbacks: list[Callable[[], None]] = field(default_factory=list)

    @property
    def requested(self) -> bool:
        """A stop was requested."""
        return self.signum is not None

    @property
    def signal_name(self) -> str:
        """``SIGINT``/``SIGTERM`` (empty when no stop was requested)."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def request(self, signum: int = signal.SIGINT) -> None:
        """Ask the run to stop after the current batch."""
        first = self.signum is None
        self.signum = signum
        if first:
            for cb in self.callbacks:
                cb()


@contextmanager
def graceful_stop(on_stop: Callable[[], None] | None = None) -> Iterator[StopRequest]:
    """Finish the current batch on the first SIGINT/SIGTERM, abandon it on the second.

    Off the main thread (Flower's simulation engine runs the ServerApp in a thread, where the
    engine owns the signals) nothing is installed and the request is never set by a signal.
    """
    stop = StopRequest(callbacks=[on_stop] if on_stop else [])
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.request(signum)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``KeyboardInterrupt`` as SIGINT does (main thread only).

    So a run stopped before its stream starts still records why and exits cleanly.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
