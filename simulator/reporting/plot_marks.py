"""What every run plot marks: the stream-tick axis, samples removed, phases and labelled events.

The x-axis is the stream's tick (``axis="tick"``, the default: a batch sits at the tick its
applied requests place it at, so a rotation at tick 6 is drawn at 6 whatever batch applied it)
or the batch index (``axis="batch"``); samples removed are on a secondary axis at the top, with
evenly spaced round values; phases are shaded and lines mark shifts, withdrawals, retrains and
drift alarms.

:func:`stream_marks` reads them from the deletion-batch events (``batch``, ``tick``, ``phase``,
``withdrawn_clients``, ``retrained``/``retrain_reason``, ``drift.detections``), the scenario's
shifts (drawn at their start tick; on the batch axis at the first batch of tick >= start) and,
when given, the scenario's phases as tick ranges; :func:`decorate` draws them on an axis.
Labels are text artists on the axis (``ax.texts``), so tests can check them in the figure
objects. Labels never overlap: :func:`save_figure` lays the figure out, then moves a label that
overlaps another to a free height, or removes it when none is free (the legend, outside the
axes on the right, names every kind of line).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

Axis = Literal["tick", "batch"]
#: The x label of each axis.
AXIS_LABELS = {"tick": "stream tick", "batch": "batch"}
#: (colour, line style) of each kind of vertical line.
LINE_STYLES = {
    "shift": ("tab:purple", "-."),
    "withdrawal": ("tab:orange", "--"),
    "retrain": ("tab:red", ":"),
    "alarm": ("tab:brown", (0, (1, 3))),
}
#: Where each kind's labels start (axis fraction), so labels at the same x do not overlap.
LABEL_Y = {"retrain": 0.02, "withdrawal": 0.27, "shift": 0.52, "alarm": 0.74}
#: Above this many lines of one kind, only the first few get a text label (the legend names all).
MAX_LABELS = 20
#: Gids of the labels :func:`separate_labels` keeps apart, in the order they are placed.
LABEL_GIDS = ("phase", "shift", "withdrawal", "retrain", "alarm")


@dataclass
class StreamMarks:
    """Phases (name, first x, last x), vertical lines (kind, x, label), and the x of each batch.

    ``axis``: what x is (:data:`AXIS_LABELS`); ``removed``: samples removed after each batch.
    """

    phases: list[tuple[str, float, float]] = field(default_factory=list)
    lines: list[tuple[str, float, str]] = field(default_factory=list)
    batch: list[float] = field(default_factory=list)
    removed: list[float] = field(default_factory=list)
    axis: Axis = "tick"

    def x(self, b: dict[str, Any], i: int) -> float:
        """Batch ``b``'s x position (:func:`batch_x`) on this axis."""
        return batch_x(b, i, self.axis)


def batch_x(b: dict[str, Any], i: int, axis: Axis = "tick") -> float:
    """A batch's x position: its ``tick`` (or ``batch`` index); its position when absent."""
    v = b.get(axis)
    if not isinstance(v, int | float):
        v = b.get("batch")
    return float(v) if isinstance(v, int | float) else float(i)


def stream_marks(
    batches: list[dict[str, Any]],
    shifts: Sequence[tuple[str, int]] = (),
    *,
    axis: Axis = "tick",
    phases: Sequence[tuple[str, int, int]] = (),
) -> StreamMarks:
    """The marks of a run (module docstring).

    ``shifts``: (label, start tick); ``phases``: (name, first tick, last tick) of the
    scenario's phases, used on the tick axis (else the phases are read from the batches).
    """
    marks = StreamMarks(axis=axis)
    for i, b in enumerate(batches):
        x = marks.x(b, i)
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
    if axis == "tick" and phases and marks.batch:
        last = max(marks.batch)
        marks.phases = [(n, float(a), float(z)) for n, a, z in phases if a <= last]
    for label, tick in shifts:
        at = [marks.x(b, i) for i, b in enumerate(batches) if int(b.get("tick", -1)) >= tick]
        if at:
            marks.lines.append(("shift", float(tick) if axis == "tick" else at[0], label))
    return marks


def decorate(ax: Any, marks: StreamMarks, *, secondary: bool = True, texts: bool = True) -> None:
    """Shade the phases, draw and label the vertical lines, set the x-axis.

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
    ax.set_xlabel(AXIS_LABELS[marks.axis])
    if secondary:
        removed_axis(ax, marks)


def removed_axis(ax: Any, marks: StreamMarks) -> Any | None:
    """The samples-removed axis on top of ``ax`` (None when nothing was removed).

    Its ticks are round, evenly spaced numbers of samples (:func:`removed_ticks`).
    """
    if len(marks.batch) < 2 or max(marks.removed) <= marks.removed[0]:
        return None
    xs, ys = _monotone(marks.batch, marks.removed)
    if xs.size < 2:
        return None

    def to_removed(x: Any) -> Any:
        return np.interp(x, xs, ys)

    def to_x(y: Any) -> Any:
        keep = np.concatenate([[True], np.diff(ys) > 0])
        return np.interp(y, ys[keep], xs[keep])

    top = ax.secondary_xaxis("top", functions=(to_removed, to_x))
    top.set_xticks(removed_ticks(xs, ys))
    top.set_xlabel("samples removed", fontsize=8)
    top.tick_params(labelsize=7)
    return top


def _monotone(x: Sequence[float], removed: Sequence[float]) -> tuple[Any, Any]:
    """Increasing x positions and the samples removed by each (the most at a repeated x)."""
    at: dict[float, float] = {}
    for xv, r in zip(x, np.maximum.accumulate(np.asarray(removed, dtype=float)), strict=True):
        at[xv] = max(at.get(xv, 0.0), float(r))
    keys = sorted(at)
    ys = np.maximum.accumulate(np.asarray([at[k] for k in keys]))
    return np.asarray(keys, dtype=float), ys


def removed_ticks(xs: Any, ys: Any, *, bins: int = 6, spacing: float = 0.07) -> list[float]:
    """Round values of samples removed for the top axis, evenly spaced in samples.

    From matplotlib's ``MaxNLocator`` (steps 1, 2, 2.5, 5, 10) over the removed range; a value
    whose position lies within ``spacing`` of the x range of the previous one kept is left out
    (a large withdrawal removes many samples at one x: their labels would overlap).
    """
    from matplotlib.ticker import MaxNLocator

    lo, hi = float(ys[0]), float(ys[-1])
    values = MaxNLocator(nbins=bins, steps=[1, 2, 2.5, 5, 10], integer=True).tick_values(lo, hi)
    width = float(xs[-1] - xs[0]) or 1.0
    rising = np.concatenate([[True], np.diff(ys) > 0])
    keep: list[float] = []
    last = -np.inf
    for v in values:
        if not lo <= v <= hi:
            continue
        x = float(np.interp(v, ys[rising], xs[rising]))
        if x - last >= spacing * width:
            keep.append(float(v))
            last = x
    return keep


def _overlaps(box: Any, others: Sequence[Any]) -> bool:
    return any(box.overlaps(o) for o in others)


def separate_labels(fig: Any) -> None:
    """Move or remove the stream labels of ``fig``'s axes so that none overlaps another.

    The phase names first, then the first label of each kind of line, then the others in the
    order of :data:`LABEL_GIDS` and x. A line label that overlaps one already placed, or would
    leave the axes, is tried at the other kinds' heights (:data:`LABEL_Y`) and removed when it
    fits nowhere; a phase name is only kept or removed.
    """
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [t for t in ax.texts if t.get_gid() in LABEL_GIDS]
        firsts: dict[str, Any] = {}
        for t in labels:
            firsts.setdefault(str(t.get_gid()), t)

        def rank(t: Any, firsts: dict[str, Any] = firsts) -> tuple[bool, bool, int, float]:
            gid = str(t.get_gid())
            return (
                gid != "phase",
                t is not firsts[gid],
                LABEL_GIDS.index(gid),
                t.get_position()[0],
            )

        frame = ax.get_window_extent(renderer)
        placed: list[Any] = []
        for t in sorted(labels, key=rank):
            heights = [t.get_position()[1]]
            if t.get_gid() != "phase":
                heights += [y for y in sorted(LABEL_Y.values()) if y != heights[0]]
            for y in heights:
                t.set_y(y)
                box = t.get_window_extent(renderer)
                if box.y1 <= frame.y1 + 0.5 and not _overlaps(box, placed):
                    placed.append(box)
                    break
            else:
                t.remove()


def save_figure(fig: Any, path: Path) -> Any:
    """Lay out ``fig``, keep its labels apart (:func:`separate_labels`), save and close it.

    Returns the figure (its artists stay inspectable).
    """
    import matplotlib.pyplot as plt

    fig.tight_layout()
    separate_labels(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return fig


@dataclass(frozen=True)
class PanelText:
    """What a run plot's panel says: its y label, its title after the run's, legend options."""

    ylabel: str
    title: str
    legend: dict[str, Any] = field(default_factory=dict)


#: Where every run plot's legend goes: outside the axes, on the right (never over a label).
LEGEND_OUTSIDE: dict[str, Any] = {
    "loc": "upper left",
    "bbox_to_anchor": (1.01, 1.0),
    "borderaxespad": 0.0,
}


def finish_panel(ax: Any, marks: StreamMarks, run_title: str, text: PanelText) -> None:
    """Draw the marks (:func:`decorate`), the labels, the legend outside the axes, a grid."""
    decorate(ax, marks)
    ax.set_ylabel(text.ylabel)
    ax.set_title(f"{run_title}: {text.title}", fontsize=10)
    ax.legend(**{"fontsize": 7, **text.legend, **LEGEND_OUTSIDE})
    ax.grid(alpha=0.3)
