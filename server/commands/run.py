"""``unlearnsim run SCENARIO``: run a scenario end to end (in-process or over Flower).

Every source and transport gets its folder and ``run.json`` here
(:mod:`simulator.runner.run_folder`): without ``--output`` a new
``<output_dir>/<timestamp>-<id>/`` (``latest`` points at it; a Kafka consumer whose
``latest`` folder holds its checkpoint resumes there); with ``--output DIR`` that folder if
empty, cleared with ``--overwrite`` when it is a run folder (its ``run.json`` written by
unlearnsim, nothing in it but a run's files; never the working directory, a home directory, a
filesystem root or the scenario's folder: :func:`~simulator.runner.run_folder.claim_folder`),
or kept when a Kafka consumer resumes its own checkpoint in it. A run refused at pre-flight
creates no folder and leaves ``latest`` alone. SIGINT/SIGTERM end the run with the outputs
marked interrupted and exit code 130, never a traceback (:mod:`simulator.runner.interrupt`).
``--seeds N --methods a,b`` runs a seeded sweep instead: the scenario once per seed and method,
each in its own run folder under one parent (:func:`run_sweep`, :mod:`simulator.runner.sweep`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from server.flower.options import add_flower_options, transport_overrides
from server.kafka.options import add_consumer_options, uses_kafka
from server.metrics.cli import add_metrics_options, metrics_session
from simulator.errors import ConfigError


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """The shared ``--set KEY=VALUE`` option."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set stream.phases.0.rate=50 (repeatable)",
    )


def add_scenario_input(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    """What every scenario command reads: the scenario YAML and its ``--set`` overrides.

    ``many``: one or more files (``args.files``) instead of one ``args.scenario``.
    """
    if many:
        parser.add_argument("files", nargs="+", help="paths to scenario YAMLs")
    else:
        parser.add_argument("scenario", help="path to a scenario YAML")
    add_overrides(parser)


def register(sub: Any) -> None:
    """Add the ``run`` sub-command to the sub-parsers ``sub``."""
    p = sub.add_parser("run", help="run a scenario YAML end to end")
    add_scenario_input(p)
    p.add_argument(
        "--output",
        help="output folder, used as given and refused if not empty (default: a new "
        "<timestamp>-<id> folder under the scenario's output_dir, with a 'latest' link)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="clear an earlier run's (or sweep's) --output folder first (only a folder holding "
        "a run.json of unlearnsim, or a sweep.json, and nothing but a run's files)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        metavar="N",
        help="a seeded sweep: run the scenario once per seed (its seed, +1, ...) and method "
        "(--methods), each in PARENT/<method>-seed<seed>/ (PARENT: --output, default "
        "<output_dir>/sweeps/<timestamp>-<id>); then: unlearnsim compare runs PARENT",
    )
    p.add_argument(
        "--methods",
        metavar="A,B",
        help="the methods of a seeded sweep, e.g. cr,decoremoval (default: the scenario's)",
    )
    p.add_argument(
        "--audit",
        action="store_true",
        help="where does membership leak? at every evaluation.checkpoints, score the model "
        "retrained from scratch (extractor included), the same extractor with the head "
        "retrained and the released head with the same attacks (sets evaluation.audit; "
        "writes audit.json and audit.md; transport inprocess, the scenario's stream)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_metrics_options(p)
    add_consumer_options(p)
    add_flower_options(p)
    group_options(p, RUN_GROUPS)
    p.set_defaults(handler=handle)


#: ``run --help``'s groups: each title and the destinations of its options, in order.
RUN_GROUPS: dict[str, tuple[str, ...]] = {
    "scenario": ("scenario", "overrides", "seeds", "methods", "audit"),
    "outputs": (
        "output", "overwrite", "no_progress", "no_plots", "metrics_port", "metrics_addr",
        "metrics_hold",
    ),
    "stream": (
        "stream", "bootstrap", "requests_topic", "receipts_topic", "dead_letter_topic", "group",
        "state_dir", "idle_timeout", "on_offset_gap", "ready_file", "ownership",
        "signing_key_env", "signing_key_file", "subject_rate_limit", "subject_rate_window",
    ),
    "federation": (
        "transport", "superlink", "ray_address", "client_timeout", "min_removal_batch",
    ),
    "performance": ("max_batch_requests", "max_wait", "snapshot_every", "no_fsync", "blas_threads"),
}  # fmt: skip


def group_options(parser: argparse.ArgumentParser, groups: dict[str, tuple[str, ...]]) -> None:
    """Show ``parser``'s arguments under the titled ``groups`` of its help (by destination).

    The options are added where they are defined (each adapter adds its own); this only moves
    each one into its group of the help, so ``--help`` reads by topic. An argument that no
    group names stays where it was.

    Raises
    ------
    KeyError
        A group names a destination that the parser does not have.
    """
    actions = {a.dest: a for a in parser._actions}
    for title, dests in groups.items():
        group = parser.add_argument_group(title)
        for dest in dests:
            action = actions[dest]
            for other in parser._action_groups:
                if action in other._group_actions:
                    other._group_actions.remove(action)
            group._group_actions.append(action)


def command_overrides(args: argparse.Namespace) -> list[str]:
    """The scenario overrides ``run``'s own options make: ``--transport``, ``--audit``."""
    audit = ["evaluation.audit=true"] if getattr(args, "audit", False) else []
    return [*transport_overrides(args), *audit]


def check_audit(args: argparse.Namespace, scenario: Any) -> None:
    """Refuse ``evaluation.audit`` on the Kafka stream (``--stream kafka``).

    The scenario refuses it itself on a Flower transport and with ``stream.source: kafka``;
    ``--stream kafka`` is the command line's: a consumer resumes across sessions, and the
    audit (:mod:`simulator.runner.run_audit`) is written from one run's checkpoints.

    Raises
    ------
    ConfigError
        Named ``evaluation.audit``.
    """
    if scenario.evaluation.audit and uses_kafka(args, scenario):
        raise ConfigError(
            "the membership audit runs on the scenario's own stream, not the Kafka stream: "
            "leave out --stream kafka or --audit",
            "evaluation.audit",
        )


def handle(args: argparse.Namespace, console: Console) -> int:
    """Check, then run the scenario in its run folder; the exit code (130: interrupted)."""
    from server.preflight import check_run
    from simulator.runner.interrupt import EXIT_INTERRUPTED, sigterm_as_interrupt
    from simulator.runner.run_folder import tracked
    from simulator.scenario import load_scenario

    scenario = load_scenario(args.scenario, overrides=[*args.overrides, *command_overrides(args)])
    check_audit(args, scenario)
    if args.seeds is not None or args.methods:
        return run_sweep(args, scenario, console)
    check_run(args, scenario, console)  # data, packages, memory, output, port, broker
    folder, extra = run_folder(args, scenario)  # only once the run can start
    args.output = str(folder)
    try:
        with (
            sigterm_as_interrupt(),
            tracked(folder, getattr(args, "argv", None), scenario=scenario.name, **extra),
        ):
            return _run(args, scenario, console)
    except KeyboardInterrupt:
        console.print(
            f"[bold yellow]interrupted[/]: the run stopped before its outputs were complete; "
            f"status in {folder / 'run.json'}",
            highlight=False,
        )
        return EXIT_INTERRUPTED


def run_sweep(args: argparse.Namespace, scenario: Any, console: Console) -> int:
    """Run a seeded sweep (:mod:`simulator.runner.sweep`); the exit code (130: interrupted).

    Every run's scenario is loaded (and so validated) and the first one checked at pre-flight
    before anything is written; the runs then go one by one, seed by seed, each in its own
    run folder with its own ``run.json``; an interrupted run ends the sweep.
    """
    import copy

    from server.preflight import check_run
    from simulator.owned_files import claim
    from simulator.runner.interrupt import EXIT_INTERRUPTED
    from simulator.runner.run_folder import new_run_folder, tracked
    from simulator.runner.sweep import parse_methods, sweep_outputs, sweep_plan, write_sweep
    from simulator.scenario import load_scenario

    if uses_kafka(args, scenario):
        raise ConfigError(
            "a seeded sweep plays the scenario's own stream once per seed; a Kafka topic is one "
            "stream: leave out --stream kafka (or run each seed with its own produce)",
            "--seeds",
        )
    methods = parse_methods(args.methods) if args.methods else [scenario.method]
    plan = sweep_plan(scenario.seed, 1 if args.seeds is None else args.seeds, methods)
    base = [*args.overrides, *command_overrides(args)]
    scenarios = {
        run: load_scenario(
            args.scenario, overrides=[*base, f"seed={run.seed}", f"method={run.method}"]
        )
        for run in plan
    }
    check_run(args, scenarios[plan[0]], console, runs=len(plan))
    if args.output:
        parent = claim(
            args.output,
            sweep_outputs(Path(args.output).expanduser()),
            "--output",
            overwrite=args.overwrite,
            keep=(args.scenario,),
            instead="leave out --output for a new sweep folder under the scenario's output_dir",
        )
    else:
        parent = new_run_folder(Path(scenario.output_dir) / "sweeps")
    write_sweep(parent, scenario.name, plan, getattr(args, "argv", None) or [])
    for i, run in enumerate(plan):
        child = parent / run.name
        console.print(
            f"[bold]sweep run {i + 1} of {len(plan)}[/]: {run.method}, seed {run.seed} -> {child}",
            highlight=False,
        )
        single = copy.copy(args)
        single.output, single.seeds, single.methods = str(child), None, None
        child.mkdir()
        try:
            with tracked(
                child, getattr(args, "argv", None), scenario=scenario.name, sweep=str(parent)
            ):
                code = _run(single, scenarios[run], console)
        except KeyboardInterrupt:
            code = EXIT_INTERRUPTED
        if code == EXIT_INTERRUPTED:
            console.print(
                f"[bold yellow]interrupted[/]: the sweep stopped at run {i + 1} of {len(plan)}"
            )
            return code
    console.print(
        f"sweep of {len(plan)} runs in [bold]{parent}[/]; paired verdicts: "
        f"unlearnsim compare runs {parent}",
        highlight=False,
    )
    return 0


def run_folder(args: argparse.Namespace, scenario: Any) -> tuple[Path, dict[str, Any]]:
    """The run's folder (module docstring) and extra ``run.json`` keys (the Kafka state dir)."""
    from simulator.runner.run_folder import claim_folder, latest_folder, new_run_folder

    kafka = uses_kafka(args, scenario)
    resumable = kafka and scenario.transport == "inprocess"
    given_state = Path(args.state_dir).resolve() if getattr(args, "state_dir", None) else None

    def state_of(folder: Path) -> Path:
        return given_state or (folder / "kafka-state").resolve()

    if args.output:
        folder = Path(args.output).expanduser()
        resume = resumable and _owns_checkpoint(folder, state_of(folder))
        keep = (args.scenario,) if getattr(args, "scenario", None) else ()
        claim_folder(folder, overwrite=args.overwrite, resume=resume, keep=keep)
    else:
        latest = latest_folder(scenario.output_dir) if resumable else None
        if latest is not None and _owns_checkpoint(latest, state_of(latest)):
            folder = latest  # the consumer resumes its checkpoint and appends to its folder
        else:
            folder = new_run_folder(scenario.output_dir)
    return folder, ({"kafka_state_dir": str(state_of(folder))} if kafka else {})


def _owns_checkpoint(folder: Path, state: Path) -> bool:
    """``state`` holds a consumer checkpoint that belongs to ``folder``.

    The checkpoint is inside ``folder``, or ``state`` is the state folder its ``run.json``
    records.
    """
    from server.kafka.checkpoint import NAME
    from server.kafka.restart import NAME as FEDERATION
    from simulator.runner.run_folder import read_manifest

    if not ((state / NAME).exists() or (state / FEDERATION).exists()):
        return False
    inside = state.is_relative_to(folder.resolve())
    return inside or read_manifest(folder).get("kafka_state_dir") == str(state)


def _run(args: argparse.Namespace, scenario: Any, console: Console) -> int:
    """Run on the scenario's transport, from its stream or Kafka; the exit code."""
    if scenario.transport == "flower-deploy":  # metrics are served by the ServerApp
        from server.flower.launch import run_flower

        return _exit_code(run_flower(scenario, args, console).final)
    with metrics_session(args, console) as callbacks:
        if scenario.transport != "inprocess":
            from server.flower.launch import run_flower

            return _exit_code(run_flower(scenario, args, console, callbacks).final)
        if uses_kafka(args, scenario):
            from server.kafka.launch import run_kafka

            return run_kafka(args, scenario, console, callbacks)
        from simulator.runner import ReportingConfig, run_scenario

        options = ReportingConfig(
            console=console,
            progress=not args.no_progress,
            plots=not args.no_plots,
            on_event=callbacks,
        )
        result = run_scenario(scenario, options, output_dir=args.output)
    return _exit_code(result.final)


def _exit_code(end: dict[str, Any]) -> int:
    """0, or 130 when a signal stopped the run (its end event says ``interrupted``)."""
    from simulator.runner.interrupt import EXIT_INTERRUPTED

    return EXIT_INTERRUPTED if end.get("interrupted") else 0
