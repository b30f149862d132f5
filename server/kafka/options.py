"""Command-line options of the Kafka stream (light: imported when the CLI starts).

``run`` gets :func:`add_consumer_options`, ``produce`` :func:`add_topic_options`.
"""

from __future__ import annotations

import argparse

from server.kafka.batcher import BatchPolicy
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
    """Options of ``run --stream kafka``."""
    add_topic_options(parser)
    d = BatchPolicy()
    parser.add_argument(
        "--stream",
        choices=("scenario", "kafka"),
        help="where deletion requests come from (default: the scenario's stream.source)",
    )
    parser.add_argument("--group", default="unlearnsim", help="consumer group (offset commits)")
    parser.add_argument(
        "--state-dir", help="checkpoint folder (default: OUTPUT/kafka-state); reused on restart"
    )
    parser.add_argument(
        "--max-batch-requests",
        type=int,
        default=d.max_requests,
        help="most requests in one certified removal (default: %(default)s)",
    )
    parser.add_argument(
        "--max-wait",
        type=float,
        default=d.max_wait,
        metavar="SECONDS",
        help="longest wait for more requests once caught up (default: %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        metavar="SECONDS",
        help="stop after this long without a request (default: run until SIGTERM/SIGINT)",
    )
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="no fsync of checkpoints (safe against a process crash only)",
    )
    parser.add_argument(
        "--blas-threads", type=int, metavar="N", help="limit BLAS to N threads (default: as is)"
    )


def topics_from(args: argparse.Namespace) -> Topics:
    return Topics(args.requests_topic, args.receipts_topic, args.dead_letter_topic)


def uses_kafka(args: argparse.Namespace, scenario: Scenario) -> bool:
    """``--stream kafka``, or no ``--stream`` and ``stream.source: kafka`` in the scenario."""
    return bool((args.stream or scenario.stream.source) == "kafka")
