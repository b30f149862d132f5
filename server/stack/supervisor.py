"""Start the native stack's processes, record them, wait for the run, stop exactly those.

``up`` starts each :class:`~server.stack.native.Process` in its own session (its PID is its
process group), logs to ``FOLDER/logs/NAME.log``, waits for a service with a readiness port
before starting what depends on it, and writes ``FOLDER/stack.json`` (PIDs, argv, ports) after
every start, so that ``down`` finds everything even if ``up`` failed half-way. ``down`` stops
the recorded process trees, only where the PID still runs the recorded command line.

``--dir`` may be any folder, so it is claimed first (:func:`claim`): ``up`` writes
``FOLDER/unlearnsim-stack.json``, and refuses a folder that already holds ``logs/``,
``volumes/``, ``flower-home/``, ... that no stack wrote; ``down --volumes`` deletes those
sub-folders only where that marker is (:mod:`simulator.owned_files`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from server.processes import alive, cmdline, stop_trees, wait_for_port, wait_for_url
from server.stack.native import PROMETHEUS_CONFIG, VOLUMES, NativePlan, Process
from simulator.errors import UnlearnSimError
from simulator.owned_files import Outputs, check_overwrite

STATE_FILE = "stack.json"
#: Written by ``up`` into its folder: the proof that the folder's sub-folders are the stack's.
MARKER = "unlearnsim-stack.json"
#: The sub-folders ``up`` fills (and ``down --volumes`` deletes).
FOLDERS = (VOLUMES, "logs", "flower-home")


class StackError(UnlearnSimError, RuntimeError):
    """A stack service failed to start, or the stack is already up."""


def is_stack_folder(folder: Path) -> bool:
    """``folder`` carries the marker that ``up`` writes."""
    try:
        data = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("written_by") == "unlearnsim stack up"


def stack_outputs() -> Outputs:
    """What the stack writes into its folder, and how that folder is recognised."""
    return Outputs(
        kind="stack folder",
        marker=f"{MARKER} written by unlearnsim stack up",
        proof=is_stack_folder,
        files=(MARKER, STATE_FILE, "stack.tmp", PROMETHEUS_CONFIG),
        folders=FOLDERS,
    )


def claim(folder: Path) -> None:
    """Make ``folder`` the stack's: refuse one whose stack-named entries no stack wrote.

    Raises
    ------
    ConfigError
        Naming ``--dir`` and the entry in the way.
    """
    check_overwrite(folder, stack_outputs(), "--dir")
    if not is_stack_folder(folder):
        folder.mkdir(parents=True, exist_ok=True)
        marker = {"written_by": "unlearnsim stack up", "created_at": time.time()}
        (folder / MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def state_path(folder: Path) -> Path:
    return folder / STATE_FILE


def read_state(folder: Path) -> dict[str, Any] | None:
    """The stack's state file in ``folder``, or None when the stack was never started."""
    path = state_path(folder)
    return json.loads(path.read_text()) if path.exists() else None


def running(entry: dict[str, Any]) -> bool:
    """Whether the recorded process still runs its recorded command."""
    return alive(int(entry["pid"])) and " ".join(entry["argv"]) in cmdline(int(entry["pid"]))


def up(plan: NativePlan, folder: Path, *, startup_timeout: float = 60.0) -> dict[str, Any]:
    """Start ``plan``'s processes in order; returns the recorded state."""
    claim(folder)
    state = read_state(folder)
    if state and any(running(e) for e in state["services"].values()):
        raise StackError(f"a stack is already up in {folder}: `unlearnsim stack down` first")
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    state = {"folder": str(folder), "started_at": time.time(), "services": {}}
    state["skipped"] = plan.skipped
    for proc in plan.processes:
        log = logs / f"{proc.name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                proc.argv,
                env=proc.env,
                cwd=proc.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        entry = {**asdict(proc), "pid": popen.pid, "log": str(log)}
        del entry["env"]  # may hold the user's secrets; the log names the service instead
        entry["cwd"] = str(proc.cwd)
        state["services"][proc.name] = entry
        _write(folder, state)
        if proc.ready_port is not None and not wait_for_port(
            proc.ready_port, startup_timeout, popen
        ):
            tail = log.read_text(errors="replace")[-1500:]
            raise StackError(
                f"{proc.name} did not listen on 127.0.0.1:{proc.ready_port} within "
                f"{startup_timeout:g} s (exit code {popen.poll()}); its log:\n{tail}"
            )
        budget = proc.ready_timeout or startup_timeout
        if proc.ready_url is not None and not wait_for_url(proc.ready_url, budget, popen):
            tail = log.read_text(errors="replace")[-1500:]
            raise StackError(
                f"{proc.name} was not ready ({proc.ready_url} did not answer 200) within "
                f"{budget:g} s (exit code {popen.poll()}); its log:\n{tail}"
            )
    return state


def wait_for(
    folder: Path,
    service: str,
    timeout: float,
    *,
    on_wait: Callable[[float, dict[str, Any]], None] | None = None,
    poll: float = 1.0,
) -> None:
    """Wait until a recorded service has exited (its outputs tell how it went).

    ``on_wait(elapsed_seconds, state)`` is called after every ``poll`` seconds of waiting (the
    command shows progress with it).
    """
    state = read_state(folder)
    if state is None or service not in state["services"]:
        raise StackError(f"no service '{service}' recorded in {state_path(folder)}")
    entry = state["services"][service]
    start = time.monotonic()
    deadline = start + timeout
    while running(entry):
        if time.monotonic() > deadline:
            raise StackError(f"{service} still running after {timeout:g} s; see {entry['log']}")
        time.sleep(poll)
        if on_wait is not None:
            on_wait(time.monotonic() - start, state)


def last_log_line(path: str | Path, limit: int = 100) -> str:
    """The last non-empty line of a log file (at most ``limit`` characters), or ``""``."""
    try:
        with Path(path).open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 8192))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.replace("\r", "\n").splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if len(lines[-1]) <= limit else lines[-1][: limit - 3] + "..."


def down(folder: Path, grace: float = 20.0, *, volumes: bool = False) -> list[str]:
    """Stop every recorded process (and its descendants); returns the names stopped.

    Volumes (run outputs, Prometheus data) persist across ``up``/``down`` as compose's named
    volumes do; ``volumes=True`` deletes them and the logs (``docker compose down -v``), only
    in a folder that ``up`` marked as its own.

    Raises
    ------
    StackError
        ``volumes`` in a folder without the marker that holds such sub-folders (nothing is
        stopped or deleted then).
    """
    if volumes and not is_stack_folder(folder):
        found = [name for name in FOLDERS if (folder / name).exists()]
        if found:
            raise StackError(
                f"{folder} holds {', '.join(found)} but no {MARKER} written by unlearnsim "
                "stack up: not deleting what no stack wrote (delete them yourself if they are)"
            )
    state = read_state(folder)
    entries = {} if state is None else {n: e for n, e in state["services"].items() if running(e)}
    stop_trees([int(e["pid"]) for e in entries.values()], grace)
    state_path(folder).unlink(missing_ok=True)
    if volumes:
        for sub in (VOLUMES, "logs", "flower-home"):
            shutil.rmtree(folder / sub, ignore_errors=True)
    return list(entries)


def _write(folder: Path, state: dict[str, Any]) -> None:
    tmp = state_path(folder).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(state_path(folder))


__all__ = ["Process", "StackError", "down", "read_state", "running", "up", "wait_for"]
