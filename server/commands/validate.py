"""``unlearnsim validate FILE...``: check scenario files without running them."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from server.commands.run import add_overrides
from simulator.errors import ConfigError


def register(sub: Any) -> None:
    p = sub.add_parser("validate", help="check scenario files without running them")
    p.add_argument("files", nargs="+")
    add_overrides(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from simulator.scenario import load_scenario

    bad = 0
    for path in args.files:
        try:
            load_scenario(path, overrides=args.overrides)
            console.print(f"[green]ok[/]    {path}")
        except ConfigError as exc:
            bad += 1
            console.print(f"[red]error[/] {exc}", highlight=False)
    return 1 if bad else 0
