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
        return float(min(self.maximum, self.initial * 2 ** min(self.attempts, 30)))

    def sleep(self) -> float:
        seconds = self.delay()
        time.sleep(seconds)
        self.attempts += 1
        return seconds

    def reset(self) -> None:
        self.attempts = 0
