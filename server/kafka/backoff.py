"""Exponential back-off between retries while the broker is away."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Backoff:
    """Sleeps ``initial``, then twice as long each time, at most ``maximum``; reset on success.

    ``attempts`` counts the sleeps since the last reset (a retry counter for logs and metrics).
    """

    initial: float = 0.1
    maximum: float = 5.0
    attempts: int = 0

    def delay(self) -> float:
        """Seconds the next sleep lasts."""
        return float(min(self.maximum, self.initial * 2 ** min(self.attempts, 30)))

    def sleep(self) -> float:
        """Sleep for :meth:`delay` seconds and count the attempt; returns the seconds slept."""
        seconds = self.delay()
        time.sleep(seconds)
        self.attempts += 1
        return seconds

    def reset(self) -> None:
        """Start again from ``initial`` (after a success)."""
        self.attempts = 0
