"""``unlearnsim compare runs DIR DIR... [--output OUT]``: finished runs side by side.

One DIR that is a seeded sweep's parent (``unlearnsim run SCENARIO --seeds N --methods a,b``)
gets the paired verdicts per phase and metric, and its runs overlaid
(:mod:`simulator.reporting.sweep_compare`). Otherwise each DIR is a run folder or a scenario's
``output_dir`` (its ``latest`` run). Prints one table
(status, certificate verdict, every summary row; one column per run) and writes
``compare.md`` with it and the overlaid ``accuracy.png``, ``budget.png`` and ``mia.png``
(:mod:`simulator.reporting.runs_compare`) into a new ``runs/runs-compare/<timestamp>-<id>/``
(``latest`` points at it) or ``--output``: refused, before anything is written, when that is
a run folder, or is not empty and not (with ``--overwrite``) an earlier ``compare runs``
folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

#: Where ``compare runs`` writes without ``--output`` (under ``runs/``, which git ignores).
ROOT = "runs/runs-compare"


def register_runs(family: Any) -> None:
    """Add ``runs`` to the actions of ``compare`` (:mod:`server.commands.compare`)."""
    c = family.add_parser("runs", help="compare run folders side by side (table and plots)")
    c.add_argument("folders", nargs="+", metavar="DIR", help="run folders (or an output_dir)")
    c.add_argument(
        "--output",
        help="folder for compare.md and the overlaid plots, refused if not empty (default: a "
        f"new <timestamp>-<id> folder under {ROOT}, with a 'latest' link)",
    )
    c.add_argument(
        "--overwrite",
        action="store_true",
        help="clear an earlier compare runs --output folder first (only one holding its "
        "compare.md and nothing but its files)",
    )
    c.add_argument("--no-plots", action="store_true", help="only the table")
    c.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    """Print the comparison and write its files; exit code 0."""
    from simulator.reporting.runs_compare import (
        claim_compare_output,
        compare_table,
        load_run,
        plot_compare,
        write_compare,
    )

    # an explicit --output is refused before anything is read; a new folder made once the
    # inputs are read
    given_out = (
        claim_compare_output(Path(args.output), overwrite=args.overwrite) if args.output else None
    )
    if len(args.folders) == 1:
        from simulator.reporting.sweep_compare import is_sweep
        from simulator.runner.run_folder import latest_folder

        given = Path(args.folders[0])
        latest = latest_folder(given)  # <output_dir>/sweeps: its latest sweep
        target = latest if not is_sweep(given) and latest and is_sweep(latest) else given
        if is_sweep(target):
            return _compare_sweep(target, given_out, args, console)
    runs = [load_run(f) for f in args.folders]
    out = given_out or output_folder()
    header, rows = compare_table(runs)
    show_runs(console, header, rows)
    write_compare(out, header, rows)
    if not args.no_plots:
        written = plot_compare(runs, out)
        console.print(f"plots: {', '.join(sorted(written))}", highlight=False)
    console.print(f"comparison in [bold]{out}[/]")
    return 0


def show_runs(console: Console, header: list[str], rows: list[list[str]]) -> None:
    """The runs side by side, fitted to the console; their folders listed under the table."""
    from simulator.reporting.console import fitted_table, hanging

    folders = next((r[1:] for r in rows if r[0] == "folder"), [])
    body = [r for r in rows if r[0] != "folder"]
    console.print(fitted_table(console.width, f"{len(header) - 1} runs", header, body))
    for name, folder in zip(header[1:], folders, strict=False):
        console.print(f"{name}:", highlight=False, markup=False)
        console.print(hanging("  ", folder))


def output_folder() -> Path:
    """A new ``<timestamp>-<id>`` folder under :data:`ROOT` (``latest`` points at it)."""
    from simulator.runner.run_folder import new_run_folder

    return new_run_folder(ROOT)


def _compare_sweep(
    parent: Path, given_out: Path | None, args: argparse.Namespace, console: Console
) -> int:
    """A seeded sweep's paired verdicts, table and overlaid plots; exit code 0."""
    from simulator.compare.verdict import label
    from simulator.errors import InputError
    from simulator.reporting.console import fitted_table, hanging
    from simulator.reporting.sweep_compare import (
        NOTHING_TO_PAIR,
        better_text,
        difference,
        load_sweep,
        p_text,
        plot_sweep,
        scale_of,
        sweep_bottom_line,
        sweep_verdicts,
        write_sweep_compare,
    )

    sweep = load_sweep(parent)
    if not sweep.runs:
        raise InputError(f"the sweep in {parent} has no run folder yet")
    rows = sweep_verdicts(sweep)
    out = given_out or output_folder()
    if len(sweep.methods) < 2:
        console.print(hanging("", NOTHING_TO_PAIR.format(methods=", ".join(sweep.methods))))
    else:
        title = f"{parent}: paired over seeds, each method vs {sweep.base}"
        header = ("phase", "metric", "better", "vs", "seeds", "difference [95% t]", "p (Holm)",
                  "verdict")  # fmt: skip
        cells = [
            (
                r.phase,
                r.metric + (" %" if scale_of(r.metric) == 100.0 else ""),
                better_text(r.metric),
                f"{label(r.stats.method)} vs {label(r.stats.base)}",
                str(r.stats.seeds),
                difference(r.stats, r.metric),
                p_text(r.stats.p_holm),
                r.verdict,
            )
            for r in rows
        ]
        console.print(fitted_table(console.width, title, header, cells))
        console.print(hanging("", sweep_bottom_line(rows)))
    path = write_sweep_compare(sweep, out, rows)
    if not args.no_plots:
        written = plot_sweep(sweep, out)
        console.print(f"plots: {', '.join(sorted(written))}", highlight=False)
    console.print(f"verdicts in [bold]{path}[/] and {out / 'verdicts.csv'}")
    return 0
