"""``--transport flower-sim``: the federation on Flower's simulation engine (Ray), in this process.

The ServerApp runs in a thread of this process (``run_simulation``), each client is the same
``clients.client_app:app`` in a Ray worker, one virtual SuperNode per partition.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from server.flower.environment import apply_flower_env
from server.flower.settings import APP_DIR, ConsumerSettings, FleetSettings
from simulator.runner import RunResult
from simulator.scenario import Scenario

#: Pulls from the in-memory grid are cheap: poll often.
SIM_POLL_INTERVAL = 0.02


def run_simulated(
    scenario: Scenario,
    folder: Path,
    settings: FleetSettings,
    *,
    on_event: Sequence[Callable[[dict[str, Any], Any], None]] = (),
    plots: bool = True,
    stream: ConsumerSettings | None = None,
) -> RunResult:
    """Run ``scenario`` with ``num_clients`` simulated SuperNodes; outputs in ``folder``."""
    apply_flower_env(folder / "flwr-home")
    from flwr.simulation import run_simulation  # after the environment is set

    from server.server_app import make_server_app

    client_app = client_app_component()

    num = scenario.partition.num_clients
    results: list[RunResult] = []
    server_app = make_server_app(
        scenario,
        settings.model_copy(
            update={"poll_interval": min(settings.poll_interval, SIM_POLL_INTERVAL)}
        ),
        output_dir=folder,
        transport="flower-sim",
        results=results,
        on_event=on_event,
        plots=plots,
        stream=stream,
    )
    cpus = max(1, min(os.cpu_count() or 1, num))
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=num,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": cpus, "include_dashboard": False},
        },
    )
    if not results:
        raise RuntimeError("the Flower simulation ended without a result (see the log above)")
    return results[0]


def client_app_component() -> Any:
    """The ClientApp object that ``flwr run`` would load.

    It is named in pyproject.toml's ``[tool.flwr.app.components]``, as ``flwr run``
    loads it (by reference: the server package never imports the clients package, except the
    shared message protocol ``clients.protocol``).
    """
    import importlib
    import tomllib

    with (APP_DIR / "pyproject.toml").open("rb") as f:
        ref = tomllib.load(f)["tool"]["flwr"]["app"]["components"]["clientapp"]
    module, _, attr = str(ref).partition(":")
    return getattr(importlib.import_module(module), attr)
