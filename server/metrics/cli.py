"""``--metrics-port`` / ``--metrics-addr`` / ``--metrics-hold`` for commands that run scenarios.

Defaults come from ``UNLEARNSIM_METRICS_PORT`` (unset: no exporter),
``UNLEARNSIM_METRICS_ADDR`` (``127.0.0.1``; a container sets ``0.0.0.0`` so Prometheus in
another container can scrape it) and ``UNLEARNSIM_METRICS_HOLD`` (seconds to keep serving
after the run so the final values are scraped; default 0).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from server.metrics.exporter import MetricsExporter


def add_metrics_options(parser: argparse.ArgumentParser) -> None:
    """Add the exporter options to a subcommand's parser."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        # a string default goes through ``type`` too: a bad value is a usage error
        default=os.environ.get("UNLEARNSIM_METRICS_PORT") or None,
        metavar="PORT",
        help="serve Prometheus metrics on this port during the run (0: any free port; "
        "default $UNLEARNSIM_METRICS_PORT, else off)",
    )
    parser.add_argument(
        "--metrics-addr",
        default=os.environ.get("UNLEARNSIM_METRICS_ADDR", "127.0.0.1"),
        metavar="ADDR",
        help="address the metrics endpoint binds (default 127.0.0.1)",
    )
    parser.add_argument(
        "--metrics-hold",
        type=float,
        default=os.environ.get("UNLEARNSIM_METRICS_HOLD") or 0.0,
        metavar="SECONDS",
        help="keep serving metrics this long after the run ends (default 0)",
    )


Callback = Callable[[dict[str, Any], Any], None]


@contextmanager
def metrics_session(args: argparse.Namespace, console: Console) -> Iterator[list[Callback]]:
    """Yield the ``on_event`` callbacks (empty without ``--metrics-port``); stop serving after."""
    port = getattr(args, "metrics_port", None)
    if port is None:
        yield []
        return
    exporter = MetricsExporter()
    bound = exporter.serve(port, addr=args.metrics_addr)
    console.print(f"metrics on http://{args.metrics_addr}:{bound}/metrics")
    try:
        yield [exporter]
        if args.metrics_hold > 0:
            console.print(f"serving final metrics for {args.metrics_hold:g} s")
            time.sleep(args.metrics_hold)
    finally:
        exporter.close()
