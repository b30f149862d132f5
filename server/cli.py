"""The ``unlearnsim`` command line.

    unlearnsim run SCENARIO [--set key.path=value ...] [--output DIR] [--no-progress]
    unlearnsim validate FILE [FILE ...]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from simulator.errors import UnlearnSimError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="unlearnsim",
        description="Federated, streaming machine-unlearning simulator (DecoRemoval).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario YAML end to end")
    run.add_argument("scenario", help="path to a scenario YAML")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set stream.phases.0.rate=50 (repeatable)",
    )
    run.add_argument("--output", help="output folder (default: the scenario's output_dir)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    val = sub.add_parser("validate", help="check scenario files without running them")
    val.add_argument("files", nargs="+")
    val.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console()
    err = Console(stderr=True)
    try:
        if args.command == "validate":
            return _validate(args.files, args.overrides, console)
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
    except UnlearnSimError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
        return 2


def _validate(files: Sequence[str], overrides: Sequence[str], console: Console) -> int:
    from simulator.scenario import load_scenario

    bad = 0
    for path in files:
        try:
            load_scenario(path, overrides=overrides)
            console.print(f"[green]ok[/]    {path}")
        except UnlearnSimError as exc:
            bad += 1
            console.print(f"[red]error[/] {exc}", highlight=False)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
