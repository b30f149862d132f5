r"""``unlearnsim supernode``: Flower SuperNodes with warm ClientApp workers (docs/flower.md).

    unlearnsim supernode --insecure --superlink SERVER:9091 --port 9094 \
        --node-config "partition-id=0 num-partitions=3"

Takes ``flower-supernode``'s main options (more after ``--``) and runs the SuperNode with
``--isolation process`` next to a long-lived worker that imported torch and the ClientApp once
(``server/flower/warm_nodes.py``). Several ``--node-config`` run several SuperNodes from one
process (one import for all). Stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from server.flower.environment import FLOWER_ENV, POLL_ENV, SUPERNODE_PORT


def register(sub: Any) -> None:
    """Add the ``supernode`` sub-command to the sub-parsers ``sub``."""
    p = sub.add_parser("supernode", help="Flower SuperNodes with warm ClientApp workers")
    p.add_argument(
        "--superlink", required=True, metavar="HOST:PORT", help="the SuperLink's Fleet API address"
    )
    p.add_argument(
        "--node-config",
        action="append",
        required=True,
        metavar="CONFIG",
        help="one SuperNode per occurrence, e.g. 'partition-id=0 num-partitions=3'",
    )
    p.add_argument(
        "--port",
        type=int,
        action="append",
        metavar="PORT",
        help="Runtime API port of each SuperNode on 127.0.0.1, in --node-config "
        f"order (default {SUPERNODE_PORT}, {SUPERNODE_PORT + 1}, ...)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="plain HTTP to the SuperLink (trusted networks only)",
    )
    p.add_argument(
        "--root-certificates",
        metavar="PEM",
        help="CA certificate that signed the SuperLink's TLS certificate",
    )
    p.add_argument(
        "--poll",
        type=float,
        metavar="SECONDS",
        help=f"opt in to shorter SuperNode waits (default: ${POLL_ENV}, else "
        "Flower's own; docs/flower.md has the idle-CPU cost)",
    )
    p.add_argument("--log-dir", type=Path, help="one log per SuperNode and worker here")
    p.add_argument("--pid-file", type=Path, help="write the children's PIDs here (JSON)")
    p.add_argument(
        "flower_args", nargs=argparse.REMAINDER, help="after --: more flower-supernode options"
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Run the warm SuperNodes until stopped; returns the exit status."""
    for key, value in FLOWER_ENV.items():  # no telemetry, no update check, no `uv sync`
        os.environ.setdefault(key, value)
    from server.flower.warm_nodes import launcher_from_args

    return launcher_from_args(args).run()
