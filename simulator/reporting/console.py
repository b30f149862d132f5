"""The console side of a run: the progress bar's columns and note, and the printed summary."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.progress import ProgressColumn, TimeRemainingColumn
from rich.table import Column, Table
from rich.text import Text

from simulator.reporting.verdict import Table as SummaryTable
from simulator.reporting.verdict import Verdict


class RemainingColumn(ProgressColumn):
    """``eta H:MM:SS``: the time left at the mean pace so far (the number of batches is known)."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))
        self._eta = TimeRemainingColumn(elapsed_when_finished=False)

    def render(self, task: Any) -> Text:
        """The remaining time of ``task``, dimmed label first."""
        return Text.assemble(("eta ", "dim"), self._eta.render(task))


class StepColumn(ProgressColumn):
    """The batch's current step, cut with an ellipsis where the line has no room for it."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=False, min_width=1))

    def render(self, task: Any) -> Text:
        """The step's name (cyan), on one line."""
        return Text(
            str(task.fields.get("step", "")), style="cyan", no_wrap=True, overflow="ellipsis"
        )


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

    What happened (``headline``: certified updates, exact passes and retrains, the budget's
    peak and final share), the certificate verdict (its headline, then its lines, each wrapped
    under its own bullet), the (metric, value) table, then the phase and attack tables: every
    line within the console's width (:func:`fitted_table`).
    """
    if headline:
        console.print(hanging("what happened: ", headline, "bold"))
    if verdict:
        head, *lines = verdict
        style = "bold red" if "NOT HELD" in head else "bold green"
        console.print(f"[{style}]{escape(head)}[/]", highlight=False)
        for line in lines:
            console.print(hanging("  - ", line))
    console.print(fitted_table(console.width, title, ("metric", "value"), rows))
    for t in tables:
        console.print(fitted_table(console.width, t.title, t.header, t.rows))
    console.print(f"outputs in [bold]{escape(str(folder))}[/]", highlight=False)


def hanging(lead: str, text: str, lead_style: str = "") -> Table:
    """``lead`` then ``text``, wrapped at spaces with its later lines under the first."""
    grid = Table.grid(padding=0)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(Text(lead, style=lead_style), Text(text))
    return grid


def _widest_line(cell: str) -> int:
    return max((cell_len(line) for line in cell.splitlines()), default=0)


def _widest_word(cell: str) -> int:
    return max((cell_len(word) for word in cell.split()), default=0)


def fitted_table(
    width: int,
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
) -> RenderableType:
    """A table that fits ``width`` columns and never cuts a cell (:func:`framed`).

    As given when it fits; else turned (one column per row, one row per column: the phases of
    a run side by side) when that fits; else each row as a block of ``header: value`` lines
    (:func:`records`).
    """
    table = framed(width, title, header, rows)
    if table is None and rows:
        turned = [list(col) for col in zip(header, *rows, strict=True)]
        table = framed(width, title, turned[0], turned[1:])
    return table if table is not None else records(title, header, rows)


def framed(
    width: int,
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
) -> Table | None:
    """The table within ``width`` columns, no cell cut; None when it cannot fit.

    The first column is the row's name, the others values (right-aligned). In order of
    preference: every cell on one line; the names wrapped at spaces and the values on one
    line; every cell wrapped at spaces (a number is one word, never split); first with the
    outer frame, then without it.
    """
    columns = list(zip(header, *rows, strict=True))
    widest = [max(_widest_line(c) for c in col) for col in columns]
    shortest = [max(_widest_word(c) for c in col) for col in columns]
    n = len(columns)
    for edge in (True, False):
        room = width - (3 * n + 1 if edge else 3 * (n - 1))
        for wrap in ((False,) * n, (True,) + (False,) * (n - 1), (True,) * n):
            lowest = [s if w else x for s, x, w in zip(shortest, widest, wrap, strict=True)]
            widths = shrink(widest, lowest, room)
            if widths is None:
                continue
            table = Table(title=title, show_edge=edge, pad_edge=edge)
            for i, name in enumerate(header):
                table.add_column(
                    name, justify="left" if i == 0 else "right", width=widths[i],
                    no_wrap=not wrap[i], overflow="fold",
                )  # fmt: skip
            for row in rows:
                table.add_row(*row)
            return table
    return None


def shrink(widest: Sequence[int], lowest: Sequence[int], room: int) -> list[int] | None:
    """Column widths that fit ``room``, the widest narrowed first, none below ``lowest``.

    None when even the lowest widths do not fit.
    """
    if sum(lowest) > room:
        return None
    widths = list(widest)
    while sum(widths) > room:
        i = max(range(len(widths)), key=lambda j: widths[j] - lowest[j])
        widths[i] -= 1
    return widths


def records(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> RenderableType:
    """Rows as blocks of ``header: value`` lines (for a console too narrow for a table)."""
    parts: list[RenderableType] = [Text(title, style="bold")]
    for row in rows:
        parts.append(Text(row[0], style="bold"))
        for name, cell in zip(header[1:], row[1:], strict=True):
            parts.append(hanging(f"  {' '.join(name.split())}: ", cell))
    return Group(*parts)


def verdict_lines(verdict: Verdict | None) -> list[str]:
    """A certificate verdict as lines to print (headline first; none without a verdict)."""
    return [verdict.headline, *verdict.lines] if verdict else []
