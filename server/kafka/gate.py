"""Who may delete what: signature, ownership and per-subject rate limit, checked per request.

:class:`Gate` answers, for a decoded request and the record it came in, why it is refused, or
None. In order:

1. ``bad_signature``: with a signing key, the record must carry a valid HMAC of its value
   (:mod:`server.kafka.signing`);
2. ``not_owner``: with ownership enforced, the request's subject must own every sample id it
   names, and only a client may withdraw itself (:mod:`simulator.stream.subjects`);
3. ``rate_limited``: a subject may have at most ``rate_limit`` requests accepted within any
   ``rate_window`` seconds. The clock is the record's timestamp, clamped to the consumer's
   clock and never earlier than the subject's previous request, so a replay after a crash
   decides the same way and a producer cannot dodge the limit with old timestamps.

A refused request is answered ``rejected`` with the reason and does not enter the ledger; its
window of timestamps is part of the checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from server.kafka.settings import consumer_default
from server.kafka.signing import verify
from server.kafka.wire import Incoming
from simulator.runner.federation import Federation
from simulator.stream import DeletionRequest
from simulator.stream.subjects import SubjectRegistry, subject_registry

RATE_LIMITED = "rate_limited"
#: Reasons a gate gives (bounded: metric labels).
REASONS = ("bad_signature", "not_owner", RATE_LIMITED)


@dataclass(frozen=True)
class GateConfig:
    """What the gate checks.

    ``ownership``: enforce the registry. ``signing_key``: require signed records (None: not).
    ``rate_limit``: requests per subject per ``rate_window`` seconds (0: no limit).
    """

    ownership: bool = consumer_default("ownership")
    signing_key: bytes | None = None
    rate_limit: int = consumer_default("subject_rate_limit")
    rate_window: float = consumer_default("subject_rate_window")

    def __post_init__(self) -> None:
        if self.rate_limit < 0 or self.rate_window <= 0:
            raise ValueError("need rate_limit >= 0 and rate_window > 0")

    def __repr__(self) -> str:  # never print the key
        key = "set" if self.signing_key else "none"
        return (
            f"GateConfig(ownership={self.ownership}, signing_key={key}, "
            f"rate_limit={self.rate_limit}, rate_window={self.rate_window})"
        )


def registry_of(fed: Federation) -> SubjectRegistry:
    """The ownership registry of a federation: the one its generated stream was drawn with."""
    return subject_registry(
        fed.client_indices,
        int(fed.dataset.y_train.shape[0]),
        rows_per_subject=fed.scenario.stream.rows_per_subject,
    )


class Gate:
    """Applies a :class:`GateConfig`.

    Parameters
    ----------
    policy : what to check.
    registry : who owns which row (required when ``policy.ownership``).
    windows : subject -> timestamps (ms) of its accepted requests in the current window; kept
        in the consumer's checkpoint (used in place).
    clock : milliseconds now (the consumer's wall clock).
    """

    def __init__(
        self,
        policy: GateConfig,
        registry: SubjectRegistry | None,
        windows: dict[str, list[int]],
        *,
        clock: Callable[[], float] = lambda: time.time() * 1000.0,
    ) -> None:
        if policy.ownership and registry is None:
            raise ValueError("ownership is enforced but no registry was given")
        self.policy = policy
        self.registry = registry
        self.windows = windows
        self.clock = clock

    def refuse(self, request: DeletionRequest, record: Incoming) -> str | None:
        """Why ``request`` (read from ``record``) is refused, or None."""
        p = self.policy
        if p.signing_key is not None:
            why = verify(record.value or b"", record.headers, p.signing_key)
            if why is not None:
                return why
        if p.ownership and self.registry is not None:
            why = self.registry.check(request)
            if why is not None:
                return why
        if p.rate_limit:
            return self._rate(request.subject, record.timestamp_ms)
        return None

    def _rate(self, subject: str, timestamp_ms: int) -> str | None:
        window_ms = int(self.policy.rate_window * 1000)
        recent = self.windows.get(subject, [])
        last = recent[-1] if recent else 0
        t = max(last, min(int(timestamp_ms), int(self.clock())))
        recent = [s for s in recent if s > t - window_ms]
        if len(recent) >= self.policy.rate_limit:
            self.windows[subject] = recent
            return (
                f"{RATE_LIMITED}: subject already has {len(recent)} requests in "
                f"{self.policy.rate_window:g} s (limit {self.policy.rate_limit})"
            )
        recent.append(t)
        self.windows[subject] = recent
        return None

    def prune(self, now_ms: float | None = None) -> None:
        """Forget windows that ended (keeps the checkpoint small)."""
        cutoff = (self.clock() if now_ms is None else now_ms) - self.policy.rate_window * 1000
        for subject in [s for s, ts in self.windows.items() if not ts or ts[-1] <= cutoff]:
            del self.windows[subject]
