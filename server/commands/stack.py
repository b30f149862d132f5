"""``unlearnsim stack up|down|status``: docker/compose.yaml's services as local processes.

``up`` starts the bundled Kafka-compatible broker, Prometheus (when installed), a Flower
SuperLink and the SuperNodes, the server and the producer, with the compose file's commands and
environments on 127.0.0.1 (:mod:`server.stack.native`), and returns; ``--wait`` waits for the
server to finish and prints its summary. ``down`` stops exactly the processes ``up`` recorded.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from server.commands.run import add_overrides
from server.stack.compose import COMPOSE_FILE

if TYPE_CHECKING:
    from server.stack.native import NativePlan

DEFAULT_DIR = ".unlearnsim/stack"
SERVER = "server"


def register(sub: Any) -> None:
    """Add ``stack up``, ``stack down`` and ``stack status``, each with its own help."""
    p = sub.add_parser(
        "stack",
        help="run docker/compose.yaml's services as local processes (up, down, status)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="{up,down,status}")
    up = actions.add_parser("up", help="start the services on 127.0.0.1 and return (or --wait)")
    up.add_argument(
        "scenario",
        nargs="?",
        help="scenario of the server and the producer (default: the compose file's)",
    )
    add_overrides(up)
    up.add_argument("--compose", default=str(COMPOSE_FILE), help="compose file (default: ours)")
    up.add_argument(
        "--wait", action="store_true", help="wait until the server has finished, then print "
        "its summary",
    )  # fmt: skip
    up.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="--wait: give up after SECONDS (default %(default)g)",
    )
    down = actions.add_parser("down", help="stop exactly the processes that up recorded")
    down.add_argument(
        "-v",
        "--volumes",
        action="store_true",
        help="also delete the volumes (run outputs, Prometheus data) and logs",
    )
    status = actions.add_parser("status", help="each recorded service's PID and state")
    for q in (up, down, status):
        q.add_argument(
            "--dir", default=DEFAULT_DIR, help="state, logs and volumes (default %(default)s)"
        )
        q.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Bring the local stack up or down, or print its status; returns the exit status."""
    from server.stack import supervisor

    folder = Path(args.dir).resolve()
    if args.action == "down":
        stopped = supervisor.down(folder, volumes=args.volumes)
        console.print(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")
        return 0
    if args.action == "status":
        return _status(folder, console)
    from server.stack.compose import load_compose
    from server.stack.native import native_plan

    supervisor.claim(folder)  # before anything is written into it
    compose = load_compose(Path(args.compose))
    plan = native_plan(compose, folder, scenario=args.scenario, overrides=args.overrides)
    _check_clients(plan, args)
    try:
        state = supervisor.up(plan, folder)
    except BaseException:
        supervisor.down(folder)
        raise
    _show(state, plan.ports, console)
    if not args.wait:
        console.print("[bold]unlearnsim stack down[/] stops it all")
        return 0
    with WaitProgress(console, SERVER) as progress:
        supervisor.wait_for(folder, SERVER, args.timeout, on_wait=progress)
    out = _output_of(state["services"][SERVER]["argv"])
    summary = out / "metrics.json"
    if not summary.exists() or summary.stat().st_mtime < state["started_at"]:
        log = state["services"][SERVER]["log"]
        console.print(f"[red]the server ended without {summary}[/]; see {log}")
        return 1
    data = json.loads(summary.read_text()).get("kafka", {})
    keys = ("records", "applied", "rejected", "duplicates", "dead_letters", "batches")
    console.print("server finished: " + ", ".join(f"{k} {data.get(k)}" for k in keys))
    return 0


class WaitProgress:
    """Progress display of ``stack up --wait``.

    A live status line on a terminal (elapsed time, the
    server's last log line, services that exited), else one line every ``every`` seconds.
    """

    def __init__(self, console: Console, service: str, every: float = 15.0) -> None:
        self.console, self.service, self.every = console, service, every
        self._next = every
        self._status: Any = None

    def __enter__(self) -> WaitProgress:
        self.console.print(f"waiting for the {self.service} to finish (stack down to stop)")
        if self.console.is_terminal:
            self._status = self.console.status(f"waiting for the {self.service}")
            self._status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()

    def __call__(self, elapsed: float, state: dict[str, Any]) -> None:
        """Show progress at ``elapsed`` seconds, given the supervisor's ``state``."""
        from server.stack.supervisor import last_log_line, running

        services = state["services"]
        exited = [n for n, e in services.items() if n != self.service and not running(e)]
        line = last_log_line(services[self.service]["log"])
        text = f"{self.service} running {elapsed:.0f} s"
        if exited:
            text += f"; exited: {', '.join(exited)}"
        if line:
            text += f"; log: {line}"
        if self._status is not None:
            self._status.update(escape(text))
        elif elapsed >= self._next:
            self._next += self.every
            self.console.print(escape(text), highlight=False, soft_wrap=True)


def _check_clients(plan: NativePlan, args: argparse.Namespace) -> None:
    """The scenario's client count must match the compose file's SuperNodes."""
    from simulator.errors import ConfigError
    from simulator.scenario import load_scenario

    server = next(p for p in plan.processes if p.name == SERVER)
    scenario = load_scenario(Path(server.cwd) / server.argv[2], overrides=args.overrides)
    nodes = [p for p in plan.processes if p.name.startswith("supernode")]
    if scenario.partition.num_clients != len(nodes):
        raise ConfigError(
            f"the scenario has {scenario.partition.num_clients} clients but the compose file "
            f"defines {len(nodes)} SuperNodes",
            "partition.num_clients",
        )


def _output_of(argv: list[str]) -> Path:
    return Path(argv[argv.index("--output") + 1])


def _show(state: dict[str, Any], ports: dict[tuple[str, int], int], console: Console) -> None:
    table = Table(title=f"stack in {state['folder']}", expand=False)
    for col in ("service", "pid", "ports (container -> 127.0.0.1)", "log"):
        table.add_column(col)
    for name, entry in state["services"].items():
        mapped = ", ".join(f"{c}->{n}" for c, n in entry["ports"].items())
        log = Path(entry["log"])
        table.add_row(name, str(entry["pid"]), mapped, str(log.relative_to(state["folder"])))
    for name, why in state.get("skipped", {}).items():
        table.add_row(name, "-", "", f"skipped: {why}")
    console.print(table)
    if ("prometheus", 9090) in ports and "prometheus" in state["services"]:
        console.print(f"Prometheus: http://127.0.0.1:{ports[('prometheus', 9090)]}")


def _status(folder: Path, console: Console) -> int:
    from server.stack.supervisor import read_state, running

    state = read_state(folder)
    if state is None:
        console.print(f"no stack recorded in {folder}")
        return 1
    for name, entry in state["services"].items():
        console.print(f"{name:12s} pid {entry['pid']:>7}  {'up' if running(entry) else 'exited'}")
    return 0
