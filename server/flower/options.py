"""The ``run`` command's Flower options (light: no torch, no flwr imports)."""

from __future__ import annotations

import argparse

from server.flower.settings import FleetSettings

TRANSPORTS = ("inprocess", "flower-sim", "flower-deploy")


def add_flower_options(parser: argparse.ArgumentParser) -> None:
    """``--transport``, ``--superlink``, ``--ray-address``, ``--client-timeout``."""
    parser.add_argument(
        "--transport",
        choices=TRANSPORTS,
        help="how the federation runs (default: the scenario's transport key)",
    )
    parser.add_argument(
        "--superlink",
        metavar="HOST:PORT",
        help="flower-deploy: submit to this running SuperLink instead of starting one "
        "(docs/flower.md)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="flower-sim: run the clients on this running Ray cluster (`auto`, or the head "
        "node's HOST:6379; default: $RAY_ADDRESS, else a Ray instance started for the run on "
        "this machine; docs/flower.md)",
    )
    parser.add_argument(
        "--client-timeout",
        type=float,
        metavar="SECONDS",
        help="Flower transports: wait this long for client replies before retrying or "
        f"reporting the client as failed (default {FleetSettings().timeout:g})",
    )


def transport_overrides(args: argparse.Namespace) -> list[str]:
    """``--transport X`` as a scenario override."""
    return [f"transport={args.transport}"] if getattr(args, "transport", None) else []
