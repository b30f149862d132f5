"""``unlearnsim validate FILE...``: check scenario files without running them.

Each file goes through the schema (every key, type and range, with file, line and key) and then
the pre-flight checks of this machine (:mod:`simulator.scenario.preflight`: data files, optional
packages, an estimate of memory and time); ``--schema-only`` skips the latter. Exit status 2
when any file is refused (as every refusal of the command line), 0 when all pass.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape

from server.commands.run import add_scenario_input
from simulator.errors import ConfigError


def register(sub: Any) -> None:
    """Add the ``validate`` sub-command to the sub-parsers ``sub``."""
    p = sub.add_parser("validate", help="check scenario files without running them")
    add_scenario_input(p, many=True)
    p.add_argument(
        "--schema-only",
        action="store_true",
        help="check the files against the schema only (not this machine's data, packages, memory)",
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Check each scenario file (schema, then pre-flight); returns 2 if any is refused."""
    from simulator.reporting.console import hanging
    from simulator.scenario import load_scenario
    from simulator.scenario.preflight import machine_load, preflight

    bad = 0
    for path in args.files:
        try:
            scenario = load_scenario(path, overrides=args.overrides)
            report = None if args.schema_only else preflight(scenario, source=path)
            note = "" if report is None else f"  ({report.summary(load=machine_load())})"
            console.print(hanging("ok    ", f"{path}{note}", "green"))
        except ConfigError as exc:
            bad += 1
            for line in str(exc).splitlines():  # one line per problem
                console.print(f"[red]error[/] {escape(line)}", highlight=False, soft_wrap=True)
    return 2 if bad else 0
