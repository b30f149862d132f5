"""The console side of a run: the progress bar's columns and note, and the printed summary."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import ProgressColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from simulator.reporting.verdict import Table as SummaryTable
from simulator.reporting.verdict import Verdict


class RemainingColumn(ProgressColumn):
    """``eta H:MM:SS``: the time left at the mean pace so far (the number of batches is known)."""

    def __init__(self) -> None:
        super().__init__()
        self._eta = TimeRemainingColumn(elapsed_when_finished=False)

    def render(self, task: Any) -> Text:
        """The remaining time of ``task``, dimmed label first."""
        return Text.assemble(("eta ", "dim"), self._eta.render(task))


def progress_info(event: dict[str, Any]) -> str:
    """The progress bar's note after a batch: removed so far, budget used, test accuracy."""
    acc = event.get("metrics", {}).get("accuracy_test")
    return f"removed {event['removed_total']}  budget {event.get('budget_used_ratio', 0):.0%}" + (
        f"  acc {acc:.3f}" if acc is not None else ""
    )


def print_summary(  # noqa: PLR0913 (the summary's parts, the optional ones defaulted)
    console: Console,
    title: str,
    rows: Sequence[tuple[str, str]],
    folder: Path,
    verdict: Sequence[str] = (),
    tables: Sequence[SummaryTable] = (),
    headline: str = "",
) -> None:
    """Print the summary every run prints, whatever its source and transport.

    What happened (``headline``: certified updates vs retrains, the budget's peak and final
    share), the certificate verdict (its headline, then its lines), the (metric, value) table,
    then the phase and attack tables.
    """
    if headline:
        console.print(f"[bold]what happened:[/] {escape(headline)}", highlight=False)
    if verdict:
        head, *lines = verdict
        style = "bold red" if "NOT HELD" in head else "bold green"
        console.print(f"[{style}]{head}[/]", highlight=False)
        for line in lines:
            console.print(f"  - {line}", markup=False, highlight=False)
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(k, v, style=None)
    console.print(table)
    for t in tables:
        extra = Table(title=t.title)
        for i, name in enumerate(t.header):
            extra.add_column(name, justify="left" if i == 0 else "right")
        for row in t.rows:
            extra.add_row(*row)
        console.print(extra)
    console.print(f"outputs in [bold]{folder}[/]")


def verdict_lines(verdict: Verdict | None) -> list[str]:
    """A certificate verdict as lines to print (headline first; none without a verdict)."""
    return [verdict.headline, *verdict.lines] if verdict else []
