"""Liveness and readiness of a run, from its event records (``/healthz``, ``/readyz``, ready file).

:class:`Health` is an ``on_event`` callback. It reads the events a run already emits:

* ``consumer_start`` (the Kafka consumer loaded its state, published its outbox and is
  about to read) or ``start`` (an in-process scenario run began): **ready**;
* ``consumer_waiting`` (the broker is away; the consumer backs off): not ready, with why;
* ``heartbeat`` (the consume loop, at least every second) and every ``deletion_batch``:
  alive; no sign of life for ``stall_after`` seconds once running: **not live** (a stuck loop);
* ``consumer_end`` / ``end``: not ready (stopping).

Before the first event the process is alive and starting (building a federation can take
minutes: liveness must not fail then). With a ``ready_file``, the file exists exactly while
the run is ready: JSON with the PID, the time it became ready and how long the start took,
written atomically, removed when not ready. The metrics exporter serves ``/healthz`` and
``/readyz`` from its own :class:`Health` (HTTP 200 or 503 with a one-line reason).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Seconds without a heartbeat after which a running consumer counts as stuck.
STALL_SECONDS = 300.0


def process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time in ticks
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)


class Health:
    """Liveness and readiness, updated from event records (see the module docstring).

    Parameters
    ----------
    stall_after : seconds without a sign of life before a running loop is not live.
    ready_file : a file to keep exactly while ready (None: none).
    clock : monotonic seconds.
    """

    def __init__(
        self,
        *,
        stall_after: float = STALL_SECONDS,
        ready_file: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stall_after = stall_after
        self.ready_file = ready_file
        self.clock = clock
        self._lock = threading.Lock()
        self._born = clock()
        self._ready = False
        self._running = False
        self._why = "starting"
        self._last = clock()

    def __call__(self, event: dict[str, Any], fed: Any = None) -> None:
        """Update the health state from a run's ``event``."""
        kind = event.get("event")
        with self._lock:
            self._last = self.clock()
            if kind in ("consumer_start", "start"):
                self._running = True
                self._set_ready(True, "consuming" if kind == "consumer_start" else "running")
            elif kind == "consumer_waiting":
                self._set_ready(False, str(event.get("reason", "waiting")))
            elif kind in ("heartbeat", "deletion_batch") and self._running and not self._ready:
                self._set_ready(True, "consuming")
            elif kind in ("consumer_end", "end"):
                self._running = False
                self._set_ready(False, "stopping")

    def liveness(self) -> tuple[bool, str]:
        """(alive, why): false only when a running loop showed no sign of life for too long."""
        with self._lock:
            quiet = self.clock() - self._last
            if self._running and quiet > self.stall_after:
                return False, f"no heartbeat for {quiet:.0f} s"
            return True, "alive" if self._running else self._why

    def readiness(self) -> tuple[bool, str]:
        """(ready, why)."""
        alive, why = self.liveness()
        with self._lock:
            if not alive:
                return False, why
            return self._ready, self._why

    def _set_ready(self, ready: bool, why: str) -> None:
        changed = ready != self._ready
        self._ready, self._why = ready, why
        if self.ready_file is None or not changed:
            return
        if ready:
            tmp = self.ready_file.with_name(self.ready_file.name + ".tmp")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            info = {
                "pid": os.getpid(),
                "ready_at": time.time(),
                "seconds_to_ready": self.clock() - self._born,
            }
            tmp.write_text(json.dumps(info) + "\n")
            os.replace(tmp, self.ready_file)
        else:
            self.ready_file.unlink(missing_ok=True)

    def close(self) -> None:
        """Not ready any more (the ready file goes)."""
        with self._lock:
            self._running = False
            self._set_ready(False, "stopped")
