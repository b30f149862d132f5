"""The native stack's supervisor with plain processes: start in order, wait for readiness,
record, refuse a second ``up``, and stop exactly the recorded process trees (also a child
that left for a session of its own), never a PID that now runs something else."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from server.processes import alive, descendants, free_port, port_open
from server.stack.native import NativePlan, Process
from server.stack.supervisor import StackError, down, read_state, running, up

#: a parent that starts a grandchild in a session of its own, then waits
PARENT = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], "
    "start_new_session=True); time.sleep(300)"
)


def plan(tmp_path: Path, port: int) -> NativePlan:
    server = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
    return NativePlan(
        [
            Process("web", server, {}, tmp_path, {8000: port}, ready_port=port),
            Process("parent", [sys.executable, "-c", PARENT], {}, tmp_path),
        ],
        skipped={"grafana": "not here"},
        ports={("web", 8000): port},
    )


def test_up_records_and_down_stops_the_whole_trees(tmp_path: Path) -> None:
    port = free_port()
    state = up(plan(tmp_path, port), tmp_path)
    try:
        assert port_open(port)  # up returned only once the ready port listened
        pids = [int(e["pid"]) for e in state["services"].values()]
        deadline = time.monotonic() + 10
        while len(descendants(pids)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        family = descendants(pids) | set(pids)
        assert len(family) >= 3 and all(alive(p) for p in family)
        recorded = read_state(tmp_path)
        assert recorded is not None and recorded["skipped"] == {"grafana": "not here"}
        assert all(running(e) for e in recorded["services"].values())
        assert "env" not in recorded["services"]["web"]  # environments are not written out
        with pytest.raises(StackError, match="already up"):
            up(plan(tmp_path, free_port()), tmp_path)
    finally:
        stopped = down(tmp_path, grace=5)
    assert sorted(stopped) == ["parent", "web"]
    assert not [p for p in family if alive(p)]
    assert read_state(tmp_path) is None and not port_open(port)


def test_down_never_signals_a_pid_that_runs_something_else(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = {"folder": str(tmp_path), "started_at": 0, "services": {
            "web": {"pid": other.pid, "argv": ["/usr/bin/prometheus", "--x"], "log": "l"}
        }}  # fmt: skip
        (tmp_path / "stack.json").write_text(json.dumps(state))
        assert down(tmp_path, grace=1) == []
        assert other.poll() is None  # the recycled PID was left alone
    finally:
        other.kill()
        other.wait()


def test_a_service_that_never_listens_fails_up_with_its_log(tmp_path: Path) -> None:
    bad = NativePlan(
        [Process("web", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"], {},
                 tmp_path, {}, ready_port=free_port())],
        skipped={},
        ports={},
    )  # fmt: skip
    with pytest.raises(StackError, match="boom"):
        up(bad, tmp_path, startup_timeout=10)
    down(tmp_path)


def test_a_readiness_url_holds_back_the_next_service_until_it_answers_200(
    tmp_path: Path,
) -> None:
    """``/readyz`` is a file the test creates after a while; ``up`` waits for it."""
    port = free_port()
    web = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
    url = f"http://127.0.0.1:{port}/readyz"
    later = Process("after", [sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path)
    ready = NativePlan(
        [Process("web", web, {}, tmp_path, {}, ready_url=url, ready_timeout=30), later],
        skipped={},
        ports={},
    )
    threading.Timer(1.5, lambda: (tmp_path / "readyz").write_text("ok")).start()
    started = time.monotonic()
    try:
        state = up(ready, tmp_path)
        assert time.monotonic() - started >= 1.4  # not before /readyz answered
        assert set(state["services"]) == {"web", "after"}
    finally:
        down(tmp_path, grace=5)
    never = NativePlan(
        [Process("web", web, {}, tmp_path, {}, ready_url=url + "-never", ready_timeout=2)],
        skipped={},
        ports={},
    )
    try:
        with pytest.raises(StackError, match=r"did not answer 200\) within 2 s"):
            up(never, tmp_path)
    finally:
        down(tmp_path, grace=5)


def test_waiting_shows_progress_with_the_log_and_exited_services(tmp_path: Path) -> None:
    """``stack up --wait`` is not silent: a line per period with the elapsed time, the server's
    last log line and any service that exited (here a real process that logs and ends)."""
    from io import StringIO

    from rich.console import Console

    from server.commands.stack import WaitProgress
    from server.stack.supervisor import last_log_line, wait_for

    script = (
        "import time\n"
        "for i in range(4):\n"
        "    print(f'[batch] {i}', flush=True)\n"
        "    time.sleep(0.5)\n"
    )
    logging = NativePlan(
        [
            Process("server", [sys.executable, "-c", script], {}, tmp_path),
            Process("helper", [sys.executable, "-c", "pass"], {}, tmp_path),
        ],
        skipped={},
        ports={},
    )
    up(logging, tmp_path)
    try:
        out = StringIO()
        console = Console(file=out, force_terminal=False, width=200)
        calls: list[float] = []

        def seen(elapsed: float, state: dict) -> None:
            calls.append(elapsed)
            progress(elapsed, state)

        with WaitProgress(console, "server", every=0.5) as progress:
            wait_for(tmp_path, "server", 30, on_wait=seen, poll=0.25)
        text = out.getvalue()
        assert calls and text.startswith("waiting for the server to finish")
        lines = [x for x in text.splitlines() if x.startswith("server running")]
        assert lines, text
        assert any("exited: helper" in x for x in lines), text
        assert any("log: [batch]" in x for x in lines), text  # markup-looking text kept
        state = read_state(tmp_path)
        assert state is not None
        assert last_log_line(state["services"]["server"]["log"]) == "[batch] 3"
    finally:
        down(tmp_path, grace=2)


def test_down_volumes_deletes_only_a_folder_that_up_marked(tmp_path: Path) -> None:
    """Issue 28: ``stack down -v --dir ~`` must not delete a home's ``logs/`` and ``volumes/``."""
    from server.stack.supervisor import MARKER, claim
    from simulator.errors import ConfigError

    home = tmp_path / "home"
    for name in ("logs", "volumes"):
        (home / name).mkdir(parents=True)
        (home / name / "mine.txt").write_text("mine")
    with pytest.raises(StackError, match=f"holds volumes, logs but no {MARKER}"):
        down(home, volumes=True)
    with pytest.raises(ConfigError, match=r"--dir: .* already holds logs and is not a stack"):
        claim(home)  # `stack up --dir ~` would mix its logs and volumes with these
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == [
        "logs",
        "logs/mine.txt",
        "volumes",
        "volumes/mine.txt",
    ]
    ours = tmp_path / "stack"
    claim(ours)  # what `up` does first
    for name in ("logs", "volumes", "flower-home"):
        (ours / name).mkdir()
        (ours / name / "f").write_text("x")
    assert down(ours, volumes=True) == []
    assert sorted(p.name for p in ours.iterdir()) == [MARKER]
