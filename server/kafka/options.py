"""Command-line options of the Kafka stream (light: imported when the CLI starts).

``run`` gets :func:`add_consumer_options`, ``produce`` :func:`add_topic_options`.
"""

from __future__ import annotations

import argparse

from server.kafka.settings import OFFSET_GAP_POLICIES, consumer_default
from server.kafka.topics import Topics
from simulator.scenario import Scenario


def add_topic_options(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap`` and the topic names."""
    d = Topics()
    parser.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap server")
    parser.add_argument("--requests-topic", default=d.requests, help="default: %(default)s")
    parser.add_argument("--receipts-topic", default=d.receipts, help="default: %(default)s")
    parser.add_argument("--dead-letter-topic", default=d.dead_letters, help="default: %(default)s")


def add_consumer_options(parser: argparse.ArgumentParser) -> None:
    """Options of ``run --stream kafka`` (defaults: :class:`ConsumerSettings`'s)."""
    add_topic_options(parser)
    parser.add_argument(
        "--stream",
        choices=("scenario", "kafka"),
        help="where deletion requests come from (default: the scenario's stream.source)",
    )
    add_setting(parser, "group", "consumer group (offset commits; default: %(default)s)")
    parser.add_argument(
        "--state-dir", help="checkpoint folder (default: OUTPUT/kafka-state); reused on restart"
    )
    add_setting(
        parser,
        "max_batch_requests",
        "most requests in one certified removal (default: the scenario's "
        "stream.max_batch_requests)",
    )
    add_setting(
        parser,
        "max_wait",
        "longest wait for more requests once caught up (default: %(default)s)",
        metavar="SECONDS",
    )
    add_setting(
        parser,
        "idle_timeout",
        "stop after this long without a request (default 0: run until SIGTERM/SIGINT)",
        metavar="SECONDS",
    )
    add_setting(
        parser,
        "snapshot_every",
        "write the full checkpoint (the head's state) every N batches and journal the batches "
        "between, re-applied on restart (default: %(default)s; 1: a full checkpoint per batch)",
        metavar="N",
    )
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="no fsync of checkpoints (safe against a process crash only)",
    )
    parser.add_argument(
        "--blas-threads", type=int, metavar="N", help="limit BLAS to N threads (default: as is)"
    )
    parser.add_argument(
        "--on-offset-gap",
        choices=OFFSET_GAP_POLICIES,
        default=consumer_default("on_offset_gap"),
        help="when the log no longer holds what the checkpoint expects: stop with an error "
        "(fail, default), re-read it from its earliest offset (replay), or go on past it (skip)",
    )
    parser.add_argument(
        "--ready-file",
        metavar="PATH",
        help="file that exists while the consumer is ready (default: STATE_DIR/ready)",
    )
    add_security_options(parser)


def add_setting(
    parser: argparse.ArgumentParser, name: str, text: str, *, metavar: str | None = None
) -> None:
    """``--NAME`` for the consumer setting ``name``, with the setting's type and default."""
    default = consumer_default(name)
    flag = "--" + name.replace("_", "-")
    parser.add_argument(flag, type=type(default), default=default, metavar=metavar, help=text)


def add_security_options(parser: argparse.ArgumentParser) -> None:
    """Who may delete what (docs/security.md)."""
    parser.add_argument(
        "--ownership",
        choices=("enforce", "off"),
        default="enforce" if consumer_default("ownership") else "off",
        help="apply a request only for rows its subject owns (default: %(default)s)",
    )
    add_signing_options(parser, "require requests signed with the key")
    add_setting(
        parser,
        "subject_rate_limit",
        "most requests one subject may have accepted per window; 0: no limit "
        "(default: %(default)s)",
        metavar="N",
    )
    add_setting(
        parser,
        "subject_rate_window",
        "the rate limit's window (default: %(default)s)",
        metavar="SECONDS",
    )
    add_setting(
        parser,
        "min_removal_batch",
        "hold a client's removals until they cover K rows, so that one removal message "
        "never describes fewer than K samples (default: %(default)s, no holding)",
        metavar="K",
    )


def add_signing_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--signing-key-env`` / ``--signing-key-file`` (a key is never given on the command line)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--signing-key-env",
        metavar="VAR",
        help=f"{what} in this environment variable (default: $UNLEARNSIM_SIGNING_KEY if set)",
    )
    group.add_argument("--signing-key-file", metavar="PATH", help=f"{what} in this file")


def topics_from(args: argparse.Namespace) -> Topics:
    """The topic names from the parsed command line."""
    return Topics(args.requests_topic, args.receipts_topic, args.dead_letter_topic)


def uses_kafka(args: argparse.Namespace, scenario: Scenario) -> bool:
    """``--stream kafka``, or no ``--stream`` and ``stream.source: kafka`` in the scenario."""
    return bool((args.stream or scenario.stream.source) == "kafka")
