"""``unlearnsim run --transport flower-sim|flower-deploy``: run on the chosen Flower engine."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from server.flower.settings import FleetSettings
from simulator.runner import RunResult
from simulator.scenario import Scenario


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
    if scenario.transport == "flower-sim":
        from server.flower.simulation import run_simulated

        return run_simulated(scenario, folder, settings, on_event=on_event, plots=not args.no_plots)
    from server.flower.deployment import run_deployed

    if on_event:
        console.print(
            "note: --metrics-port is not served for flower-deploy (the ServerApp "
            "runs under the SuperLink)"
        )
    return run_deployed(
        scenario,
        folder,
        settings,
        superlink=args.superlink,
        console=console,
        plots=not args.no_plots,
    )
