"""``unlearnsim run SCENARIO --stream kafka``: build (or reload) the federation, consume, summarise.

``server/commands/run.py`` calls :func:`run_kafka` when ``--stream kafka`` is given (or the
scenario says ``stream.source: kafka``); its options are in :mod:`server.kafka.options`. The
federation is built once per state folder and reloaded on restart (:mod:`server.kafka.restart`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from server.health import clear_stale_ready_file
from server.kafka.batcher import BatchConfig
from server.kafka.consumer import ConsumerConfig, EventHook
from server.kafka.gate import GateConfig
from server.kafka.session import consume
from server.kafka.settings import ConsumerSettings
from server.kafka.signing import load_key
from server.kafka.topics import Topics
from simulator.errors import ConfigError
from simulator.scenario import Scenario
from simulator.threads import thread_limits


def stream_from_args(args: argparse.Namespace) -> ConsumerSettings:
    """``run --stream kafka``'s options (:mod:`server.kafka.options`) as settings.

    Every option is named after its setting; paths are made absolute, ``--ownership`` is
    ``enforce`` or ``off`` and an unset signing option is ``""``.
    """
    if not args.bootstrap:
        raise ConfigError("--stream kafka needs --bootstrap HOST:PORT", "--bootstrap")
    given = vars(args)
    options = {name: given[name] for name in ConsumerSettings.model_fields if name in given}
    return ConsumerSettings(
        **{
            **options,
            "idle_timeout": args.idle_timeout or 0.0,
            "state_dir": _absolute(args.state_dir),
            "ready_file": _absolute(args.ready_file),
            "ownership": args.ownership == "enforce",
            "signing_key_env": args.signing_key_env or "",
            "signing_key_file": args.signing_key_file or "",
        }
    )


def _absolute(path: str | None) -> str:
    """``path`` resolved, or ``""`` when not given."""
    return str(Path(path).resolve()) if path else ""


def consumer_config(
    stream: ConsumerSettings,
    out: Path,
    scenario: Scenario,
    *,
    default_state: Path | None = None,
    fsync: bool = True,
) -> ConsumerConfig:
    """The consumer's configuration from its settings.

    State in ``stream.state_dir``, else ``default_state`` (else ``out/kafka-state``); batches
    of ``stream.max_batch_requests`` requests, else the scenario's
    ``stream.max_batch_requests``; the signing key is read here
    (:func:`server.kafka.signing.load_key`).
    """
    state = state_dir(stream, out, default_state)
    key = load_key(
        env_var=stream.signing_key_env or None,
        path=Path(stream.signing_key_file) if stream.signing_key_file else None,
    )
    gate = GateConfig(
        ownership=stream.ownership,
        signing_key=key,
        rate_limit=stream.subject_rate_limit,
        rate_window=stream.subject_rate_window,
    )
    return ConsumerConfig(
        bootstrap=stream.bootstrap,
        state_dir=state,
        topics=Topics.of(stream),
        group_id=stream.group,
        batch=BatchConfig(
            max_requests=stream.max_batch_requests or scenario.stream.max_batch_requests,
            max_wait=stream.max_wait,
        ),
        idle_timeout=stream.idle_timeout or None,
        fsync=fsync,
        gate=gate,
        on_offset_gap=stream.on_offset_gap,
        min_removal_batch=stream.min_removal_batch,
        snapshot_every=stream.snapshot_every,
    )


def state_dir(stream: ConsumerSettings, out: Path, default: Path | None = None) -> Path:
    """The checkpoint folder: ``stream.state_dir``, else ``default``, else ``out/kafka-state``."""
    return Path(stream.state_dir) if stream.state_dir else default or out / "kafka-state"


def ready_file(stream: ConsumerSettings, out: Path, default_state: Path | None = None) -> Path:
    """The ready file: ``stream.ready_file``, else ``ready`` in the state folder."""
    if stream.ready_file:
        return Path(stream.ready_file)
    return state_dir(stream, out, default_state) / "ready"


def as_kafka_source(scenario: Scenario) -> Scenario:
    """The scenario with ``stream.source: scenario``.

    The federation is built as usual (its generated stream is what ``produce`` sends), and the
    consumer supplies the requests.
    """
    return scenario.model_copy(
        update={"stream": scenario.stream.model_copy(update={"source": "scenario"})}
    )


def run_kafka(
    args: argparse.Namespace,
    scenario: Scenario,
    console: Console,
    on_event: Sequence[EventHook] = (),
) -> int:
    """Consume the requests topic with the in-process federation; the exit code.

    The federation is built on the first start and reloaded on a restart; the run is
    summarised at the end. Exit code 0, or 130 when a signal stopped it.
    """
    from server.kafka.restart import federation_for
    from simulator.runner import ReportingConfig

    out = Path(args.output or scenario.output_dir)
    stream = stream_from_args(args)
    config = consumer_config(stream, out, scenario, fsync=not args.no_fsync)
    scenario = as_kafka_source(scenario)
    ready = ready_file(stream, out)
    clear_stale_ready_file(ready)  # a killed consumer's file must not read as ready meanwhile
    with thread_limits(blas=args.blas_threads):
        started = time.perf_counter()
        with console.status(f"[bold]{scenario.name}[/]: loading the federation"):
            fed, reloaded = federation_for(scenario, config.state_dir, fsync=config.fsync)
        setup = time.perf_counter() - started
        if reloaded:
            console.print(f"federation reloaded from {config.state_dir} (no retraining)")
        options = ReportingConfig(console=console, plots=not args.no_plots, on_event=on_event)
        end = consume(fed, config, out, options, ready=ready, setup_seconds=setup)
    from simulator.runner.interrupt import EXIT_INTERRUPTED

    return EXIT_INTERRUPTED if end.get("interrupted") else 0
