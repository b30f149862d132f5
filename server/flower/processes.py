"""Processes of a local Deployment Engine: a SuperLink and one SuperNode per client.

Everything is started on 127.0.0.1 with free ports, each process in its own session (so its
process group id is its PID), logs under ``<run>/flower/``, and the PIDs in
``<run>/flower/processes.json``. The SuperNodes are warm (``unlearnsim supernode``, one
launcher process for all of them, ``server/flower/warm_nodes.py``): each runs with
``--isolation process`` next to a worker that imported torch and the ClientApp once, and they
opt in to shorter waits (:data:`LOCAL_POLL`, the SuperLink's ServerApp too). ``warm=False``
starts stock ``flower-supernode`` processes instead (a ``flwr-clientapp`` per message).
:meth:`LocalFederation.stop` stops exactly what was started: SIGTERM to each started process
group, then SIGKILL to whatever of those groups, and of the descendants recorded before
stopping (a SuperExec runs in a session of its own), is still alive after a grace period.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from server.flower.environment import POLL_ENV, flower_env
from server.processes import cmdline, descendants, executable, free_port, stop_trees, wait_for_port
from simulator.errors import UnlearnSimError


class FlowerProcessError(UnlearnSimError, RuntimeError):
    """A Flower process could not be started, or a Flower run failed."""


#: Shortest SuperNode wait of a local federation (``--poll``; cost in docs/flower.md).
LOCAL_POLL = 0.05
NODES_FILE = "nodes.json"  # the warm launcher's children


@dataclass
class LocalFederation:
    """A SuperLink and ``num_clients`` SuperNodes (partition ids 0..n-1) on 127.0.0.1.

    Use as a context manager; ``address`` is the SuperLink's address once started.
    """

    folder: Path
    num_clients: int
    startup_timeout: float = 60.0
    grace: float = 15.0
    superlink_env: dict[str, str] = field(default_factory=dict)
    warm: bool = True
    poll: float | None = LOCAL_POLL
    address: str = ""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    children: dict[str, int] = field(default_factory=dict)

    def __enter__(self) -> LocalFederation:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> str:
        """Start the SuperLink, wait for it, start the SuperNodes; return the address.

        Warm SuperNodes are still importing when this returns (:meth:`wait_ready`).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        polling = {POLL_ENV: str(self.poll)} if self.poll else {}
        link = self._spawn(
            "superlink",
            [
                executable("flower-superlink"),
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--disable-runtime-dependency-installation",
            ],
            extra_env={**polling, **self.superlink_env},
        )
        self.address = f"127.0.0.1:{port}"
        configs = [
            f"partition-id={c} num-partitions={self.num_clients}" for c in range(self.num_clients)
        ]
        if self.warm:  # its imports take longer than the SuperLink's start: no need to wait
            cmd = [executable("unlearnsim"), "supernode", "--insecure", "--superlink", self.address]
            for config in configs:
                cmd += ["--node-config", config, "--port", str(free_port())]
            cmd += ["--log-dir", str(self.folder), "--pid-file", str(self.folder / NODES_FILE)]
            cmd += ["--poll", str(self.poll)] if self.poll else []
            self._spawn("supernodes", cmd)
        if not wait_for_port(port, self.startup_timeout, link):
            if link.poll() is not None:
                raise FlowerProcessError(
                    f"the SuperLink exited with code {link.returncode} at start"
                )
            raise FlowerProcessError(
                f"the SuperLink did not listen on port {port} within {self.startup_timeout:g} s"
            )
        if not self.warm:
            for c, config in enumerate(configs):
                self._spawn(
                    f"supernode-{c}",
                    [
                        executable("flower-supernode"),
                        "--insecure",
                        "--superlink",
                        self.address,
                        "--port",
                        str(free_port()),
                        "--node-config",
                        config,
                    ],
                )
        self._record()
        return self.address

    def wait_ready(self) -> None:
        """Block until the warm launcher has started every SuperNode (its PID file)."""
        launcher = self.processes.get("supernodes")
        if launcher is None:
            return
        listing = self.folder / NODES_FILE
        deadline = time.monotonic() + self.startup_timeout
        while not listing.exists():
            if launcher.poll() is not None:
                log = (self.folder / "supernodes.log").read_text()[-2000:]
                raise FlowerProcessError(f"the SuperNodes' launcher exited at start:\n{log}")
            if time.monotonic() > deadline:
                raise FlowerProcessError(f"no SuperNodes within {self.startup_timeout:g} s")
            time.sleep(0.05)
        self.children = dict(json.loads(listing.read_text())["pids"])
        self._record()

    def _spawn(
        self, name: str, cmd: list[str], extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        env = flower_env(self.folder / "home" / name)
        env.update(extra_env or {})
        log = (self.folder / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.folder,
            start_new_session=True,
        )
        log.close()
        self.processes[name] = proc
        return proc

    def _record(self) -> None:
        pids = {name: p.pid for name, p in self.processes.items()} | self.children
        payload = {"superlink": self.address, "pids": pids}
        (self.folder / "processes.json").write_text(json.dumps(payload, indent=2) + "\n")

    def serverapp_running(self) -> bool:
        """Whether the SuperLink still runs a ``flwr-serverapp`` process."""
        link = self.processes.get("superlink")
        if link is None:
            return False
        return any("flwr-serverapp" in cmdline(pid) for pid in descendants([link.pid]))

    def stop(self) -> None:
        """Stop every process this object started (and their descendants)."""
        running = [p.pid for p in self.processes.values() if p.poll() is None]
        stop_trees(running, self.grace, reap=self.processes.values())
