"""``unlearnsim run SCENARIO``: run a scenario end to end (in-process or over Flower)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from server.flower.options import add_flower_options, transport_overrides
from server.kafka.options import add_consumer_options, uses_kafka
from server.metrics.cli import add_metrics_options, metrics_session


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
    add_metrics_options(p)
    add_consumer_options(p)
    add_flower_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from server.preflight import check_run
    from simulator.scenario import load_scenario

    scenario = load_scenario(args.scenario, overrides=[*args.overrides, *transport_overrides(args)])
    check_run(args, scenario, console)  # data, packages, memory, output, port, broker
    if scenario.transport == "flower-deploy":  # metrics are served by the ServerApp
        from server.flower.launch import run_flower

        run_flower(scenario, args, console)
        return 0
    with metrics_session(args, console) as callbacks:
        if scenario.transport != "inprocess":
            from server.flower.launch import run_flower

            run_flower(scenario, args, console, callbacks)
            return 0
        if uses_kafka(args, scenario):
            from server.kafka.launch import run_kafka

            return run_kafka(args, scenario, console, callbacks)
        from simulator.runner import run_scenario

        run_scenario(
            scenario,
            output_dir=args.output,
            console=console,
            progress=not args.no_progress,
            plots=not args.no_plots,
            on_event=callbacks,
        )
    return 0
