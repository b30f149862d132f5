"""Run plots (issues 15, 29): the stream tick on the x-axis, samples removed on the top axis
(round, evenly spaced values), markers at the measured points, shaded phases, labelled lines for
shifts, withdrawals, retrains and alarms that never overlap, the legend outside the axes, and
the MMD p-value floor drawn as a line; checked in the figure objects."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from rich.console import Console
from support.scenarios import SCENARIOS, SMALL

from simulator.reporting.run_report import plot_run, scenario_marks
from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import load_scenario


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("plots")
    # guo accounting retrains on this stream (anchored does not): the plots' retrain marks
    overrides = [*SMALL, "head.accounting=guo"]
    scenario = load_scenario(SCENARIOS / "quickstart.yaml", overrides=overrides)
    run_scenario(
        scenario, ReportingConfig(console=Console(quiet=True), progress=False), output_dir=folder
    )
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    batches = [e for e in events if e["event"] == "deletion_batch"]
    out = folder / "again"
    out.mkdir()
    figures = plot_run(out, batches, scenario.name, **scenario_marks(scenario))
    return {"batches": batches, "scenario": scenario, **figures}


def texts(ax: Any) -> list[str]:
    return [t.get_text().strip() for t in ax.texts]


PLOTS = ("accuracy.png", "budget.png", "residuals.png", "mia.png", "drift.png")


def test_every_plot_has_the_tick_axis_and_the_stream_marks(figures: dict[str, Any]) -> None:
    batches = figures["batches"]
    for name in PLOTS:
        ax = figures[name].axes[0]
        assert ax.get_xlabel() == "stream tick", name
        labels = texts(ax)
        assert any(t.startswith("shift: gaussian_noise") for t in labels), name
        assert any(t.startswith("withdrawal c") for t in labels), name
        assert any(t.startswith("retrain (budget)") for t in labels), name
        assert {b["phase"] for b in batches} <= set(labels), name  # phase names
        shaded = [p for p in ax.patches if type(p).__name__ in ("Polygon", "Rectangle")]
        assert len(shaded) >= len({b["phase"] for b in batches}), name
        children = ax.get_children()
        tops = [c for c in children if type(c).__name__ == "SecondaryAxis"]
        assert tops and tops[0].get_xlabel() == "samples removed", name


def test_markers_at_measured_points_and_distinct_lines(figures: dict[str, Any]) -> None:
    ax = figures["mia.png"].axes[0]
    series = [ln for ln in ax.get_lines() if ln.get_label() in {"loss", "confidence", "lira"}]
    assert len(series) == 3
    assert all(ln.get_marker() not in (None, "None", "") for ln in series)
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in series}) == 3
    stars = [ln for ln in ax.get_lines() if ln.get_label().endswith("retrained head")]
    assert stars  # the retrained head at its checkpoint


def test_drift_alarms_and_the_p_value_floor(figures: dict[str, Any]) -> None:
    batches = figures["batches"]
    top = figures["drift.png"].axes[0]
    perms = next(iter(batches[-1]["drift"]["feature"].values()))["permutations"]
    floor = 1 / (perms + 1)
    floors = [ln for ln in top.get_lines() if ln.get_label().startswith("resolution floor")]
    assert floors and floors[0].get_ydata()[0] == pytest.approx(floor)
    assert any("p-value floor" in t for t in texts(top))
    assert any(b["drift"].get("detections") for b in batches if "drift" in b)
    assert any(t.startswith("alarm page_hinkley") for t in texts(figures["accuracy.png"].axes[0]))


def test_marks_sit_at_their_ticks(figures: dict[str, Any]) -> None:
    """A shift starting at tick t is drawn at t; a withdrawal at the tick of its batch."""
    scenario, batches = figures["scenario"], figures["batches"]
    ax = figures["accuracy.png"].axes[0]
    xs = {ln.get_label(): ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_label() in
          ("shift", "withdrawal")}  # fmt: skip
    assert xs["shift"] == scenario.shifts[0].start
    (withdrawal,) = [b for b in batches if b["withdrawn_clients"]]
    assert xs["withdrawal"] == withdrawal["tick"] == scenario.stream.withdrawals[0].at
    test = next(ln for ln in ax.get_lines() if ln.get_label() == "test")
    evaluated = [b["tick"] for b in batches if "accuracy_test" in b.get("metrics", {})]
    assert list(test.get_xdata()) == evaluated


def test_labels_never_overlap_and_the_legend_is_outside(figures: dict[str, Any]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for name in PLOTS:
        fig = figures[name]
        renderer = FigureCanvasAgg(fig).get_renderer()  # a closed figure has lost its canvas
        for ax in fig.axes:
            boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_gid() != "floor"]
            for i, a in enumerate(boxes):
                assert not any(a.overlaps(b) for b in boxes[i + 1 :]), name
            legend = ax.get_legend()
            if legend is not None:
                frame = ax.get_window_extent(renderer)
                assert legend.get_window_extent(renderer).x0 >= frame.x1, name


def test_the_top_axis_has_round_evenly_spaced_values(figures: dict[str, Any]) -> None:
    ax = figures["accuracy.png"].axes[0]
    (top,) = [c for c in ax.get_children() if type(c).__name__ == "SecondaryAxis"]
    ticks = list(top.get_xticks())
    assert len(ticks) >= 2
    steps = {round(b - a, 6) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1 or max(steps) % min(steps) == 0  # one step (or skipped multiples)
    step = min(steps)
    assert step in {k * 10**e for k in (1, 2, 2.5, 5) for e in range(0, 5)}
