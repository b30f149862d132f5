"""``--transport flower-deploy``: the federation on Flower's Deployment Engine.

Starts a local SuperLink and one SuperNode per client (:class:`LocalFederation`), or uses an
existing SuperLink (``--superlink HOST:PORT``, see ``docs/flower.md`` for several machines),
submits this project as a Flower app with ``flwr run`` (the ServerApp then runs under the
SuperLink, the ClientApps under the SuperNodes), waits for the run to finish while showing
its events, and stops what it started.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from server.cli import output_console
from server.flower.environment import flower_env
from server.flower.processes import LOCAL_POLL, FlowerProcessError, LocalFederation
from server.flower.settings import APP_DIR, ConsumerSettings, FleetSettings, RunSettings
from server.processes import executable
from simulator.scenario import Scenario, scenario_to_yaml

if TYPE_CHECKING:  # the run itself needs no torch here: imported once the run is over
    from simulator.runner.result import RunResult

CONNECTION = "unlearnsim"
TRANSPORT_FILE = "transport.json"  # the ServerApp's last file (server/server_app.py)


def run_deployed(  # noqa: PLR0913 (entry point: keyword-only run options, each defaulted)
    scenario: Scenario,
    folder: Path,
    settings: FleetSettings,
    *,
    superlink: str | None = None,
    console: Console | None = None,
    wall_limit: float = 6 * 3600.0,
    plots: bool = True,
    stream: ConsumerSettings | None = None,
    superlink_env: dict[str, str] | None = None,
    stock: bool = False,
) -> RunResult:
    """Run ``scenario`` on the Deployment Engine; outputs in ``folder`` (the ServerApp's).

    ``stream``: consume the Kafka requests topic instead of the scenario's stream.
    ``superlink_env``: extra environment of a SuperLink started here, which its ServerApp
    inherits (``UNLEARNSIM_METRICS_PORT`` serves the run's metrics from there).
    ``stock``: start Flower's own SuperNodes with Flower's own waits (no warm workers).
    """
    console = console or output_console()
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    flower = folder / "flower"
    scenario_file = flower / "scenario.yaml"
    flower.mkdir(exist_ok=True)
    scenario_file.write_text(scenario_to_yaml(scenario))
    local = (
        LocalFederation(
            flower,
            scenario.partition.num_clients,
            superlink_env=superlink_env or {},
            warm=not stock,
            poll=None if stock else LOCAL_POLL,
        )
        if superlink is None
        else nullcontext(None)
    )
    with _terminate_cleanly(), local as fed:
        address = fed.address if fed is not None else str(superlink)
        if fed is not None:
            console.print(f"started a SuperLink at {address} and {fed.num_clients} SuperNodes")
        home = flower / "home" / "cli"
        _write_connection(home, address)
        config = RunSettings(
            scenario=str(scenario_file),
            output_dir=str(folder),
            transport="flower-deploy",
            plots=plots,
            fleet=settings,
            kafka=stream or ConsumerSettings(),
        )
        run_id = _submit(home, flower, config)
        if fed is not None:
            fed.wait_ready()  # the SuperNodes imported torch while `flwr run` submitted
        console.print(f"Flower run {run_id} submitted; waiting for it to finish")
        status = _wait(home, run_id, folder, console, wall_limit, fed)
    from simulator.runner.result import RunResult

    if status != "finished:completed":
        raise FlowerProcessError(
            f"Flower run {run_id} ended as {status}; see {flower}/*.log and the run's events"
        )
    metrics = folder / "metrics.json"
    if not metrics.exists():  # a remote SuperLink: the ServerApp wrote the folder over there
        console.print(
            f"run {run_id} completed; its outputs are in {folder} on the SuperLink's machine"
        )
        return RunResult(folder, {}, [])
    from simulator.reporting.console import print_summary
    from simulator.reporting.run_report import read_headline, read_summary, read_verdict

    rows = read_summary(folder / "summary.md")  # the table every run prints
    verdict = read_verdict(folder / "summary.md")
    headline = read_headline(folder / "summary.md")
    print_summary(console, f"{scenario.name}: summary", rows, folder, verdict, headline=headline)
    return RunResult(folder, json.loads(metrics.read_text()), rows)


@contextmanager
def _terminate_cleanly() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into an exception for the duration of the block.

    SIGTERM/SIGHUP raise instead of killing the process, so the processes we started are
    stopped on the way out (a plain SIGTERM would skip every ``finally``).
    """

    def stop(signum: int, frame: object) -> None:
        raise FlowerProcessError(f"interrupted by signal {signum}; stopping the Flower processes")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _write_connection(home: Path, address: str) -> None:
    """Flower's config (``FLWR_HOME/config.toml``): one SuperLink connection named unlearnsim."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "{address}"\ninsecure = true\n'
    )


def _flwr(home: Path, args: list[str], timeout: float) -> dict[str, Any]:
    cmd = [executable("flwr"), *args, "--format", "json"]
    out = subprocess.run(
        cmd, capture_output=True, text=True, env=flower_env(home), cwd=APP_DIR, timeout=timeout
    )
    start = out.stdout.find("{")
    try:
        data: dict[str, Any] = json.loads(out.stdout[start:]) if start >= 0 else {}
    except json.JSONDecodeError:
        data = {}
    if out.returncode != 0 or not data.get("success", False):
        raise FlowerProcessError(
            f"`flwr {' '.join(args[:1])}` failed: {(out.stdout + out.stderr).strip()[-2000:]}"
        )
    return data


def _submit(home: Path, flower: Path, config: RunSettings) -> str:
    args = ["run", str(stage_app(flower / "app")), CONNECTION]
    for key, value in config.to_run_config().items():
        args += ["--run-config", f"{key}={json.dumps(value)}"]
    data = _flwr(home, args, timeout=300)
    run_id = str(data["run-id"])
    (flower / "run.json").write_text(json.dumps(data, indent=2) + "\n")
    return run_id


def stage_app(dest: Path) -> Path:
    """Copy the Flower app's files to ``dest``.

    The app's files (``fab-include`` of ``[tool.flwr.app]``, and ``pyproject.toml``) copied
    to ``dest``: ``flwr run`` walks every file under the folder it is given before it filters
    (in a checkout, the virtual environment's tens of thousands: seconds of a run's start).
    """
    project = tomllib.loads((APP_DIR / "pyproject.toml").read_text())
    shutil.rmtree(dest, ignore_errors=True)
    files = {APP_DIR / "pyproject.toml", APP_DIR / "README.md"}
    for pattern in project["tool"]["flwr"]["app"]["fab-include"]:
        files.update(f for f in APP_DIR.glob(pattern) if "__pycache__" not in f.parts)
    for source in sorted(f for f in files if f.is_file()):
        target = dest / source.relative_to(APP_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return dest


def _wait(
    home: Path,
    run_id: str,
    folder: Path,
    console: Console,
    wall_limit: float,
    fed: LocalFederation | None = None,
) -> str:
    """Wait for the run's status to be final, echoing new events; stop it past ``wall_limit``.

    The events are those the ServerApp appends to ``folder/events.jsonl``.

    ``flwr ls`` is a process start (one to several seconds on a loaded machine), so it is
    asked every 10 s, and every 0.5 s once the ServerApp has written its last file
    (``transport.json``) in a local run folder; with a local SuperLink (``fed``), only once
    its ServerApp process has exited (usually one call).
    """
    started = time.time()
    deadline = time.monotonic() + wall_limit
    events = folder / "events.jsonl"
    # an output folder reused from an earlier run keeps its events: show only the new ones
    shown = len(events.read_text().splitlines()) if events.exists() else 0
    next_ask = time.monotonic() + 10.0
    ending = None
    while True:
        shown = _echo_events(events, shown, console)
        if ending is None and _written_since(folder / TRANSPORT_FILE, started):
            ending, next_ask = time.monotonic(), 0.0
        exiting = (
            ending is not None
            and fed is not None
            and time.monotonic() < ending + 10.0
            and fed.serverapp_running()
        )
        if time.monotonic() >= next_ask and not exiting:
            runs = _flwr(home, ["ls", CONNECTION, "--run-id", run_id], timeout=120).get("runs", [])
            status = str(runs[0]["status"]) if runs else "unknown"
            if status.startswith("finished"):
                _echo_events(events, shown, console)
                return status
            next_ask = time.monotonic() + (0.5 if ending is not None else 10.0)
        if time.monotonic() > deadline:
            _flwr(home, ["stop", run_id, CONNECTION], timeout=120)
            raise FlowerProcessError(f"Flower run {run_id} exceeded {wall_limit:g} s; stopped")
        time.sleep(0.1 if ending is not None else 0.2)


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


def _echo_events(path: Path, shown: int, console: Console) -> int:
    if not path.exists():
        return shown
    lines = path.read_text().splitlines()
    for line in lines[shown:]:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return shown  # a line being written
        console.print(_describe(event), markup=False, highlight=False)
        shown += 1
    return shown


def _describe(event: dict[str, Any]) -> str:
    kind = event.get("event")
    if kind == "deletion_batch":
        failed = event.get("client_failures")
        return (
            f"batch {event.get('batch')}: {event.get('requests')} requests, "
            f"{event.get('rejected')} rejected, removed {event.get('removed_total')}"
            + (f", failed clients {failed}" if failed else "")
        )
    return f"{kind}"
