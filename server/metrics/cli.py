"""``--metrics-port`` / ``--metrics-addr`` / ``--metrics-hold`` for commands that run scenarios.

Defaults come from ``UNLEARNSIM_METRICS_PORT`` (unset: no exporter),
``UNLEARNSIM_METRICS_ADDR`` (``127.0.0.1``; a container sets ``0.0.0.0`` so Prometheus in
another container can scrape it) and ``UNLEARNSIM_METRICS_HOLD`` (seconds to keep serving
after the run so the final values are scraped; default 0: when something has scraped the
exporter during the run, wait for one more scrape after a normal end, at most
``UNLEARNSIM_METRICS_FINAL_SCRAPE_WAIT`` seconds, 15 by default, so that Prometheus sees
``unlearn_run_finished 1``).
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
from simulator.errors import ConfigError

#: Seconds to wait, after a normal end, for one more scrape when a scraper has been seen
#: (``UNLEARNSIM_METRICS_FINAL_SCRAPE_WAIT``; the shipped Prometheus scrapes every 5 s).
FINAL_SCRAPE_WAIT = float(os.environ.get("UNLEARNSIM_METRICS_FINAL_SCRAPE_WAIT") or 15.0)


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
    addr = getattr(args, "metrics_addr", "127.0.0.1")
    with serving(port, addr, getattr(args, "metrics_hold", 0.0), console) as callbacks:
        yield callbacks


def env_metrics_session(console: Console) -> Any:
    """:func:`serving` configured by the ``UNLEARNSIM_METRICS_*`` environment variables alone.

    The Flower ServerApp uses this: it runs under the SuperLink (a process we do not start with
    our own options), which passes its environment down, so the exporter lives where the
    SuperLink runs (``docker/compose.yaml`` sets the variables on the ``superlink`` service).
    """
    port = os.environ.get("UNLEARNSIM_METRICS_PORT") or None
    return serving(
        None if port is None else int(port),
        os.environ.get("UNLEARNSIM_METRICS_ADDR", "127.0.0.1"),
        float(os.environ.get("UNLEARNSIM_METRICS_HOLD") or 0.0),
        console,
    )


@contextmanager
def serving(port: int | None, addr: str, hold: float, console: Console) -> Iterator[list[Callback]]:
    """Serve a metrics exporter for the duration of the block.

    A :class:`MetricsExporter` on ``addr:port`` (``None``: no exporter, no callbacks);
    after the block, keep serving ``hold`` seconds so the final values are scraped.
    """
    if port is None:
        yield []
        return
    exporter = MetricsExporter()
    try:
        bound = exporter.serve(port, addr=addr)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc} "
            "(another process on that port? 0: any free port)",
            "--metrics-port",
        ) from exc
    console.print(f"metrics on http://{addr}:{bound}/metrics")
    try:
        yield [exporter]
        if hold > 0:
            console.print(f"serving final metrics for {hold:g} s")
            time.sleep(hold)
        elif exporter.finished and exporter.scrapes:
            # something scrapes us: let it see unlearn_run_finished 1 before we go, so the
            # exporter-down alert knows this was a normal end
            console.print(f"waiting for the final scrape (at most {FINAL_SCRAPE_WAIT:g} s)")
            exporter.wait_for_scrape(FINAL_SCRAPE_WAIT)
    finally:
        exporter.close()
