"""Exponential back-off between retries while the broker is away."""

from __future__ import annotations

from dataclasses import dataclass, field

from server.kafka.waits import StopFlag


@dataclass
class Backoff:
    """Sleeps ``initial``, then twice as long each time, at most ``maximum``; reset on success.

    ``attempts`` counts the sleeps since the last reset (a retry counter for logs and metrics).
    ``stop``: once set, a sleep ends at once (and none starts), so that a stopped consumer does
    not wait out a back-off (:mod:`server.kafka.waits`).
    """

    initial: float = 0.1
    maximum: float = 5.0
    attempts: int = 0
    stop: StopFlag = field(default_factory=StopFlag, repr=False, compare=False)

    @property
    def stopped(self) -> bool:
        """Whether the waits were told to stop."""
        return self.stop.is_set()

    def delay(self) -> float:
        """Seconds the next sleep lasts."""
        return float(min(self.maximum, self.initial * 2 ** min(self.attempts, 30)))

    def sleep(self) -> float:
        """Sleep for :meth:`delay` seconds (less once stopped) and count the attempt.

        Returns the seconds the sleep was to last.
        """
        seconds = self.delay()
        self.stop.sleep(seconds)
        self.attempts += 1
        return seconds

    def reset(self) -> None:
        """Start again from ``initial`` (after a success)."""
        self.attempts = 0
