"""The ``unlearnsim`` command line.

Each subcommand lives in ``server/commands/<name>.py`` with a ``register(subparsers)`` function
that adds its parser and sets ``handler``; this module only assembles them.

    unlearnsim run SCENARIO [--set key.path=value ...] [--output DIR] [--no-progress]
    unlearnsim validate FILE [FILE ...]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rich.console import Console

from simulator.errors import UnlearnSimError

#: Modules under ``server.commands`` that register subcommands, in help order.
COMMANDS = ("run", "validate", "produce", "broker", "compare", "runs", "stack", "supernode")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="unlearnsim",
        description="Federated, streaming machine-unlearning simulator (DecoRemoval).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"server.commands.{name}").register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = ["unlearnsim", *(sys.argv[1:] if argv is None else argv)]  # for run.json
    try:
        return int(args.handler(args, Console()))
    except UnlearnSimError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
