"""Seeds on the streaming scenario: ``run --seeds N --methods a,b`` runs the scenario
itself per seed and method into one parent folder; ``compare runs PARENT`` pairs the methods over
the seeds with ``compare``'s statistics, per phase and metric, and overlays the runs."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from support.scenarios import QUICKSTART, SMALL

from server.cli import main
from simulator.compare.verdict import Pairing, paired_values
from simulator.runner.run_folder import read_manifest
from simulator.runner.sweep import read_sweep


def sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("sweep") / "drift"
    args = ["run", str(QUICKSTART), *sets(SMALL), "--seeds", "2", "--methods", "cr,decoremoval"]
    assert main([*args, "--output", str(parent), "--no-progress", "--no-plots"]) == 0
    return parent


def test_a_sweep_runs_the_scenario_per_seed_and_method(sweep: Path) -> None:
    manifest = read_sweep(sweep)
    assert manifest is not None
    assert manifest["methods"] == ["cr", "decoremoval"] and manifest["seeds"] == [7, 8]
    names = [r["folder"] for r in manifest["runs"]]
    assert names == ["cr-seed7", "decoremoval-seed7", "cr-seed8", "decoremoval-seed8"]
    for item in manifest["runs"]:
        folder = sweep / item["folder"]
        assert read_manifest(folder)["status"] == "completed"
        final = json.loads((folder / "metrics.json").read_text())
        assert final["method"] == item["method"]
        resolved = (folder / "resolved_scenario.yaml").read_text()
        assert f"seed: {item['seed']}\n" in resolved  # the scenario itself, with its seed
        assert "shifts:" in resolved and "class-1-purge" in resolved  # timed shifts, phases


def test_runs_compare_gives_paired_verdicts_per_phase_and_metric(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    assert main(["compare", "runs", str(sweep), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "paired over seeds, each method vs cr" in printed
    assert max(len(x) for x in printed.splitlines()) <= 100  # piped: 100 columns
    bottom = [x for x in printed.splitlines() if x.startswith("bottom line over ")]
    assert len(bottom) == 1 and "Holm" in bottom[0]
    text = (out / "compare.md").read_text()
    assert "## Paired verdicts" in text and "| DR vs CR | 2 |" in text
    assert "**bottom line over " in text and "Holm" in text
    assert "## Runs side by side" in text
    rows = list(csv.DictReader(io.StringIO((out / "verdicts.csv").read_text())))
    phases = list(dict.fromkeys(r["phase"] for r in rows))
    assert phases == ["warmup", "class-1-purge", "client-2-cleanup", "whole run"]
    metrics = {r["metric"] for r in rows if r["phase"] == "warmup"}
    assert {"test accuracy", "MIA |AUC - 0.5| (loss attack)", "budget used", "retrains"} <= metrics
    verdicts = {"DR better", "CR better", "no difference", "n/a", "DR higher", "DR lower"}
    assert {r["verdict"] for r in rows} <= verdicts
    better = {r["metric"]: r["better"] for r in rows}
    assert better["test accuracy"] == "higher" and better["budget used"] == "lower"
    assert better["MIA |AUC - 0.5| (loss attack)"] == "lower"
    assert better["removal ms per batch"] == "lower" and better["forget accuracy"] == "neither"
    for r in rows:  # a direction-less metric never reads as better or worse
        if r["better"] == "neither":
            assert not r["verdict"].endswith("better")
        assert float(r["p_holm"] or "nan") >= float(r["p_value"] or "nan") or not r["p_value"]

    # the statistics are compare's, on the runs' own final values
    final = {
        (item["method"], item["seed"]): json.loads(
            (sweep / item["folder"] / "metrics.json").read_text()
        )["metrics"]["accuracy_test"]
        for item in json.loads((sweep / "sweep.json").read_text())["runs"]
    }
    expected = paired_values(
        {s: v for (m, s), v in final.items() if m == "decoremoval"},
        {s: v for (m, s), v in final.items() if m == "cr"},
        Pairing("decoremoval", "cr", "test accuracy", 3),
    )
    assert expected is not None
    (row,) = [r for r in rows if r["phase"] == "whole run" and r["metric"] == "test accuracy"]
    assert row["seeds"] == "2"
    assert float(row["diff"]) == pytest.approx(expected.diff, rel=1e-5, abs=1e-9)
    assert row["verdict"] in {"no difference", "n/a"} or float(row["p_value"]) < 0.05

    for name in ("accuracy.png", "budget.png", "mia.png"):
        assert (out / name).stat().st_size > 5_000, name


def test_sweep_plots_carry_phases_shifts_and_every_seed(sweep: Path, tmp_path: Path) -> None:
    from simulator.reporting.sweep_compare import load_sweep, plot_sweep

    figures = plot_sweep(load_sweep(sweep), tmp_path)
    ax = figures["accuracy.png"].axes[0]
    labels = [t.get_text().strip() for t in ax.texts]
    assert {"warmup", "class-1-purge", "client-2-cleanup"} <= set(labels)
    assert any(t.startswith("shift: gaussian_noise") for t in labels)
    assert ax.get_xlabel() == "stream tick"
    curves = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2]
    assert len(curves) >= 4  # one line per run: 2 seeds x 2 methods
    runs = {ln.get_gid(): ln for ln in curves}
    # a seed's runs pair up: the same line style and marker, the method's colour
    for seed in (7, 8):
        cr, dr = runs[f"cr-seed{seed}"], runs[f"decoremoval-seed{seed}"]
        assert (cr.get_linestyle(), cr.get_marker()) == (dr.get_linestyle(), dr.get_marker())
        assert cr.get_color() != dr.get_color()
    assert runs["cr-seed7"].get_linestyle() != runs["cr-seed8"].get_linestyle()
    assert runs["cr-seed7"].get_color() == runs["cr-seed8"].get_color()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"cr", "decoremoval", "seed 7", "seed 8"} <= set(legend)


def test_a_one_method_sweep_says_there_is_nothing_to_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = tmp_path / "one"
    args = ["run", str(QUICKSTART), *sets(SMALL), "--seeds", "2", "--methods", "cr"]
    assert main([*args, "--output", str(parent), "--no-progress", "--no-plots"]) == 0
    capsys.readouterr()
    out = tmp_path / "cmp"
    assert main(["compare", "runs", str(parent), "--output", str(out), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert "Nothing to pair: the sweep ran one method (cr)" in " ".join(printed.split())
    assert "paired over seeds" not in printed
    text = (out / "compare.md").read_text()
    assert "Nothing to pair" in text and "## Paired verdicts" not in text


def test_a_sweep_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine\n")
    args = ["run", str(QUICKSTART), *sets(SMALL), "--seeds", "2"]
    assert main([*args, "--output", str(taken)]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in taken.iterdir()) == ["notes.txt"]
    assert main([*args, "--methods", "cr,cr", "--output", str(tmp_path / "x")]) == 2
    assert "a method is named twice" in capsys.readouterr().err
    assert main([*args, "--stream", "kafka", "--output", str(tmp_path / "k")]) == 2
    assert "--seeds: a seeded sweep plays the scenario's own stream" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "k").exists()
