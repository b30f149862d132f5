"""``unlearnsim run --transport flower-sim|flower-deploy``: run on the chosen Flower engine.

With ``--stream kafka`` the ServerApp consumes the requests topic (the same consumer options
as the in-process ``run --stream kafka``). On flower-deploy the ServerApp runs under the
SuperLink, so ``--metrics-port`` is handed to a SuperLink started here through its environment
(``UNLEARNSIM_METRICS_*``); a remote SuperLink serves metrics where its own environment says.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from server.flower.settings import ConsumerSettings, FleetSettings
from server.kafka.options import uses_kafka
from simulator.scenario import Scenario

if TYPE_CHECKING:
    from simulator.runner.result import RunResult


def metrics_env(args: argparse.Namespace) -> dict[str, str]:
    """``--metrics-*`` as the ``UNLEARNSIM_METRICS_*`` variables (empty without a port)."""
    if getattr(args, "metrics_port", None) is None:
        return {}
    return {
        "UNLEARNSIM_METRICS_PORT": str(args.metrics_port),
        "UNLEARNSIM_METRICS_ADDR": str(args.metrics_addr),
        "UNLEARNSIM_METRICS_HOLD": str(args.metrics_hold),
    }


def run_flower(
    scenario: Scenario,
    args: argparse.Namespace,
    console: Console,
    on_event: Sequence[Callable[[dict[str, Any], Any], None]] = (),
) -> RunResult:
    """Run ``scenario`` on its Flower transport; outputs where ``run`` would put them."""
    folder = Path(args.output or scenario.output_dir).resolve()
    timeout = {} if args.client_timeout is None else {"timeout": args.client_timeout}
    settings = FleetSettings(**timeout)
    stream = ConsumerSettings()
    if uses_kafka(args, scenario):
        from server.kafka.launch import stream_from_args

        stream = stream_from_args(args)
    if scenario.transport == "flower-sim":
        from server.flower.simulation import run_simulated

        return run_simulated(
            scenario,
            folder,
            settings,
            on_event=on_event,
            plots=not args.no_plots,
            stream=stream,
            ray_address=getattr(args, "ray_address", None),
        )
    from server.flower.deployment import run_deployed

    env = metrics_env(args)
    if env and args.superlink:
        console.print(
            "note: --metrics-port is not passed to a remote SuperLink; set "
            "UNLEARNSIM_METRICS_PORT in its environment (docs/flower.md)"
        )
    return run_deployed(
        scenario,
        folder,
        settings,
        superlink=args.superlink,
        console=console,
        plots=not args.no_plots,
        stream=stream,
        superlink_env=env,
    )
