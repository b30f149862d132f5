"""``--transport flower-sim``: the federation on Flower's simulation engine (Ray), in this process.

The ServerApp runs in a thread of this process (``run_simulation``), each client is the same
``clients.client_app:app`` in a Ray worker, one virtual SuperNode per partition.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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
    with known_notices_silenced():
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


#: Notices the simulation engine prints on every run that say nothing about this run: Flower's
#: deprecation of ``run_simulation`` (which ``--transport flower-sim`` calls on purpose: the
#: ServerApp runs in this process) and Ray's FutureWarning about a future default for
#: ``CUDA_VISIBLE_DEVICES`` (the clients ask for no GPU either way).
FLOWER_NOTICES = ("`run_simulation` function is deprecated",)
RAY_NOTICES = r"Tip: In future versions of Ray, Ray will no longer override accelerator"


class _DropNotices(logging.Filter):
    """Drops the log records of :data:`FLOWER_NOTICES`."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(n in text for n in FLOWER_NOTICES)


@contextmanager
def known_notices_silenced() -> Iterator[None]:
    """Run the body without :data:`FLOWER_NOTICES` and :data:`RAY_NOTICES` on stderr.

    Every other log record and warning passes as before.
    """
    flwr_log = logging.getLogger("flwr")
    drop = _DropNotices()
    flwr_log.addFilter(drop)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=RAY_NOTICES, category=FutureWarning)
            yield
    finally:
        flwr_log.removeFilter(drop)


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
