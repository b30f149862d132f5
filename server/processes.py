"""Local processes we start and must stop: ports on 127.0.0.1, liveness, stopping process trees.

Shared by the bundled broker (:mod:`server.kafka.broker`), the local Deployment Engine
(:mod:`server.flower.processes`) and the native operator stack (:mod:`server.stack`). Every
server binds 127.0.0.1 only; every process is stopped by the PID we recorded, and only while its
command line is still the one we started (a recycled PID is never signalled).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = HOST) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def executable(name: str) -> str:
    """A console script of this Python environment (next to ``sys.executable``), else ``PATH``'s.

    Flower's SuperLink and SuperNodes, and our ``unlearnsim``, come from the same environment
    as the command that starts them.
    """
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else (shutil.which(name) or name)


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Wait for a TCP port to open.

    Block until ``127.0.0.1:port`` accepts connections; ``False`` if ``proc`` exited first or
    the time ran out.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        if port_open(port):
            return True
        time.sleep(0.1)
    return False


def wait_for_url(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Wait for an HTTP endpoint to answer 200.

    Block until ``url`` answers HTTP 200 (a readiness endpoint); ``False`` if ``proc``
    exited first or the time ran out.
    """
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    return False


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    """The command line of ``pid`` ('' when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(pids: Iterable[int]) -> set[int]:
    """PIDs whose parent chain leads to ``pids`` (Linux ``/proc``; empty elsewhere)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
            parent[int(entry.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found: set[int] = set()
    frontier = set(pids)
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in found}
        found |= frontier
    return found


def stop_trees(
    leaders: Iterable[int], grace: float = 15.0, reap: Iterable[subprocess.Popen[bytes]] = ()
) -> set[int]:
    """Stop process-group leaders and everything below them; return the PIDs that were signalled.

    SIGTERM to each leader's process group (each was started in its own session) and to its
    descendants (a child may have a session of its own, like Flower's SuperExec); after
    ``grace`` seconds, SIGKILL to whatever of them is still alive. ``reap``: our own
    ``Popen`` children, waited for so that none is left a zombie.
    """
    leaders = [p for p in leaders if alive(p)]
    family = descendants(leaders) | set(leaders)
    for pid in leaders:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    for pid in family - set(leaders):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    children = list(reap)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in family):
        for proc in children:
            proc.poll()
        time.sleep(0.1)
    for pid in leaders:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    for pid in family:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    for proc in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    return family
