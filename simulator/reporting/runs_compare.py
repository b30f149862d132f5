"""Compare finished run folders side by side (``unlearnsim compare runs DIR DIR...``).

Each folder is a run folder (``metrics.json``, ``summary.md``, ``events.jsonl``, ``run.json``)
or a scenario's ``output_dir`` holding runs, whose ``latest`` run is taken. :func:`compare_table`
lines up the runs' summaries (the certificate verdict, then every (metric, value) row in the
order of their first appearance; a run without the row shows ``-``); :func:`plot_compare`
overlays their curves over the stream tick: test accuracy, budget used, and the membership
inference AUC of each attack (one colour and marker style per run, so coinciding curves stay
distinguishable), with the first run's phases and shifts and every run's retrains marked.
:func:`write_compare` writes them into ``--output``, which must not hold files of the same
names that ``compare runs`` did not write (:func:`compare_outputs`). A seeded sweep's parent
folder gets paired verdicts (:mod:`.sweep_compare`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError, InputError
from simulator.owned_files import Outputs, check_overwrite, claim
from simulator.reporting.flat import Scalar, read_batches
from simulator.reporting.plot_marks import (
    LEGEND_OUTSIDE,
    StreamMarks,
    batch_x,
    decorate,
    save_figure,
)
from simulator.reporting.run_report import read_summary, read_verdict
from simulator.runner.run_folder import is_run_folder, latest_folder, read_manifest

#: The table ``compare runs`` writes, its plots, and a seeded sweep's verdicts (CSV).
COMPARE_FILE = "compare.md"
PLOTS = ("accuracy.png", "budget.png", "mia.png")
VERDICTS_CSV = "verdicts.csv"
#: ``compare.md``'s last line: marks a folder that ``compare runs`` wrote.
MARK = "<!-- written by unlearnsim runs compare -->"

#: Line styles and markers cycled over the runs, so identical curves stay visible.
STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P")


@dataclass(frozen=True)
class RunSummary:
    """One run folder, read back."""

    folder: Path
    label: str
    manifest: dict[str, Any]
    final: dict[str, Any]
    verdict: list[str]
    rows: list[tuple[str, str]]
    batches: list[dict[str, Scalar]]


def resolve_run(path: str | Path) -> Path:
    """``path`` if it is a run folder, else its ``latest`` run (a scenario's output_dir).

    Raises
    ------
    InputError
        Neither a run folder nor a folder with a ``latest`` run.
    """
    folder = Path(path)
    if (folder / "metrics.json").exists() or (folder / "events.jsonl").exists():
        return folder
    latest = latest_folder(folder)
    if latest is not None:
        return latest
    raise InputError(f"{folder} is not a run folder (no metrics.json or events.jsonl)")


def load_run(path: str | Path) -> RunSummary:
    """Read a run folder (:func:`resolve_run`)."""
    folder = resolve_run(path)
    manifest = read_manifest(folder)
    try:
        final = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        final = {}
    summary = folder / "summary.md"
    verdict = read_verdict(summary) if summary.exists() else []
    rows = read_summary(summary) if summary.exists() else []
    return RunSummary(
        folder, _label(folder, manifest, final), manifest, final, verdict, rows,
        read_batches(folder),
    )  # fmt: skip


def _label(folder: Path, manifest: dict[str, Any], final: dict[str, Any]) -> str:
    name = manifest.get("scenario") or folder.resolve().parent.name
    method = final.get("method")
    rid = manifest.get("id") or folder.resolve().name
    return f"{name}/{method} ({rid})" if method else f"{name} ({rid})"


def compare_table(runs: Sequence[RunSummary]) -> tuple[list[str], list[list[str]]]:
    """Header (``metric``, one label per run) and rows.

    Rows: status, certificate, then every summary row.
    """
    labels = _unique([r.label for r in runs])
    rows: list[list[str]] = [
        ["folder", *[str(r.folder) for r in runs]],
        ["status", *[_status(r) for r in runs]],
        ["certificate", *[r.verdict[0] if r.verdict else "-" for r in runs]],
    ]
    keys: dict[str, None] = {}
    for r in runs:
        keys.update(dict.fromkeys(k for k, _ in r.rows))
    for key in keys:
        rows.append([key, *[dict(r.rows).get(key, "-") for r in runs]])
    return ["metric", *labels], rows


def _status(run: RunSummary) -> str:
    status = str(run.manifest.get("status", "-"))
    stopped = run.manifest.get("interrupted")
    if status == "interrupted" and isinstance(stopped, dict):
        of = f" of {stopped.get('of')}" if stopped.get("of") is not None else ""
        status += f" at batch {stopped.get('batch')}{of}"
    return status


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """The comparison as a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def wrote_compare(folder: Path) -> bool:
    """``folder`` holds a ``compare.md`` that ``compare runs`` wrote (its last line)."""
    try:
        lines = (folder / COMPARE_FILE).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(lines) and lines[-1] == MARK


def compare_outputs() -> Outputs:
    """What ``compare runs`` writes into its ``--output``, and how its folder is recognised."""
    return Outputs(
        kind="compare runs folder",
        marker=f"{COMPARE_FILE} written by unlearnsim compare runs",
        proof=wrote_compare,
        files=(COMPARE_FILE, *PLOTS, VERDICTS_CSV),
    )


def check_compare_output(out: Path) -> None:
    """``out`` may take ``compare runs``'s files: never a run folder, never someone's files.

    Raises
    ------
    ConfigError
        Naming ``--output``.
    """
    if is_run_folder(out):
        raise ConfigError(
            f"{out} is a run folder; give another folder for the comparison", "--output"
        )
    check_overwrite(out, compare_outputs(), "--output")


def claim_compare_output(out: Path, *, overwrite: bool = False) -> Path:
    """Make ``out`` ready for ``compare runs``: never a run folder; empty, or cleared when told.

    Raises
    ------
    ConfigError
        Naming ``--output``: ``out`` is a run folder, or is not empty and not an earlier
        ``compare runs`` folder to clear with ``overwrite`` (:func:`~simulator.owned_files.claim`).
    """
    if is_run_folder(out):
        raise ConfigError(
            f"{out} is a run folder; give another folder for the comparison", "--output"
        )
    return claim(
        out,
        compare_outputs(),
        "--output",
        overwrite=overwrite,
        instead="leave out --output for a new folder under runs/runs-compare",
    )


def write_compare(out: Path, header: list[str], rows: list[list[str]], *, before: str = "") -> Path:
    """Write ``compare.md`` into ``out``; returns its path.

    ``before`` (a sweep's verdicts), the table, and :data:`MARK`.
    """
    check_compare_output(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / COMPARE_FILE
    table = markdown(header, rows)
    if before:
        table = before.rstrip("\n") + "\n\n## Runs side by side\n\n" + table
    path.write_text(table + "\n" + MARK + "\n", encoding="utf-8")
    return path


def _points(batches: list[dict[str, Scalar]], key: str) -> tuple[list[float], list[float]]:
    """(tick, value) of every batch with a number under ``key``."""
    xs, ys = [], []
    for i, b in enumerate(batches):
        v = b.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            xs.append(batch_x(b, i))
            ys.append(float(v))
    return xs, ys


def run_marks(run: RunSummary) -> StreamMarks:
    """The phases and shifts of ``run``'s scenario on the tick axis (its resolved scenario)."""
    from simulator.reporting.run_report import scenario_marks
    from simulator.scenario import load_scenario

    marks = StreamMarks(axis="tick")
    resolved = run.folder / "resolved_scenario.yaml"
    if resolved.exists():
        given = scenario_marks(load_scenario(resolved))
        marks.phases = [(n, float(a), float(z)) for n, a, z in given["phases"]]
        marks.lines = [("shift", float(t), label) for label, t in given["shifts"]]
    return marks


def retrain_ticks(
    ax: Any, run: RunSummary, style: dict[str, Any], row: int, name: str | None
) -> bool:
    """``run``'s retrains as short vertical ticks along the bottom of ``ax``, one row per run.

    ``style``: the run's colour (``color``); ``name``: the legend entry (None: none). Whether
    the run retrained at all (nothing is drawn, and ``name`` is not used, otherwise).
    """
    ticks = [
        batch_x(b, i) for i, b in enumerate(run.batches) if b.get("retrained") and b.get("samples")
    ]
    if ticks:
        ax.plot(ticks, [0.03 + 0.04 * row] * len(ticks), "|", color=style["color"], ms=9,
                mew=1.5, transform=ax.get_xaxis_transform(), label=name)  # fmt: skip
    return bool(ticks)


def plot_compare(runs: Sequence[RunSummary], out: Path) -> dict[str, Any]:
    """Write ``accuracy.png``, ``budget.png`` and ``mia.png`` into ``out``, each run overlaid.

    Returns the figures by file name (closed after saving; their artists stay inspectable).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    labels = _unique([r.label for r in runs])
    figures: dict[str, Any] = {}

    def style(i: int) -> dict[str, Any]:
        return {
            "color": f"C{i % 10}",
            "ls": STYLES[i % len(STYLES)],
            "marker": MARKERS[i % len(MARKERS)],
            "markevery": 0.1,
            "ms": 4,
            "lw": 1.4,
            "alpha": 0.85,
        }

    marks = run_marks(runs[0]) if runs else StreamMarks()
    for name, key, ylabel in (
        ("accuracy.png", "metrics.accuracy_test", "test accuracy"),
        ("budget.png", "budget_used_ratio", "charge since last retrain / budget"),
    ):
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
            xs, ys = _points(run.batches, key)
            if xs:
                ax.plot(xs, ys, label=label, **style(i))
            retrain_ticks(ax, run, style(i), i, f"retrains: {label}")
        if key == "budget_used_ratio":
            ax.axhline(1.0, color="k", lw=0.8, ls="--", label="budget")
        decorate(ax, marks, secondary=False)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel} by stream tick")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, **LEGEND_OUTSIDE)
        figures[name] = save_figure(fig, out / name)

    mia = _plot_mia(runs, labels, out, style)
    if mia is not None:
        figures["mia.png"] = mia
    return figures


def _attacks(runs: Sequence[RunSummary]) -> list[str]:
    """Every attack with an AUC column in any run, in order of first appearance."""
    found: dict[str, None] = {}
    for run in runs:
        for b in run.batches:
            found.update(
                (k.split(".")[2], None)
                for k in b
                if k.startswith("privacy.attacks.") and k.endswith(".auc")
            )
    return list(found)


def _plot_mia(runs: Sequence[RunSummary], labels: list[str], out: Path, style: Any) -> Any | None:
    """``mia.png``: one panel per attack, every run overlaid (None without attacks)."""
    import matplotlib.pyplot as plt

    attacks = _attacks(runs)
    if not attacks:
        return None
    fig, axes = plt.subplots(
        len(attacks), 1, figsize=(10, 2.4 * len(attacks)), sharex=True, squeeze=False
    )
    marks = run_marks(runs[0])
    for ax, attack in zip(axes[:, 0], attacks, strict=True):
        for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
            xs, ys = _points(run.batches, f"privacy.attacks.{attack}.auc")
            if xs:
                ax.plot(xs, ys, label=label, **style(i))
        ax.axhline(0.5, color="k", lw=0.8, ls="--")
        decorate(ax, marks, secondary=False, texts=ax is axes[0, 0])
        ax.set_ylabel(f"AUC {attack}")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, **LEGEND_OUTSIDE)
    axes[0, 0].set_title("membership inference AUC (forget vs holdout) by stream tick")
    return save_figure(fig, out / "mia.png")
