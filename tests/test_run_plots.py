"""Run plots (issue 15): batch on the x-axis, samples removed on the top axis, markers at the
measured points, shaded phases, labelled lines for shifts, withdrawals, retrains and alarms,
and the MMD p-value floor drawn as a line; checked in the figure objects."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console
from support.scenarios import SCENARIOS, SMALL

from simulator.reporting.run_report import plot_run
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
    shifts = [(f"shift: {s.kind}", s.start) for s in scenario.shifts]
    out = folder / "again"
    out.mkdir()
    return {"batches": batches, **plot_run(out, batches, scenario.name, shifts)}


def texts(ax: Any) -> list[str]:
    return [t.get_text().strip() for t in ax.texts]


def test_every_plot_has_the_batch_axis_and_the_stream_marks(figures: dict[str, Any]) -> None:
    batches = figures["batches"]
    for name in ("accuracy.png", "budget.png", "residuals.png", "mia.png", "drift.png"):
        ax = figures[name].axes[0]
        assert ax.get_xlabel() == "batch", name
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
