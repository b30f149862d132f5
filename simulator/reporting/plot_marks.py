"""What every run plot marks: the batch axis, samples removed, phases and labelled events.

Batch on the x-axis, samples removed on a secondary axis, shaded phases, and labelled vertical
lines for shifts, withdrawals, retrains and drift alarms.

:func:`stream_marks` reads them from the deletion-batch events (``batch``, ``tick``, ``phase``,
``withdrawn_clients``, ``retrained``/``retrain_reason``, ``drift.detections``) and the
scenario's shifts (a shift starting at tick t is drawn at the first batch of tick >= t);
:func:`decorate` draws them on an axis. Labels are text artists on the axis (``ax.texts``), so
tests can check them in the figure objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: (colour, line style) of each kind of vertical line.
LINE_STYLES = {
    "shift": ("tab:purple", "-."),
    "withdrawal": ("tab:orange", "--"),
    "retrain": ("tab:red", ":"),
    "alarm": ("tab:brown", (0, (1, 3))),
}
#: Where each kind's labels start (axis fraction), so labels at the same batch do not overlap.
LABEL_Y = {"retrain": 0.02, "withdrawal": 0.27, "shift": 0.52, "alarm": 0.74}
#: Above this many lines of one kind, only the first few get a text label (the legend names all).
MAX_LABELS = 20


@dataclass
class StreamMarks:
    """Phases (name, first batch, last batch) and vertical lines (kind, batch, label)."""

    phases: list[tuple[str, float, float]] = field(default_factory=list)
    lines: list[tuple[str, float, str]] = field(default_factory=list)
    batch: list[float] = field(default_factory=list)
    removed: list[float] = field(default_factory=list)


def batch_x(b: dict[str, Any], i: int) -> float:
    """A batch's x position: its ``batch`` index (its position when absent)."""
    v = b.get("batch")
    return float(v) if isinstance(v, int | float) else float(i)


def stream_marks(
    batches: list[dict[str, Any]], shifts: Sequence[tuple[str, int]] = ()
) -> StreamMarks:
    """The marks of a run (module docstring); ``shifts``: (label, start tick)."""
    marks = StreamMarks()
    for i, b in enumerate(batches):
        x = batch_x(b, i)
        marks.batch.append(x)
        marks.removed.append(float(b.get("removed_total", 0)))
        name = str(b.get("phase", ""))
        if marks.phases and marks.phases[-1][0] == name:
            marks.phases[-1] = (name, marks.phases[-1][1], x)
        else:
            marks.phases.append((name, x, x))
        for c in b.get("withdrawn_clients") or []:
            marks.lines.append(("withdrawal", x, f"withdrawal c{c}"))
        if b.get("retrained") and b.get("samples"):
            marks.lines.append(("retrain", x, f"retrain ({b.get('retrain_reason', '?')})"))
        detections = (b.get("drift") or {}).get("detections") or []
        if detections:
            which = ", ".join(sorted({str(d.get("detector", "?")) for d in detections}))
            marks.lines.append(("alarm", x, f"alarm {which}"))
    for label, tick in shifts:
        at = [batch_x(b, i) for i, b in enumerate(batches) if int(b.get("tick", -1)) >= tick]
        if at:
            marks.lines.append(("shift", at[0], label))
    return marks


def decorate(ax: Any, marks: StreamMarks, *, secondary: bool = True, texts: bool = True) -> None:
    """Shade the phases, draw and label the vertical lines, set the batch x-axis.

    With ``secondary``, also the samples-removed axis on top.
    """
    for i, (name, x0, x1) in enumerate(marks.phases):
        ax.axvspan(x0 - 0.5, x1 + 0.5, color="0.5", alpha=0.06 if i % 2 else 0.14, lw=0)
        if texts and name:
            ax.text(
                (x0 + x1) / 2, 0.99, name, transform=ax.get_xaxis_transform(), ha="center",
                va="top", fontsize=6, color="0.3", gid="phase",
            )  # fmt: skip
    counts: dict[str, int] = {}
    for kind, x, label in marks.lines:
        color, style = LINE_STYLES[kind]
        n = counts.get(kind, 0)
        counts[kind] = n + 1
        ax.axvline(x, color=color, ls=style, lw=1.0, alpha=0.7, label=kind if n == 0 else None)
        if texts and n < MAX_LABELS:
            ax.text(
                x, LABEL_Y[kind], f" {label}", transform=ax.get_xaxis_transform(), rotation=90,
                fontsize=6, color=color, va="bottom", ha="right", gid=kind,
            )  # fmt: skip
    ax.set_xlabel("batch")
    if secondary and len(marks.batch) >= 2 and marks.removed[-1] > marks.removed[0]:
        xs = np.asarray(marks.batch)
        ys = np.maximum.accumulate(np.asarray(marks.removed))

        def to_removed(x: Any) -> Any:
            return np.interp(x, xs, ys)

        def to_batch(y: Any) -> Any:
            keep = np.concatenate([[True], np.diff(ys) > 0])
            return np.interp(y, ys[keep], xs[keep])

        top = ax.secondary_xaxis("top", functions=(to_removed, to_batch))
        at = np.unique(np.round(to_removed(np.linspace(xs[0], xs[-1], 7))))
        top.set_xticks(at)  # evenly spaced in batches: a large withdrawal does not crowd them
        top.set_xlabel("samples removed", fontsize=8)
        top.tick_params(labelsize=7)


def save_figure(fig: Any, path: Path) -> Any:
    """Save and close ``fig``; returns it (its artists stay inspectable)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


@dataclass(frozen=True)
class PanelText:
    """What a run plot's panel says: its y label, its title after the run's, legend options."""

    ylabel: str
    title: str
    legend: dict[str, Any] = field(default_factory=dict)


def finish_panel(ax: Any, marks: StreamMarks, run_title: str, text: PanelText) -> None:
    """Draw the marks (:func:`decorate`), then the labels, the legend (size 7) and a grid."""
    decorate(ax, marks)
    ax.set_ylabel(text.ylabel)
    ax.set_title(f"{run_title}: {text.title}", fontsize=10)
    ax.legend(**{"fontsize": 7, **text.legend})
    ax.grid(alpha=0.3)
