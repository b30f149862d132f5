"""``unlearnsim compare``: one family of comparison commands.

    unlearnsim compare run SCENARIO [--methods a,b] [--seeds N] [--output DIR] [--audit]
    unlearnsim compare runs DIR DIR... [--output OUT]      finished runs side by side
    unlearnsim compare summary FOLDER...                   one DR - CR verdict table
    unlearnsim compare retable FOLDER...                   tables rewritten from runs.csv

``compare run`` fits every unlearning method on the same data, seeds and stream, and writes
``table.md`` (paper-style tables), ``summary.csv`` (mean and std per method and removal
count), ``runs.csv`` (every seed), ``fits.json``, ``command.txt`` and PNG plots, and with
``--audit`` ``audit.json`` and ``audit.png`` (where membership leaks:
:mod:`simulator.compare.audit`), into a new ``runs/compare/<scenario name>/<timestamp>-<id>/``
(``latest`` points at it) or ``--output DIR``: refused before any fitting when DIR is not
empty, unless ``--overwrite`` and DIR is an earlier comparison's folder (its ``fits.json``,
nothing but a comparison's files: :func:`simulator.owned_files.claim`). ``compare runs`` is
:mod:`server.commands.runs`.

The names of the previous release (``compare SCENARIO``, ``compare-summary``,
``compare-retable``, ``runs compare``) still work, with a note
(:mod:`server.commands.legacy`).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from server.commands.run import add_scenario_input
from simulator.errors import ConfigError

#: Where a comparison writes without ``--output`` (under ``runs/``, which git ignores).
COMPARE_ROOT = "runs/compare"


def register(sub: Any) -> None:
    """Add ``compare`` and its actions (``run``, ``runs``, ``summary``, ``retable``)."""
    from server.commands.runs import register_runs

    family = sub.add_parser(
        "compare",
        help="compare unlearning methods (run), finished runs (runs), comparisons (summary, "
        "retable)",
    ).add_subparsers(dest="compare_command", required=True, metavar="{run,runs,summary,retable}")
    p = family.add_parser(
        "run", help="compare unlearning methods on one scenario (paper-style tables)"
    )
    add_scenario_input(p)
    p.add_argument(
        "--methods",
        default=None,
        help="comma-separated method names (default: every registered method)",
    )
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (scenario seed + i)")
    p.add_argument(
        "--checkpoints",
        default=None,
        help="comma-separated removal counts to evaluate at (default: evaluation.checkpoints)",
    )
    p.add_argument(
        "--option",
        dest="options",
        action="append",
        default=[],
        metavar="METHOD.KEY=VALUE",
        help="a method option, e.g. --option sisa.slices=2 (repeatable)",
    )
    p.add_argument(
        "--output",
        help="output folder, refused if not empty (default: a new <timestamp>-<id> folder under "
        f"{COMPARE_ROOT}/<scenario name>, with a 'latest' link)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="clear an earlier comparison's --output folder first (only a folder holding its "
        "fits.json and nothing but a comparison's files)",
    )
    p.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: fastest for these small networks)",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument(
        "--regime",
        choices=("paper", "legacy"),
        default="paper",
        help="certificate regime: paper (default: the scenario's own head.sigma, head.delta "
        "and rff.dim, as written; the shipped compare_*.yaml hold the paper's sigma 1, delta "
        "1e-3, 1000 features) or legacy (sets sigma 10, delta 1e-4, 512 features: the earlier "
        "comparison); the regime in use is printed first",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny data (300 training rows, 1 epoch, checkpoints 10,30): proves the pipeline "
        "end to end in seconds, measures nothing (CI)",
    )
    p.add_argument(
        "--no-retrain",
        action="store_true",
        help="do not add the retrain reference (saves its per-batch retraining on large data; "
        "the distance-to-retrain columns are then n/a)",
    )
    p.add_argument(
        "--audit",
        action="store_true",
        help="also audit where membership leaks at the final removed set: each head-based "
        "method's model (c) against its extractor with the head retrained from scratch (b) and "
        "the model retrained from scratch, extractor included (a); writes audit.json, "
        "audit.png and a section of table.md (needs the retrain baseline)",
    )
    p.set_defaults(handler=handle)
    register_runs(family)
    q = family.add_parser(
        "summary",
        help="one DR - CR verdict table over comparison folders (last removal count)",
    )
    q.add_argument("folders", nargs="+", help="folders written by unlearnsim compare run")
    q.add_argument("--metric", choices=("acc", "f1"), default="acc")
    q.set_defaults(handler=handle_summary)
    r = family.add_parser(
        "retable",
        help="rewrite a comparison folder's tables and verdicts from its runs.csv",
    )
    r.add_argument("folders", nargs="+", help="folders written by unlearnsim compare run")
    r.set_defaults(handler=handle_retable)


def handle_retable(args: argparse.Namespace, console: Console) -> int:
    """Rewrite each comparison folder's tables and verdicts from its ``runs.csv``."""
    from simulator.compare.report import retable

    for folder in args.folders:
        retable(Path(folder))
        console.print(f"rewrote the tables of {folder}")
    return 0


def handle_summary(args: argparse.Namespace, console: Console) -> int:
    """Print one DR - CR verdict table over the comparison folders."""
    from simulator.compare.summary import summary_markdown

    text = summary_markdown([Path(f) for f in args.folders], args.metric)
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    return 0


def parse_methods(text: str | None, *, reference: bool = True) -> list[str]:
    """Method names from ``a,b,c``.

    ``retrain`` is added first when missing (the reference), unless ``reference`` is False.
    """
    from simulator.unlearners import registered_unlearners, unlearner_class

    names = (
        list(registered_unlearners())
        if text is None
        else [t.strip() for t in text.split(",") if t.strip()]
    )
    if not names:
        raise ConfigError("give at least one method", "--methods")
    if len(set(names)) != len(names):
        raise ConfigError(f"a method is named twice: {names}", "--methods")
    for name in names:
        unlearner_class(name)
    return names if "retrain" in names or not reference else ["retrain", *names]


def parse_options(items: list[str], methods: list[str]) -> dict[str, dict[str, Any]]:
    """``METHOD.KEY=VALUE`` items (VALUE read as YAML) grouped by method."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        method, dot, option = key.partition(".")
        if not sep or not dot or not option:
            raise ConfigError(f"expected METHOD.KEY=VALUE, got {item!r}", "--option")
        if method not in methods:
            raise ConfigError(f"method {method!r} is not compared ({methods})", "--option")
        out.setdefault(method, {})[option] = yaml.safe_load(value)
    return out


def parse_checkpoints(text: str | None) -> list[int] | None:
    """Removal counts from ``25,75,200`` (None: the scenario's ``evaluation.checkpoints``)."""
    if text is None:
        return None
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ConfigError(
            f"expected integers like 25,75,200, got {text!r}", "--checkpoints"
        ) from None
    if not values or min(values) < 1:
        raise ConfigError("checkpoints must be positive integers", "--checkpoints")
    return values


def audit_config(args: argparse.Namespace, methods: list[str], references: int) -> Any:
    """The audit's settings when ``--audit`` is given (None otherwise), checked before fitting.

    Raises
    ------
    ConfigError
        ``--audit`` without the retrain baseline, or without a head-based method to audit.
    """
    if not args.audit:
        return None
    from simulator.compare.audit import AuditConfig
    from simulator.compare.harness import MIA_SAMPLES
    from simulator.unlearners import unlearner_class
    from simulator.unlearners.headbased import CertifiedHeadUnlearner

    if "retrain" not in methods:
        raise ConfigError(
            "the audit compares with the retrain baseline: drop --no-retrain", "--audit"
        )
    if not any(issubclass(unlearner_class(m), CertifiedHeadUnlearner) for m in methods):
        raise ConfigError(
            "the audit needs a head-based method (cr, decoremoval, decoremoval_extractor, "
            f"retrain_head); got {', '.join(methods)}",
            "--audit",
        )
    return AuditConfig(references=references, max_samples=MIA_SAMPLES)


def command_line(args: argparse.Namespace, folder: Path) -> str:
    """The command that reproduces this comparison, every choice spelt out."""
    parts = [
        "unlearnsim",
        "compare",
        "run",
        args.scenario,
        "--methods",
        ",".join(parse_methods(args.methods, reference=not args.no_retrain)),
    ]
    parts += ["--seeds", str(args.seeds)]
    if args.regime != "paper":
        parts += ["--regime", args.regime]
    if args.quick:
        parts.append("--quick")
    if args.no_retrain:
        parts.append("--no-retrain")
    if args.audit:
        parts.append("--audit")
    if args.checkpoints is not None:
        parts += ["--checkpoints", args.checkpoints]
    for item in args.options:
        parts += ["--option", item]
    for item in args.overrides:
        parts += ["--set", item]
    parts += ["--torch-threads", str(args.torch_threads), "--output", str(folder)]
    if args.no_plots:
        parts.append("--no-plots")
    return " ".join(shlex.quote(p) for p in parts)


def comparison_folder(args: argparse.Namespace, name: str) -> Path:
    """The comparison's folder: ``--output`` claimed, or a new one under :data:`COMPARE_ROOT`.

    Raises
    ------
    ConfigError
        ``--output`` is not empty and not an earlier comparison's to clear with
        ``--overwrite`` (:func:`simulator.owned_files.claim`); nothing is deleted then.
    """
    from simulator.compare.report import comparison_outputs
    from simulator.owned_files import claim
    from simulator.runner.run_folder import new_run_folder

    if not args.output:
        return new_run_folder(Path(COMPARE_ROOT) / name)
    return claim(
        args.output,
        comparison_outputs(),
        "--output",
        overwrite=args.overwrite,
        keep=(args.scenario,),
        instead=f"leave out --output for a new folder under {COMPARE_ROOT}/{name}",
    )


def handle(args: argparse.Namespace, console: Console) -> int:
    """Compare the methods over the seeds; write and print the tables."""
    from simulator.compare import build_workload, run_comparison, write_comparison
    from simulator.compare.profiles import QUICK, QUICK_CHECKPOINTS, REGIMES
    from simulator.scenario import load_scenario
    from simulator.threads import thread_limits

    profile = [*REGIMES[args.regime], *(QUICK if args.quick else ())]
    scenario = load_scenario(args.scenario, overrides=[*profile, *args.overrides])
    methods = parse_methods(args.methods, reference=not args.no_retrain)
    options = parse_options(args.options, methods)
    checkpoints = parse_checkpoints(args.checkpoints)
    if args.quick and checkpoints is None:
        checkpoints = list(QUICK_CHECKPOINTS)
    if args.seeds < 1:
        raise ConfigError("must be >= 1", "--seeds")
    audit = audit_config(args, methods, scenario.evaluation.lira_references)
    seeds = [scenario.seed + i for i in range(args.seeds)]
    folder = comparison_folder(args, scenario.name)  # before hours of fitting, not after
    console.print(f"comparing {', '.join(methods)} on {scenario.name}, seeds {seeds}")
    console.print(
        f"  regime {args.regime}: sigma {scenario.head.sigma:g}, delta {scenario.head.delta:g}, "
        f"{scenario.rff.dim} random features",
        highlight=False,
    )

    command = command_line(args, folder)

    def partial(done: Any) -> None:
        """Write the seeds finished so far (a long run killed later keeps them)."""
        if len(done.seeds) < len(seeds):
            write_comparison(done, folder, command=command, plots=False)
            console.print(f"  wrote seeds {list(done.seeds)} to {folder}", highlight=False)

    with thread_limits(torch=args.torch_threads):
        comparison = run_comparison(
            lambda seed: build_workload(scenario, seed, checkpoints=checkpoints),
            methods,
            seeds=seeds,
            options=options,
            progress=lambda text: console.print(f"  {text}", highlight=False),
            on_seed=partial,
            audit=audit,
        )
        # inside the limits: fits.json records the torch threads the fits ran with
        files = write_comparison(comparison, folder, command=command, plots=not args.no_plots)
    show_verdicts(console, comparison)
    console.print(f"tables in {files['table']}", highlight=False)
    console.print(f"wrote {folder} in {comparison.seconds:.0f} s", highlight=False)
    return 0


def show_verdicts(console: Console, comparison: Any) -> None:
    """The accuracy verdicts at the last removal count and the bottom line of every test.

    The table fits the console (:func:`~simulator.reporting.console.fitted_table`); the bottom
    line counts the verdicts of every test of ``verdict.csv``.
    """
    from simulator.compare.verdict import bottom_line, label, verdicts
    from simulator.reporting.console import fitted_table, hanging

    rows = verdicts(comparison.measurements, comparison.methods)
    if not rows:
        console.print("verdicts: none (compare cr with a decoremoval variant for them)")
        return
    last = max(r.removed for r in rows)
    shown = [r for r in rows if r.removed == last and r.metric.startswith("acc_")]
    header = ("split", "vs", "seeds", "difference (points) [95% t]", "p (Holm)", "verdict")
    cells = [
        (
            r.metric.removeprefix("acc_"),
            f"{label(r.method)} vs {label(r.base)}",
            str(r.seeds),
            f"{100 * r.diff:+.2f} [{100 * r.low:+.2f}, {100 * r.high:+.2f}]",
            f"{r.p_holm:.3g}",
            r.verdict,
        )
        for r in shown
    ]
    title = f"accuracy at {last} removed, higher is better"
    console.print(fitted_table(console.width, title, header, cells))
    console.print(hanging("", bottom_line(rows)))
