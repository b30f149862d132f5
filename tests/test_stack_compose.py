"""docker/compose.yaml: it parses, and everything it names exists in this repository.

There is no Docker engine here, so the compose file is checked statically (every command
parses with our CLI or names an installed program, every mounted file and scenario exists,
every address points at a service that exposes that port, every environment variable is one our
code reads), and the native stack (``unlearnsim stack up``, tests/test_stack_native.py) runs the
same commands as processes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from server.cli import build_parser
from server.flower.environment import FLOWER_ENV
from server.stack.compose import COMPOSE_FILE, DOCKERFILE, IMAGE_WORKDIR, ROOT, load_compose
from server.stack.native import Rewriter, executable, native_plan
from simulator.scenario import load_scenario

COMPOSE = load_compose()
RAW = yaml.safe_load(COMPOSE_FILE.read_text())
OURS = [s for s in COMPOSE.services.values() if s.ours]
ADDRESS = re.compile(r"\b([a-z][\w-]*):(\d+)\b")


def test_services_and_start_order() -> None:
    names = set(COMPOSE.services)
    assert {"kafka", "superlink", "server", "producer", "prometheus", "grafana"} <= names
    order = COMPOSE.start_order()
    for name, service in COMPOSE.services.items():
        for dep in service.depends_on:
            assert order.index(dep) < order.index(name)
            if service.depends_on[dep] == "service_healthy":
                assert COMPOSE.services[dep].healthcheck, f"{name} waits for {dep}'s health"
    assert RAW["services"]["kafka"]["image"].startswith("apache/kafka:")
    assert RAW["services"]["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"


def test_our_services_build_from_the_dockerfile() -> None:
    dockerfile = DOCKERFILE.read_text()
    assert f"WORKDIR {IMAGE_WORKDIR}" in dockerfile and 'ENTRYPOINT ["unlearnsim"]' in dockerfile
    for service in OURS:
        build = service.raw["build"]
        assert (
            COMPOSE_FILE.parent / build["context"] / build["dockerfile"]
        ).resolve() == DOCKERFILE
    env = dict(re.findall(r"^\s*(?:ENV\s+)?(FLWR_\w+|RAY_\w+)=(\S+)", dockerfile, re.M))
    assert env == FLOWER_ENV, "the image's Flower settings differ from server/flower/environment"


def test_every_command_runs_here() -> None:
    """Our CLI parses each ``unlearnsim`` command; other entrypoints are installed programs;
    every scenario named exists and validates."""
    parser = build_parser()
    for service in OURS:
        argv = service.argv()
        if argv[0] == "unlearnsim":
            args = parser.parse_args(argv[1:])
            if args.command == "supernode":
                continue
            scenario = load_scenario(ROOT / args.scenario, overrides=args.overrides)
            assert scenario.name
        else:
            assert Path(executable(argv[0])).exists(), argv[0]


def test_mounts_addresses_and_environment_refer_to_real_things() -> None:
    exposed = {(s.name, p) for s in COMPOSE.services.values() for p in s.expose}
    read_by_code = set(
        re.findall(
            r"UNLEARNSIM_\w+",
            "".join(
                p.read_text() for d in ("server", "simulator") for p in (ROOT / d).rglob("*.py")
            ),
        )
    )
    for service in COMPOSE.services.values():
        for mount in service.mounts:
            assert mount.volume or (mount.source is not None and mount.source.exists()), mount
        texts = [*service.command, *service.environment.values()]
        if service.name == "prometheus":
            config = yaml.safe_load((ROOT / "docker/prometheus/prometheus.yml").read_text())
            texts += [
                t
                for j in config["scrape_configs"]
                for s in j["static_configs"]
                for t in s["targets"]
            ]
            for rule in config["rule_files"]:
                assert (ROOT / "docker/prometheus" / rule).exists()
        if service.name == "grafana":
            ds = (ROOT / "docker/grafana/provisioning/datasources/prometheus.yml").read_text()
            texts += re.findall(r"url: http://(\S+)", ds)
        for text in texts:
            for host, port in ADDRESS.findall(text):
                if host in COMPOSE.services and host != service.name:
                    assert (host, int(port)) in exposed, f"{service.name}: {host}:{port}"
        for key in service.environment:
            if key.startswith("UNLEARNSIM_"):
                assert key in read_by_code, key
    # the ServerApp serves metrics where the SuperLink runs, on the port Prometheus scrapes
    link = COMPOSE.services["superlink"]
    assert ("superlink", int(link.environment["UNLEARNSIM_METRICS_PORT"])) in exposed


def test_supernodes_match_the_stack_scenario() -> None:
    server = COMPOSE.services["server"].argv()
    scenario = load_scenario(ROOT / server[2])
    nodes = sorted(n for n in COMPOSE.services if n.startswith("supernode-"))
    assert len(nodes) == scenario.partition.num_clients
    configs = [COMPOSE.services[n].command[-1] for n in nodes]
    assert configs == [f"partition-id={i} num-partitions={len(nodes)}" for i in range(len(nodes))]


def test_only_documented_ports_on_loopback_and_no_secrets() -> None:
    published = {n: s.published for n, s in COMPOSE.services.items() if s.published}
    assert published == {
        "prometheus": ("127.0.0.1:9090:9090",),
        "grafana": ("127.0.0.1:3000:3000",),
    }
    for name, spec in RAW["services"].items():
        for key, value in (spec.get("environment") or {}).items():
            if re.search("PASSWORD|SECRET|TOKEN|KEY", key):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", str(value)), (name, key)
    assert "GF_SECURITY_ADMIN_PASSWORD" in RAW["services"]["grafana"]["environment"]


def test_native_rewrite_maps_containers_to_loopback(tmp_path: Path) -> None:
    ports = {("kafka", 9092): 1111, ("superlink", 9091): 2222, ("superlink", 9464): 3333}
    rw = Rewriter(COMPOSE, tmp_path, ports)
    assert rw("server", "kafka:9092") == "127.0.0.1:1111"
    assert rw("server", "superlink:9091") == "127.0.0.1:2222"
    assert rw("superlink", "9464") == "3333" and rw("server", "9464") == "9464"
    assert rw("superlink", "0.0.0.0") == "127.0.0.1"
    assert rw("prometheus", "--config.file=/etc/prometheus/prometheus.yml") == (
        f"--config.file={ROOT / 'docker/prometheus/prometheus.yml'}"
    )
    assert rw("server", "/app/runs/stack") == str(tmp_path / "volumes" / "runs" / "stack")
    assert rw("server", "/application") == "/application"


def test_native_plan_binds_loopback_only(tmp_path: Path) -> None:
    plan = native_plan(COMPOSE, tmp_path, scenario="scenarios/federation_tiny.yaml")
    for proc in plan.processes:
        joined = " ".join([*proc.argv, *proc.env.values()])
        assert "0.0.0.0" not in joined, proc.name
        for host, _ in ADDRESS.findall(joined):
            assert host not in COMPOSE.services, (proc.name, joined)
    server = next(p for p in plan.processes if p.name == "server")
    assert server.argv[2] == "scenarios/federation_tiny.yaml" and server.oneshot
    assert "grafana" in plan.skipped
    # the server is ready when the ServerApp's consumer is: /readyz on the SuperLink's metrics
    metrics = plan.ports[("superlink", 9464)]
    assert server.ready_url == f"http://127.0.0.1:{metrics}/readyz"
    assert server.ready_timeout == 600 + 12 * 5
    producer = next(p for p in plan.processes if p.name == "producer")
    order = [p.name for p in plan.processes]
    assert order.index("server") < order.index("producer") and producer.ready_url is None
    # warm SuperNodes, each with its own Runtime API port (one host here, three containers)
    nodes = [p for p in plan.processes if p.name.startswith("supernode-")]
    assert all(p.argv[1] == "supernode" and p.env["UNLEARNSIM_FLOWER_POLL"] for p in nodes)
    ports = {p.argv[p.argv.index("--port") + 1] for p in nodes}
    assert len(ports) == len(nodes) == 3 and "9094" not in ports


@pytest.mark.parametrize("bad", ["services: 3", "services: {a: {command: run}}"])
def test_malformed_compose_is_a_clear_error(tmp_path: Path, bad: str) -> None:
    from simulator.errors import ConfigError

    path = tmp_path / "compose.yaml"
    path.write_text(bad)
    with pytest.raises(ConfigError):
        load_compose(path)


def test_stack_up_refuses_a_scenario_that_does_not_fit_the_supernodes(tmp_path: Path) -> None:
    """quickstart has 5 clients, the compose file 3 SuperNodes: an error, nothing started."""
    from server.cli import main

    folder = tmp_path / "stack"
    assert main(["stack", "up", "scenarios/quickstart.yaml", "--dir", str(folder)]) == 2
    assert not (folder / "stack.json").exists()
    assert main(["stack", "status", "--dir", str(folder)]) == 1
