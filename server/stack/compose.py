"""Reading ``docker/compose.yaml``: the services, their commands, environments, ports, volumes.

Only the parts of the Compose specification that the stack uses are read (``image``, ``build``,
``entrypoint``, ``command``, ``environment``, ``expose``, ``ports``, ``volumes``,
``depends_on``, ``healthcheck``); YAML anchors and merge keys are resolved by the YAML loader.
Commands must be lists (exec form), so that the native stack runs exactly the same argv.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
#: ``WORKDIR`` of our image (docker/Dockerfile): the repository root when run natively.
IMAGE_WORKDIR = "/app"
#: The image our Dockerfile builds; its default entrypoint is the ``unlearnsim`` command.
OUR_IMAGE = "unlearnsim:latest"


@dataclass(frozen=True)
class Mount:
    """A volume mount: a named volume (``volume`` set) or a bind mount (``source`` set)."""

    target: str
    volume: str = ""
    source: Path | None = None


@dataclass(frozen=True)
class Service:
    """One compose service, as the stack needs it."""

    name: str
    image: str
    entrypoint: tuple[str, ...]
    command: tuple[str, ...]
    environment: dict[str, str]
    expose: tuple[int, ...]
    published: tuple[str, ...]
    mounts: tuple[Mount, ...]
    depends_on: dict[str, str]
    healthcheck: bool
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def ours(self) -> bool:
        """Built from docker/Dockerfile (runs our commands)."""
        return self.image == OUR_IMAGE

    def argv(self) -> list[str]:
        """Entrypoint plus command; our image's default entrypoint is ``unlearnsim``."""
        entry = list(self.entrypoint) or (["unlearnsim"] if self.ours else [])
        return [*entry, *self.command]


@dataclass(frozen=True)
class Compose:
    """The services of a compose file, in file order, and its folder."""

    path: Path
    services: dict[str, Service]
    volumes: tuple[str, ...]

    def start_order(self) -> list[str]:
        """Services ordered so that each comes after everything it depends on."""
        done: list[str] = []
        visiting: set[str] = set()

        def visit(name: str) -> None:
            if name in done:
                return
            if name in visiting:
                raise ConfigError(f"depends_on cycle through '{name}'", str(self.path))
            visiting.add(name)
            for dep in self.services[name].depends_on:
                visit(dep)
            visiting.discard(name)
            done.append(name)

        for name in self.services:
            visit(name)
        return done


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str | int) for v in value):
        raise ConfigError("must be a list of strings (exec form)", where)
    return tuple(str(v) for v in value)


def _mount(spec: Any, folder: Path, volumes: tuple[str, ...], where: str) -> Mount:
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigError(f"volume '{spec}' is not SOURCE:TARGET[:ro]", where)
    source, target = spec.split(":")[:2]
    if source.startswith((".", "/")):
        return Mount(target, source=(folder / source).resolve())
    if source not in volumes:
        raise ConfigError(f"named volume '{source}' is not declared under volumes", where)
    return Mount(target, volume=source)


def _service(name: str, spec: dict[str, Any], folder: Path, volumes: tuple[str, ...]) -> Service:
    where = f"services.{name}"
    env = spec.get("environment") or {}
    if not isinstance(env, dict):
        raise ConfigError("environment must be a mapping", f"{where}.environment")
    depends = spec.get("depends_on") or {}
    if isinstance(depends, list):
        depends = {d: "service_started" for d in depends}
    return Service(
        name=name,
        image=str(spec.get("image", "")),
        entrypoint=_strings(spec.get("entrypoint"), f"{where}.entrypoint"),
        command=_strings(spec.get("command"), f"{where}.command"),
        environment={str(k): str(v) for k, v in env.items()},
        expose=tuple(int(p) for p in _strings(spec.get("expose"), f"{where}.expose")),
        published=_strings(spec.get("ports"), f"{where}.ports"),
        mounts=tuple(
            _mount(v, folder, volumes, f"{where}.volumes") for v in spec.get("volumes") or []
        ),
        depends_on={
            str(k): str((v or {}).get("condition", "service_started"))
            for k, v in (depends.items() if isinstance(depends, dict) else [])
        },
        healthcheck="healthcheck" in spec,
        raw=spec,
    )


def load_compose(path: Path = COMPOSE_FILE) -> Compose:
    """Parse a compose file; errors name the file and the key."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the compose file: {exc}", str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        raise ConfigError("no services", str(path))
    volumes = tuple(doc.get("volumes") or ())
    services = {
        str(n): _service(str(n), s, path.parent, volumes) for n, s in doc["services"].items()
    }
    for service in services.values():
        for dep in service.depends_on:
            if dep not in services:
                raise ConfigError(f"depends on unknown service '{dep}'", service.name)
    return Compose(path, services, volumes)
