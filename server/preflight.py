"""Pre-flight checks of ``unlearnsim run`` (and ``validate``) that need the command line.

The scenario itself is checked by :func:`simulator.scenario.preflight.preflight` (data files,
optional packages, memory estimate). Here: what only the command knows before training
starts, each failing fast with a one-line :class:`~simulator.errors.ConfigError` naming the
option:

* the extras of the stream and transport are installed (``--stream kafka`` needs ``kafka``,
  a Flower transport ``flower``: :mod:`server.extras`);
* ``--output`` (or the scenario's ``output_dir``) is, or can become, a folder;
* ``--metrics-port`` can be bound on ``--metrics-addr``;
* with ``--stream kafka``, a ``--bootstrap`` is given (or the scenario's ``bootstrap``), every
  server in it accepts a TCP connection (within a few seconds), instead of discovering a wrong
  address after training, and the signing key (``--signing-key-file``/``-env``) can be read.

Nothing is written before these pass: a run refused here creates no run folder and leaves the
``latest`` link alone.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import time
from pathlib import Path

from rich.console import Console

from server.extras import require
from simulator.errors import ConfigError
from simulator.reporting.console import hanging
from simulator.scenario import Scenario
from simulator.scenario.preflight import PreflightReport, machine_load, preflight

#: Seconds to keep trying a Kafka bootstrap server before giving up.
BROKER_WAIT_SECONDS = 5.0


def check_output(path: str, option: str) -> None:
    """``path`` is a folder or can be created as one (no file in the way, writable parent).

    Raises
    ------
    ConfigError
        Naming ``option`` and what is in the way.
    """
    target = Path(path).expanduser()
    if target.exists():
        if not target.is_dir():
            raise ConfigError(f"{path} is a file, not a folder; give a folder", option)
        if not os.access(target, os.W_OK):
            raise ConfigError(f"{path} is not writable", option)
        return
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"cannot create {path}: {parent} is a file, not a folder", option)
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"cannot create {path}: {parent} is not writable", option)


def check_port(port: int | None, addr: str, option: str = "--metrics-port") -> None:
    """The port can be bound on ``addr`` now (0 and None always pass).

    Raises
    ------
    ConfigError
        When another process holds it, or ``addr`` is not an address of this machine.
    """
    if not port:
        return
    if not 0 < port < 65536:
        raise ConfigError(f"{port} is not a TCP port (1-65535, or 0 for any free port)", option)
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot resolve {addr}: {exc.strerror}", "--metrics-addr") from exc
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {addr} is already in use; choose another (0: any free port)",
                option,
            ) from exc
        raise ConfigError(f"cannot bind {addr}:{port}: {exc.strerror}", option) from exc
    finally:
        sock.close()


def _parse_bootstrap(server: str) -> tuple[str, int]:
    host, sep, port = server.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"expected HOST:PORT, got {server!r}", "--bootstrap")
    return host.strip("[]"), int(port)


def check_broker(bootstrap: str, wait: float = BROKER_WAIT_SECONDS) -> None:
    """Every comma-separated ``HOST:PORT`` of ``bootstrap`` accepts a TCP connection.

    Tries for up to ``wait`` seconds (a broker that is just starting), then fails.

    Raises
    ------
    ConfigError
        Naming ``--bootstrap`` and the server that did not answer.
    """
    for server in (s for s in bootstrap.split(",") if s.strip()):
        host, port = _parse_bootstrap(server)
        deadline = time.monotonic() + wait
        while True:
            try:
                with socket.create_connection((host, port), timeout=min(2.0, wait or 2.0)):
                    break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    why = exc.strerror or type(exc).__name__
                    raise ConfigError(
                        f"no Kafka broker answers at {host}:{port} ({why}, tried {wait:g} s); "
                        "start one (unlearnsim broker start) or fix the address",
                        "--bootstrap",
                    ) from exc
                time.sleep(0.25)


def check_ready_file(path: str | None) -> None:
    """``--ready-file`` is absent or a ready file a consumer wrote (it is replaced and deleted).

    Raises
    ------
    ConfigError
        Naming ``--ready-file``: it is a folder, or a file that is not a consumer's.
    """
    if not path or not Path(path).exists():
        return
    try:
        info = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = None
    if not isinstance(info, dict) or not {"pid", "ready_at"} <= set(info):
        raise ConfigError(
            f"{path} exists and is not a consumer's ready file; the consumer writes and deletes "
            "that file: give a path that does not exist",
            "--ready-file",
        )


def check_kafka(args: argparse.Namespace, scenario: Scenario) -> None:
    """``--stream kafka``'s options: a reachable ``--bootstrap`` and a readable signing key.

    The scenario's ``bootstrap`` stands in for a missing ``--bootstrap`` (``args.bootstrap``
    is set to it, so the consumer uses what was checked).

    Raises
    ------
    ConfigError
        Naming ``--bootstrap`` or the signing option.
    """
    from server.kafka.signing import load_key

    args.bootstrap = getattr(args, "bootstrap", None) or scenario.bootstrap
    if not args.bootstrap:
        raise ConfigError("--stream kafka needs --bootstrap HOST:PORT", "--bootstrap")
    check_broker(args.bootstrap)
    check_ready_file(getattr(args, "ready_file", None))
    if getattr(args, "superlink", None):  # the key is read on the SuperLink's machine
        return
    key_file = getattr(args, "signing_key_file", None)
    load_key(
        env_var=getattr(args, "signing_key_env", None) or None,
        path=Path(key_file) if key_file else None,
    )


def check_extras(args: argparse.Namespace, scenario: Scenario) -> None:
    """The extras of the run's stream and transport are installed (:mod:`server.extras`).

    The Kafka stream needs the ``kafka`` extra, a Flower transport the ``flower`` extra (and
    ``flower-sim`` Ray, which that extra installs only on some Pythons); each is named as the
    user chose it: ``--stream kafka``, or ``stream.source: kafka`` when the scenario chose it.

    Raises
    ------
    MissingExtraError
        In one line: the first extra missing and the command that installs it.
    """
    stream = getattr(args, "stream", None)
    if (stream or scenario.stream.source) == "kafka":
        require("--stream kafka" if stream else "stream.source: kafka", "kafka")
    transport = scenario.transport
    if transport != "inprocess":
        chosen = f"--transport {transport}" if getattr(args, "transport", None) else None
        ray = ("ray",) if transport == "flower-sim" else ()
        require(chosen or f"transport: {transport}", "flwr", *ray)


def check_run(
    args: argparse.Namespace, scenario: Scenario, console: Console, *, runs: int = 1
) -> PreflightReport:
    """Every pre-flight check of ``unlearnsim run``, before anything is built.

    ``runs``: the runs of a seeded sweep, for the time estimate (per run and in all).

    Raises
    ------
    MissingExtraError
        The stream or transport needs an extra that is not installed.
    ConfigError
        The first problem found (scenario problems all at once).
    """
    check_extras(args, scenario)  # first: without them nothing else matters
    report = preflight(scenario, source=str(args.scenario))
    output = getattr(args, "output", None)
    check_output(output or scenario.output_dir, "--output" if output else "output_dir")
    check_port(getattr(args, "metrics_port", None), getattr(args, "metrics_addr", "127.0.0.1"))
    if (getattr(args, "stream", None) or scenario.stream.source) == "kafka":
        check_kafka(args, scenario)
    console.print(hanging("pre-flight: ", report.summary(runs, machine_load())))
    return report
