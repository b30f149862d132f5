"""Liveness and readiness of a run, from its event records (``/healthz``, ``/readyz``, ready file).

:class:`Health` is an ``on_event`` callback. It reads the events a run already emits:

* ``start`` (an in-process scenario run began): **ready**. A Kafka consumer announces itself
  first (``consumer_loading``, not written to the events file), and then ``start`` is not
  ready: the consumer is ready only at ``consumer_start``, after it loaded its checkpoint,
  checked the requests log against it (:mod:`server.kafka.offsets`) and published its outbox;
  a restart that refuses a gap is never ready;
* ``consumer_waiting`` (the broker is away: a fetch, the log check or the broker check at each
  heartbeat failed): **not ready**, with why; ``consumer_ready`` (the broker answered the
  check again) or a ``deletion_batch``: ready again;
* ``heartbeat`` (the consume loop, at least every second) and every ``deletion_batch``:
  alive; no sign of life for ``stall_after`` seconds once running: **not live** (a stuck loop);
* ``consumer_end`` / ``end``: not ready (stopping).

Before the first event the process is alive and starting (building a federation can take
minutes: liveness must not fail then). With a ``ready_file``, the file exists exactly while
the run is ready: JSON with the PID, the process's start time (so that a reader can tell a
live process from a dead or recycled one: :func:`ready_file_state`), the time it became ready
and ``seconds_to_ready`` since the process started (building or loading the federation
included), written atomically, removed when not ready. A ready file a killed process left is
removed when the next one starts (:func:`clear_stale_ready_file`). The metrics exporter serves
``/healthz`` and ``/readyz`` from its own :class:`Health` (HTTP 200 or 503 with a one-line
reason). :func:`wait_until_ready` waits for either (``unlearnsim produce --wait-ready``).
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


def process_start(pid: int | None = None) -> int | None:
    """When process ``pid`` (default: this one) started, in clock ticks since boot (Linux).

    None when it does not run (or has exited and waits to be reaped), or off Linux.
    """
    where = "self" if pid is None else str(pid)
    try:
        fields = Path(f"/proc/{where}/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19])  # field 22 of proc(5): start time in ticks
    except (OSError, ValueError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else started  # a zombie has exited


def ready_file_state(path: Path) -> tuple[bool, str]:
    """(ready, why) of a ready file: it exists and the process that wrote it still runs.

    A file whose process died (a SIGKILL leaves it behind) or whose PID now belongs to
    another process (another start time) is not ready.
    """
    try:
        info = json.loads(path.read_text())
        pid = int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"no ready file at {path}"
    started = process_start(pid)
    if started is None:
        return False, f"process {pid} of {path} is not running"
    if info.get("process_start") not in (None, started):
        return False, f"process {pid} of {path} is not the one that wrote it"
    return True, f"ready since {info.get('ready_at')}"


def clear_stale_ready_file(path: Path) -> bool:
    """Remove a ready file left by a process that no longer runs; whether one was removed.

    Only a file holding a ready record (JSON with ``pid``) is removed, and only while
    :func:`ready_file_state` says its process is gone.
    """
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or "pid" not in info or ready_file_state(path)[0]:
        return False
    path.unlink(missing_ok=True)
    return True


def wait_until_ready(target: str, timeout: float, *, poll: float = 0.2) -> tuple[bool, str]:
    """Wait for a consumer to be ready; (ready, why) when it is or ``timeout`` seconds passed.

    ``target`` is its readiness URL (``http://127.0.0.1:PORT/readyz`` on ``--metrics-port``:
    ready at HTTP 200) or its ready file (ready while :func:`ready_file_state` says so).
    """
    if target.startswith(("http://", "https://")):
        from server.processes import wait_for_url

        ok = wait_for_url(target, timeout)
        return ok, "answered 200" if ok else f"{target} did not answer 200"
    path = Path(target)
    deadline = time.monotonic() + timeout
    while True:
        ready, why = ready_file_state(path)
        if ready or time.monotonic() >= deadline:
            return ready, why
        time.sleep(poll)


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
        self._consumer = False
        self._why = "starting"
        self._last = clock()
        if ready_file is not None:
            clear_stale_ready_file(ready_file)

    def __call__(self, event: dict[str, Any], fed: Any = None) -> None:
        """Update the health state from a run's ``event``."""
        kind = event.get("event")
        with self._lock:
            self._last = self.clock()
            if kind == "consumer_loading":
                self._consumer = True
                self._set_ready(False, "loading the checkpoint and checking the log")
            elif kind == "start":
                self._running = True
                if not self._consumer:
                    self._set_ready(True, "running")
            elif kind == "consumer_start":
                self._running = self._consumer = True
                self._set_ready(True, "consuming")
            elif kind == "consumer_waiting":
                self._set_ready(False, str(event.get("reason", "waiting")))
            elif kind in ("consumer_ready", "deletion_batch") and self._running:
                self._set_ready(True, "consuming" if self._consumer else "running")
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
            age = process_age()
            info = {
                "pid": os.getpid(),
                "process_start": process_start(),
                "ready_at": time.time(),
                "seconds_to_ready": self.clock() - self._born if age is None else age,
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
