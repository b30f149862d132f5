"""``unlearnsim produce SCENARIO --bootstrap HOST:PORT``: replay a scenario's deletion stream.

``--wait-ready URL|FILE`` first waits until the consumer is ready (its ``/readyz`` or its ready
file, :mod:`server.health`), so a paced stream is not sent to a consumer still building its
federation (the requests would pile up and be cut into a few large batches).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from server.commands.run import add_overrides
from server.kafka.options import add_signing_options, add_topic_options, topics_from
from server.kafka.settings import REQUEST_PARTITIONS
from simulator.errors import ConfigError


def register(sub: Any) -> None:
    """Add the ``produce`` sub-command to the sub-parsers ``sub``."""
    p = sub.add_parser(
        "produce",
        help="replay a scenario's deletion stream to the Kafka requests topic",
        description="Generate the scenario's deletion requests (no training needed) and send "
        "them to the requests topic, creating the topics first. Without --rate or "
        "--as-fast-as-possible, requests are sent at their scenario times "
        "(tick * stream.tick_seconds).",
    )
    p.add_argument("scenario", help="path to a scenario YAML")
    add_overrides(p)
    add_topic_options(p)
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--rate", type=float, metavar="R", help="requests per second")
    pace.add_argument("--as-fast-as-possible", action="store_true", help="no pacing")
    p.add_argument("--limit", type=int, metavar="N", help="send only the first N requests")
    p.add_argument(
        "--partitions",
        type=int,
        default=REQUEST_PARTITIONS,
        help="partitions of a new requests topic (default %(default)s)",
    )
    p.add_argument(
        "--wait-ready",
        metavar="URL|FILE",
        help="first wait until the consumer is ready: its readiness URL "
        "(http://127.0.0.1:PORT/readyz with run --metrics-port PORT) or its ready file "
        "(STATE_DIR/ready, or run --ready-file)",
    )
    p.add_argument(
        "--wait-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="give up (exit 2, nothing sent) when the consumer is not ready by then "
        "(default %(default)g)",
    )
    add_signing_options(p, "sign every request with the key")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Send the scenario's deletion requests to the requests topic; returns the exit status."""
    from pathlib import Path

    from server.kafka.producer import replay_requests, scenario_requests, send_times
    from server.kafka.signing import load_key
    from simulator.scenario import load_scenario

    if not args.bootstrap:
        raise ConfigError("needs --bootstrap HOST:PORT", "--bootstrap")
    scenario = load_scenario(args.scenario, overrides=args.overrides)
    requests = scenario_requests(scenario)[: args.limit]
    schedule = None
    if not args.as_fast_as_possible:
        schedule = send_times(requests, rate=args.rate, realtime=args.rate is None)
    topics = topics_from(args)
    key = load_key(
        env_var=args.signing_key_env,
        path=Path(args.signing_key_file) if args.signing_key_file else None,
    )
    if args.wait_ready:
        _wait_ready(args.wait_ready, args.wait_timeout, console)
    console.print(
        f"sending {len(requests)} requests of [bold]{scenario.name}[/] to {topics.requests} "
        f"at {args.bootstrap}" + (" (signed)" if key else "")
    )
    report = replay_requests(
        requests,
        bootstrap=args.bootstrap,
        topics=topics,
        schedule=schedule,
        request_partitions=args.partitions,
        on_sent=lambda n: console.print(f"  {n} sent"),
        signing_key=key,
    )
    console.print(f"sent {report.sent} requests in {report.seconds:.2f} s ({report.rate:.0f}/s)")
    return 0


def _wait_ready(target: str, timeout: float, console: Console) -> None:
    """Block until the consumer at ``target`` is ready (:func:`server.health.wait_until_ready`).

    Raises
    ------
    ConfigError
        It was not ready within ``timeout`` seconds (nothing is sent).
    """
    import time

    from server.health import wait_until_ready

    console.print(f"waiting for the consumer to be ready ({target})", highlight=False)
    started = time.monotonic()
    ready, why = wait_until_ready(target, timeout)
    if not ready:
        raise ConfigError(
            f"the consumer was not ready within {timeout:g} s ({why}); nothing was sent",
            "--wait-ready",
        )
    console.print(f"consumer ready after {time.monotonic() - started:.1f} s", highlight=False)
