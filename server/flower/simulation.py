"""``--transport flower-sim``: the federation on Flower's simulation engine (Ray), in this process.

The ServerApp runs in a thread of this process (``run_simulation``), each client is the same
``clients.client_app:app`` in a Ray worker, one virtual SuperNode per partition.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from server.flower.environment import apply_flower_env
from server.flower.settings import APP_DIR, ConsumerSettings, FleetSettings
from simulator.runner import RunResult
from simulator.scenario import Scenario

#: Pulls from the in-memory grid are cheap: poll often.
SIM_POLL_INTERVAL = 0.02


def run_simulated(  # noqa: PLR0913 (the run and its keyword-only options, defaulted)
    scenario: Scenario,
    folder: Path,
    settings: FleetSettings,
    *,
    on_event: Sequence[Callable[[dict[str, Any], Any], None]] = (),
    plots: bool = True,
    stream: ConsumerSettings | None = None,
    ray_address: str | None = None,
) -> RunResult:
    """Run ``scenario`` with ``num_clients`` simulated SuperNodes; outputs in ``folder``.

    ``ray_address``: a running Ray cluster for the clients (:func:`backend_config`).
    """
    apply_flower_env(folder / "flwr-home")
    from flwr.simulation import run_simulation  # after the environment is set

    from server.flower.sim_engine import one_pass_queue
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
    with known_notices_silenced(), one_pass_queue():
        run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=num,
            backend_config=backend_config(num, ray_address),
        )
    if not results:
        raise RuntimeError("the Flower simulation ended without a result (see the log above)")
    return results[0]


def backend_config(
    num_clients: int, address: str | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The Ray backend's config: one CPU per client actor, on this machine or a cluster.

    Parameters
    ----------
    num_clients : virtual SuperNodes of the run.
    address : a running Ray cluster (``auto``, or the head's ``HOST:PORT``); None or empty:
        ``RAY_ADDRESS`` of ``env`` (default ``os.environ``), and without it a Ray instance
        of this machine with one actor per core (at most one per client).
    env : the environment to read ``RAY_ADDRESS`` from.

    Returns
    -------
    dict
        ``backend_config`` of ``run_simulation``: with an address, Ray joins the cluster and
        Flower starts one client actor per CPU of all its nodes (``num_cpus`` may not be given
        then); without one, Ray starts here with ``num_cpus`` CPUs.
    """
    address = address or (os.environ if env is None else env).get("RAY_ADDRESS") or None
    init: dict[str, Any] = {"include_dashboard": False}
    if address:
        init["address"] = address
    else:
        init["num_cpus"] = max(1, min(os.cpu_count() or 1, num_clients))
    return {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": init}


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
