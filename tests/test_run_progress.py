"""Progress of a run (issue 15): time remaining in the bar, and the slow sub-steps of a batch
(removal, LiRA references, evaluation, the reference retrain) named while they run."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from support.scenarios import SCENARIOS, SMALL

from simulator.runner import ReportingConfig, build_federation, run_scenario
from simulator.runner.pipeline import apply_batch
from simulator.runner.run_state import RunState
from simulator.scenario import load_scenario
from simulator.stream import batches


def test_each_slow_sub_step_is_named_while_it_runs() -> None:
    scenario = load_scenario(SCENARIOS / "quickstart.yaml", overrides=SMALL)
    fed = build_federation(scenario)
    steps: list[str] = []
    run = RunState(on_step=steps.append)
    tick = timedelta(seconds=scenario.stream.tick_seconds)
    for batch in batches(fed.requests, scenario.stream.max_batch_requests):
        apply_batch(fed, run, batch, now=batch[0].requested_at + tick)
    assert steps[0] == "evaluation baselines (LiRA references)"
    assert any(s.startswith("removal of ") and s.endswith(" samples") for s in steps)
    at = steps.index("reference retrain at 20 removals")
    assert steps[at - 2 : at] == ["LiRA references", "evaluation"]  # in the order they run
    assert steps.count("") == run.batches and steps[-1] == ""  # cleared after every batch
    assert "on_step" not in run.state_dict()  # never saved in a checkpoint


def test_the_progress_bar_shows_time_remaining(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIOS / "quickstart.yaml", overrides=SMALL)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    run_scenario(
        scenario, ReportingConfig(console=console, progress=True, plots=False), output_dir=tmp_path
    )
    text = out.getvalue()
    assert "deletion stream" in text and "eta " in text
