"""``unlearnsim supernode``: Flower SuperNodes with warm ClientApp workers.

One launcher process imports Flower, torch and the ClientApp once (:meth:`WarmApp.load`), then
forks, for each node:

* a SuperNode: Flower's own ``flower-supernode`` main, run in the child with
  ``--isolation process`` (it starts no SuperExec and no ``flwr-clientapp``), the stored-message
  hook that wakes the worker, and, opt-in, shorter waits (:class:`~.flwr_internals.Polling`);
* its worker (:func:`~.clientapp_worker.serve`), which claims every task on the SuperNode's
  Runtime API (``127.0.0.1:PORT``) and serves it in a child forked from the warm process.

Children share the launcher's imported pages (copy on write), so ten nodes cost one import of
torch, not ten. The launcher supervises: a worker that dies while its SuperNode lives is
forked again; a SuperNode that exits takes its worker along; SIGTERM/SIGINT stop everything;
the children die with the launcher (``PR_SET_PDEATHSIG``). ``--pid-file`` records every
child's PID (``supernode-N``, ``clientapp-N``, by partition id).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from server.flower import flwr_internals as fi
from server.flower.clientapp_worker import WarmApp, die_with_parent, exit_child, serve
from server.flower.environment import SUPERNODE_PORT
from server.processes import HOST
from simulator.errors import ConfigError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class NodeConfig:
    """One SuperNode: its ``--node-config`` and the port of its Runtime API on 127.0.0.1."""

    node_config: str
    port: int

    @property
    def name(self) -> str:
        """``partition-id`` of the node config (the node's stable identity), else the port."""
        for item in self.node_config.split():
            key, _, value = item.partition("=")
            if key == "partition-id":
                return value
        return f"port-{self.port}"


@dataclass
class Child:
    """A forked process the launcher supervises: a SuperNode or its ClientApp worker."""

    role: str  # "supernode" or "clientapp"
    node: NodeConfig
    pid: int


class Launcher:
    """Forks and supervises the SuperNodes and workers of ``nodes`` (see module doc)."""

    def __init__(
        self,
        superlink: str,
        nodes: list[NodeConfig],
        flower_args: list[str],
        *,
        polling: fi.Polling | None,
        log_dir: Path | None,
        pid_file: Path | None,
    ) -> None:
        self.superlink = superlink
        self.nodes = nodes
        self.flower_args = flower_args
        self.polling = polling
        self.log_dir = log_dir
        self.pid_file = pid_file
        self.children: dict[int, Child] = {}
        self.wakes: dict[int, int] = {}  # port -> read end of the SuperNode's wake-up pipe
        self.stopping = False

    # ------------------------------------------------------------ start
    def run(self) -> int:
        """Fork the SuperNodes and workers, supervise them until stopped; the exit status."""
        problems = fi.pin_problems()
        if problems:
            raise ConfigError(
                "this Flower is not the one the warm SuperNode was written for ("
                + "; ".join(problems)
                + "): start plain `flower-supernode` processes instead (docs/flower.md)",
                "flwr",
            )
        app = WarmApp.load()
        if self.polling is not None:
            fi.apply_pull_backoff(self.polling.fast)
        gc.freeze()  # fewer pages copied into the children
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._stop)
        for node in self.nodes:
            read, write = os.pipe()
            self.wakes[node.port] = read
            self._fork_supernode(node, read, write)
            os.close(write)  # only the SuperNode writes: its exit closes the pipe for the worker
            self._fork_worker(node, app)
        self._record()
        return self._supervise(app)

    def _fork_supernode(self, node: NodeConfig, read: int, write: int) -> None:
        argv = [
            "--superlink",
            self.superlink,
            "--isolation",
            "process",
            "--host",
            HOST,
            "--port",
            str(node.port),
            "--node-config",
            node.node_config,
            *self.flower_args,
        ]

        def wake() -> None:
            with contextlib.suppress(BlockingIOError, BrokenPipeError):
                os.write(write, b".")

        def main() -> None:
            os.close(read)
            os.set_blocking(write, False)
            fi.run_supernode(argv, on_message=wake, polling=self.polling)

        self._fork("supernode", node, main)

    def _fork_worker(self, node: NodeConfig, app: WarmApp) -> None:
        read = self.wakes[node.port]
        supernode = next(
            c.pid for c in self.children.values() if c.role == "supernode" and c.node == node
        )

        def main() -> None:
            print(f"warm ClientApp worker for SuperNode {node.name} on {HOST}:{node.port}")
            serve(f"{HOST}:{node.port}", app, wake=read, node_pid=supernode)

        self._fork("clientapp", node, main)

    def _fork(self, role: str, node: NodeConfig, main: Any) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        # no signal may run the launcher's handler in the child before it resets them
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        parent = os.getpid()
        pid = os.fork()
        if pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            self.children[pid] = Child(role, node, pid)
            return

        def child() -> int:
            try:
                for sig in STOP_SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                die_with_parent(parent)
                self._redirect(role, node)
                if len(self.nodes) > 1:  # one Flower home per node (installed FABs, state)
                    home = Path(os.environ.get("FLWR_HOME", Path.home() / ".flwr"))
                    os.environ["FLWR_HOME"] = str(home / f"node-{node.name}")
                main()
            except SystemExit as done:  # flwr's own exit (flwr_exit)
                return done.code if isinstance(done.code, int) else 1
            return 0

        exit_child(child)

    def _redirect(self, role: str, node: NodeConfig) -> None:
        if self.log_dir is None:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            self.log_dir / f"{role}-{node.name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    def _record(self) -> None:
        if self.pid_file is None:
            return
        pids = {f"{c.role}-{c.node.name}": c.pid for c in self.children.values()}
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"launcher": os.getpid(), "pids": pids}, indent=2) + "\n")
        tmp.replace(self.pid_file)

    # ------------------------------------------------------------ supervise
    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _supervise(self, app: WarmApp) -> int:
        """Wait for the children; return once every SuperNode has exited."""
        code = 0
        while any(c.role == "supernode" for c in self.children.values()):
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            child = self.children.pop(pid, None)
            if child is None:
                continue
            exit_code = os.waitstatus_to_exitcode(status)
            print(f"{child.role} {child.node.name} (pid {pid}) exited with {exit_code}")
            if child.role == "supernode":
                code = code or (0 if self.stopping else exit_code)
                for other in [c for c in self.children.values() if c.node == child.node]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(other.pid, signal.SIGTERM)
            elif not self.stopping and any(
                c.node == child.node and c.role == "supernode" for c in self.children.values()
            ):
                self._fork_worker(child.node, app)  # its SuperNode still needs it
                self._record()
        self._stop(signal.SIGTERM, None)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        return code


# ---------------------------------------------------------------------------- command
def launcher_from_args(args: argparse.Namespace) -> Launcher:
    """The :class:`Launcher` for the parsed ``unlearnsim supernode`` arguments."""
    configs: list[str] = args.node_config
    ports: list[int] = args.port or [SUPERNODE_PORT + i for i in range(len(configs))]
    if len(ports) != len(configs):
        raise ConfigError(
            f"{len(ports)} --port for {len(configs)} --node-config: give one per SuperNode",
            "supernode --port",
        )
    extra = [a for a in args.flower_args if a != "--"]
    if args.insecure:
        extra.insert(0, "--insecure")
    if args.root_certificates:
        extra[:0] = ["--root-certificates", args.root_certificates]
    try:
        polling = (
            fi.Polling(fast=args.poll, idle=max(1.0, args.poll))
            if args.poll
            else (fi.polling_from_env())
        )
    except ValueError as exc:
        raise ConfigError(str(exc), "supernode --poll") from None
    return Launcher(
        args.superlink,
        [NodeConfig(c, p) for c, p in zip(configs, ports, strict=True)],
        extra,
        polling=polling,
        log_dir=args.log_dir,
        pid_file=args.pid_file,
    )
