"""The ``unlearnsim`` command line.

Each subcommand lives in ``server/commands/<name>.py`` with a ``register(subparsers)`` function
that adds its parser and sets ``handler``; this module only assembles them.

    unlearnsim run SCENARIO [--set key.path=value ...] [--output DIR] [--no-progress]
    unlearnsim validate FILE [FILE ...]
    unlearnsim --version

User errors (a bad scenario, option, file or port) print one ``error:`` line per problem and
exit 2, never a traceback; ``UNLEARNSIM_TRACEBACK=1`` shows the traceback instead. Output fits
the terminal's width, and :data:`PIPED_WIDTH` columns when it is not a terminal
(:func:`output_console`).

A command that needs an extra that is not installed says so in one line, with the command that
installs it (:mod:`server.extras`), and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape

from server.commands.legacy import legacy_words
from server.extras import missing_extra_message
from simulator.errors import UnlearnSimError

#: Modules under ``server.commands`` that register subcommands, in help order.
COMMANDS = ("run", "validate", "produce", "broker", "compare", "stack", "supernode")


def build_parser() -> argparse.ArgumentParser:
    """The ``unlearnsim`` argument parser, one sub-command per module of ``server.commands``."""
    p = argparse.ArgumentParser(
        prog="unlearnsim",
        description="Federated, streaming machine-unlearning simulator (DecoRemoval).",
    )
    p.add_argument("--version", action="version", version=f"unlearnsim {version()}")
    sub = p.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"server.commands.{name}").register(sub)
    return p


def version() -> str:
    """The installed package's version (``unknown`` when it is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("unlearnsim")
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``unlearnsim`` command line.

    Parameters
    ----------
    argv : the arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: the handler's, or 2 for a user error (printed on stderr).
    """
    given = list(sys.argv[1:] if argv is None else argv)
    words, note = legacy_words(given)
    if note is not None:
        Console(stderr=True).print(note, markup=False, highlight=False, soft_wrap=True)
    args = build_parser().parse_args(words)
    args.argv = ["unlearnsim", *given]  # for run.json
    try:
        return int(args.handler(args, output_console()))
    except ModuleNotFoundError as exc:  # a module of an extra that is not installed: one line
        message = missing_extra_message(exc, f"unlearnsim {args.command}")
        if message is None or os.environ.get("UNLEARNSIM_TRACEBACK"):
            raise
        return report_error(message)
    except (UnlearnSimError, OSError) as exc:
        if os.environ.get("UNLEARNSIM_TRACEBACK"):  # for debugging: the full traceback
            raise
        if isinstance(exc, UnlearnSimError):
            return report_error(str(exc))
        # a file or socket the user named: no traceback for it
        where = f" ({exc.filename})" if exc.filename else ""
        return report_error(f"{exc.strerror or exc}{where}")


#: Columns of output that is not a terminal (a pipe, a file): no line is wider (tables wrap
#: their cells at spaces and never cut a number; rich's default would be 80).
PIPED_WIDTH = 100


def output_console(**options: Any) -> Console:
    """A console on stdout: the terminal's width, or :data:`PIPED_WIDTH` when piped.

    ``COLUMNS`` in the environment still sets the width, as for any rich console; ``options``
    go to :class:`rich.console.Console` (e.g. ``highlight=False``).
    """
    console = Console(**options)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPED_WIDTH, **options)
    return console


def report_error(message: str) -> int:
    """Report a user error on stderr and return its exit status.

    Print ``error: <line>`` on stderr for each line of ``message`` (markup in it is text,
    never styling) and return the exit status of a user error, 2.
    """
    console = Console(stderr=True)
    for line in message.splitlines() or [""]:  # one line per problem
        console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
