"""Comparable outputs (issue 15): the flat ``batches.csv`` every run writes, and
``unlearnsim compare runs`` (a side-by-side table and overlaid plots)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from rich.console import Console
from support.scenarios import SCENARIOS, SMALL

from server.cli import main
from simulator.errors import InputError
from simulator.reporting.flat import flatten
from simulator.reporting.runs_compare import load_run, plot_compare, resolve_run
from simulator.runner import ReportingConfig, run_scenario
from simulator.runner.run_folder import new_run_folder
from simulator.scenario import load_scenario


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    parent = tmp_path_factory.mktemp("runs")
    folders = []
    for method in ("decoremoval", "cr"):
        scenario = load_scenario(
            SCENARIOS / "quickstart.yaml",
            overrides=[*SMALL, f"method={method}", f"output_dir={parent / method}"],
        )
        result = run_scenario(
            scenario, ReportingConfig(console=Console(quiet=True), progress=False, plots=False)
        )
        folders.append(result.output_dir)
    return folders


def test_flatten_dots_nested_keys() -> None:
    flat = flatten(
        {"event": "deletion_batch", "a": {"b": {"c": 1.5}}, "ids": [3, 4],
         "checkpoints": [{"x": 1}], "name": "p"}
    )  # fmt: skip
    assert flat == {"a.b.c": 1.5, "ids": "3;4", "checkpoints.0.x": 1, "name": "p"}


def test_every_run_writes_a_flat_batches_csv(two_runs: list[Path]) -> None:
    folder = two_runs[0]
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    batches = [e for e in events if e["event"] == "deletion_batch"]
    with (folder / "batches.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(batches)
    columns = set(rows[0])
    assert {"batch", "phase", "samples", "removed_total", "budget_used_ratio"} <= columns
    assert {"privacy.attacks.loss.auc", "metrics.accuracy_test", "timings.total"} <= columns
    assert "withdrawn_clients" in columns and not any(c.startswith("event") for c in columns)
    assert [int(r["batch"]) for r in rows] == [b["batch"] for b in batches]
    last = rows[-1]
    assert float(last["removed_total"]) == batches[-1]["removed_total"]
    assert all("{" not in v for r in rows for v in r.values())  # nothing nested left


def test_runs_compare_table_and_overlaid_plots(
    two_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    parent = two_runs[1].parent  # an output_dir: its latest run is taken
    assert resolve_run(parent) == two_runs[1].resolve()
    assert main(["compare", "runs", str(two_runs[0]), str(parent), "--output", str(out)]) == 0
    text = (out / "compare.md").read_text()
    header = text.splitlines()[0]
    assert "quickstart/decoremoval" in header and "quickstart/cr" in header
    assert "| certificate | Certificate: HELD | Certificate: HELD |" in text
    assert "| status | completed | completed |" in text
    assert "| method | decoremoval | cr |" in text
    for name in ("accuracy.png", "budget.png", "mia.png"):
        assert (out / name).stat().st_size > 5_000, name
    assert "Certificate: HELD" in capsys.readouterr().out

    figures = plot_compare([load_run(f) for f in two_runs], tmp_path / "again")
    ax = figures["accuracy.png"].axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label().startswith("quickstart/")]
    assert len(lines) == 2 and lines[0].get_linestyle() != lines[1].get_linestyle()
    assert lines[0].get_marker() != lines[1].get_marker()  # coinciding curves stay visible
    assert ax.get_xlabel() == "stream tick"  # with the scenario's phases and shifts (issue 29)
    labels = [t.get_text().strip() for t in ax.texts]
    assert {"warmup", "class-1-purge", "client-2-cleanup"} <= set(labels)
    assert any(t.startswith("shift: gaussian_noise") for t in labels)


def test_runs_compare_refuses_a_folder_without_a_run(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        resolve_run(tmp_path)
    assert main(["compare", "runs", str(tmp_path), "--output", str(tmp_path / "o")]) == 2
    empty = new_run_folder(tmp_path / "p")  # a run folder that never wrote its logs
    with pytest.raises(InputError):
        resolve_run(empty)


def test_runs_compare_never_writes_over_what_it_did_not_write(
    two_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: ``--output`` a run folder (its own accuracy.png) or someone's compare.md."""
    from simulator.reporting.runs_compare import MARK

    run = two_runs[0]
    (run / "accuracy.png").write_bytes(b"the run's own plot")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    args = ["compare", "runs", *map(str, two_runs), "--output"]
    assert main([*args, str(run)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: --output: {run} is a run folder; give another folder for the comparison"
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "compare.md").write_text("my notes on the comparison\n")
    for extra in ([], ["--overwrite"]):
        assert main([*args, str(theirs), *extra]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"{theirs} is not a compare runs folder" in line
        assert "give --overwrite" not in line  # it would not clear it
        assert (theirs / "compare.md").read_text() == "my notes on the comparison\n"
        assert sorted(p.name for p in theirs.iterdir()) == ["compare.md"]
    ours = tmp_path / "ours"  # a folder it wrote: written again with --overwrite only
    assert main([*args, str(ours), "--no-plots"]) == 0
    assert main([*args, str(ours), "--no-plots"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"error: --output: {ours} holds an earlier compare runs folder; give --overwrite to "
        "replace it, or leave out --output for a new folder under runs/runs-compare"
    )
    assert main([*args, str(ours), "--no-plots", "--overwrite"]) == 0
    assert (ours / "compare.md").read_text().endswith(MARK + "\n")


def test_piped_output_fits_100_columns_and_cuts_nothing(
    two_runs: list[Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Output that is not a terminal is 100 columns wide; no cell is cut, and the runs'
    folders are listed whole under the table, one line each."""
    monkeypatch.delenv("COLUMNS", raising=False)
    args = ["compare", "runs", *map(str, two_runs), "--output", str(tmp_path / "o"), "--no-plots"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(x) for x in lines) <= 100
    assert not any("…" in x for x in lines)
    for folder in two_runs:
        (i,) = [i for i, x in enumerate(lines) if x.strip() == str(folder)]
        assert lines[i - 1].endswith(":")  # under the run's label
