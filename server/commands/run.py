"""``unlearnsim run SCENARIO``: run a scenario end to end (in-process transport)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """The shared ``--set KEY=VALUE`` option."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set stream.phases.0.rate=50 (repeatable)",
    )


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run a scenario YAML end to end")
    p.add_argument("scenario", help="path to a scenario YAML")
    add_overrides(p)
    p.add_argument("--output", help="output folder (default: the scenario's output_dir)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from simulator.runner import run_scenario
    from simulator.scenario import load_scenario

    scenario = load_scenario(args.scenario, overrides=args.overrides)
    run_scenario(
        scenario,
        output_dir=args.output,
        console=console,
        progress=not args.no_progress,
        plots=not args.no_plots,
    )
    return 0
