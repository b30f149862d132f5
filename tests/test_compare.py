"""The comparison harness: removal schedule, measurements, tables, outputs and the CLI."""

from __future__ import annotations

import csv
import io
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from support.scenarios import tiny_compare

from server.cli import main
from simulator.compare import (
    Stat,
    build_workload,
    cut_at_checkpoints,
    expand_requests,
    markdown,
    run_comparison,
    settings_from_scenario,
    summarize,
    write_comparison,
)
from simulator.errors import ConfigError
from simulator.scenario import load_scenario, parse_scenario
from simulator.stream import STREAM_EPOCH, DeletionRequest

ROOT = Path(__file__).resolve().parents[1]
TINY = tiny_compare(
    "tiny_compare",
    extra="ood: {source_class: 1, target_class: 0, fraction: 0.2}\n",
    evaluation="""
  checkpoints: [5, 12]
  shift_splits:
    - {name: noise, kind: gaussian_noise, severity: 1.0, max_rows: 50}""",
)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# ------------------------------------------------------------------------ schedule
@given(
    st.lists(st.integers(1, 9), min_size=0, max_size=8),
    st.lists(st.integers(1, 60), min_size=0, max_size=4),
)
def test_cut_at_checkpoints_keeps_the_stream_and_hits_every_reached_checkpoint(
    sizes: list[int], checkpoints: list[int]
) -> None:
    start = np.cumsum([0, *sizes])
    batch_ids = [np.arange(a, b, dtype=np.int64) for a, b in itertools.pairwise(start)]
    steps, after, missed = cut_at_checkpoints(batch_ids, checkpoints)
    total = int(start[-1])
    wanted = sorted(set(checkpoints))
    reached = [c for c in wanted if c <= total] or ([total] if total else [])
    assert missed == [c for c in wanted if c > total]
    assert sorted(after.values()) == [0, *reached]
    flat = np.concatenate(steps) if steps else np.zeros(0, dtype=np.int64)
    np.testing.assert_array_equal(flat, np.arange(reached[-1] if reached else 0))
    for n_steps, count in after.items():
        assert sum(s.size for s in steps[:n_steps]) == count
    assert all(s.size > 0 for s in steps)
    # a step never spans two batches
    owner = np.searchsorted(start[1:], flat, side="right")
    for s in steps:
        assert np.unique(owner[s]).size == 1


def test_expand_requests_turns_a_withdrawal_into_the_clients_retained_rows() -> None:
    def req(i: int, tick: int, ids: list[int] | None = None, client: int | None = None):
        return DeletionRequest(
            request_id=f"r{i}",
            subject="s",
            sample_ids=ids,
            client_id=client,
            requested_at=STREAM_EPOCH,
            tick=tick,
        )

    groups = np.array([0, 1, 0, 1, 0])
    got = expand_requests([req(0, 0, [2]), req(1, 1, client=0), req(2, 1, [3])], 10, groups)
    assert [g.tolist() for g in got] == [[2], [0, 4, 3]]


# ------------------------------------------------------------------------ workloads
def test_workload_is_the_scenarios_and_deterministic() -> None:
    scenario = parse_scenario(TINY)
    a, b = build_workload(scenario, 4), build_workload(scenario, 4)
    np.testing.assert_array_equal(a.train.x, b.train.x)
    assert [s.tolist() for s in a.steps] == [s.tolist() for s in b.steps]
    assert a.checkpoints == (0, 5, 12)
    assert list(a.splits) == ["test", "label_swap", "noise"]
    assert a.splits["noise"].y.size == 50 and a.splits["noise"].labelled
    np.testing.assert_array_equal(a.splits["noise"].x, b.splits["noise"].x)
    assert any(n.startswith("`label_swap` (120 rows)") for n in a.split_notes)
    assert a.train.groups is not None and set(np.unique(a.train.groups)) == {0, 1, 2}
    c = build_workload(scenario, 5)
    assert [s.tolist() for s in c.steps] != [s.tolist() for s in a.steps]
    settings = settings_from_scenario(scenario)
    assert settings.epochs == 2 and settings.rff_dim == 24 and settings.rff_bandwidth is None
    assert settings.head.accounting == "exact" and settings.decorrelation.steps == 5


# ------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def comparison():
    scenario = parse_scenario(TINY)
    return run_comparison(
        lambda seed: build_workload(scenario, seed),
        ["retrain", "cr", "decoremoval", "ssd"],
        seeds=[4, 5],
    )


def test_every_method_is_measured_at_every_checkpoint(comparison) -> None:
    got = {(m.method, m.seed, m.removed) for m in comparison.measurements}
    assert got == {
        (name, seed, r)
        for name in ("retrain", "cr", "decoremoval", "ssd")
        for seed in (4, 5)
        for r in (0, 5, 12)
    }
    for m in comparison.measurements:
        assert 0 <= m.acc_test <= 1 and 0 <= m.value("f1_label_swap") <= 1
        assert 0.5 <= m.value("conf_noise") <= 1 and 0 <= m.value("acc_noise") <= 1
        assert np.isnan(m.value("acc_ood"))  # the old name is gone
        assert (m.removed == 0) == np.isnan(m.mia_auc)
        if m.method == "retrain":
            assert m.disagreement == 0.0 and m.acc_gap == 0.0
            assert m.retrains == m.removal_calls
        assert np.isfinite(m.disagreement)
    assert len(comparison.fits) == 8


def test_tables_and_outputs(comparison, tmp_path: Path) -> None:
    summaries = summarize(comparison.measurements, comparison.methods)
    assert [(s.method, s.removed) for s in summaries][:3] == [
        ("retrain", 0),
        ("retrain", 5),
        ("retrain", 12),
    ]
    text = markdown(comparison, summaries)
    for heading in (
        "label_swap split",
        "noise split",
        "In-distribution",
        "Removal time",
        "Ratio to `cr`",
        "Membership",
    ):
        assert heading in text
    assert "OOD split" not in text
    assert "extractor trained on all training rows" in text
    files = write_comparison(comparison, tmp_path, command="unlearnsim compare run x")
    assert (tmp_path / "command.txt").read_text() == "unlearnsim compare run x\n"
    rows = list(csv.DictReader(io.StringIO(files["summary"].read_text())))
    assert len(rows) == 12 and rows[0]["seeds"] == "2"
    assert "acc_label_swap_mean" in rows[0] and "acc_noise_std" in rows[0]
    runs = list(csv.DictReader(io.StringIO(files["runs"].read_text())))
    assert len(runs) == 24 and runs[0]["acc_noise"] != ""
    verdict = list(csv.DictReader(io.StringIO(files["verdict"].read_text())))
    # decoremoval vs cr: acc and f1 on test, label_swap and noise at 0, 5 and 12 removed
    assert len(verdict) == 2 * 3 * 3
    assert {v["verdict"] for v in verdict} <= {"DR better", "no difference", "CR better"}
    assert "## Verdict" in files["table"].read_text()
    # the tables can be rewritten from runs.csv alone (6 significant digits: same verdicts,
    # same split list)
    from simulator.compare.report import retable

    def verdict_column() -> list[tuple[str, ...]]:
        rows = csv.DictReader(io.StringIO(files["verdict"].read_text()))
        return [(r["method"], r["metric"], r["removed"], r["verdict"]) for r in rows]

    before = verdict_column()
    table = files["table"].read_text()
    retable(tmp_path)
    assert verdict_column() == before
    assert files["table"].read_text().split("## Verdict")[0] == table.split("## Verdict")[0]
    assert {"utility", "cost_privacy"} <= set(files)
    assert files["utility"].stat().st_size > 1000


def test_stat_text() -> None:
    assert Stat.of([0.5, 0.7]).text(1, 100.0) == "60.0 ± 14.1"
    assert Stat.of([0.5]).text(2) == "0.50"
    assert Stat.of([float("nan")]).text(2) == "n/a"


# ------------------------------------------------------------------------------- CLI
def test_cli_compare_writes_the_command_and_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    out = tmp_path / "out"
    code = main(
        [
            "compare",
            str(path),
            "--methods",
            "cr,ssd",
            "--seeds",
            "1",
            "--checkpoints",
            "6",
            "--option",
            "ssd.selection=5",
            "--set",
            "stream.phases.0.ticks=3",
            "--output",
            str(out),
            "--no-plots",
        ]
    )
    assert code == 0
    command = (out / "command.txt").read_text()
    assert "--methods retrain,cr,ssd" in command and "--option ssd.selection=5" in command
    assert "--set stream.phases.0.ticks=3" in command and "--checkpoints 6" in command
    assert "| 6 |" in (out / "table.md").read_text()
    assert "tables in" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, where",
    [
        (["--methods", "cr,nope"], "method"),
        (["--methods", "cr,cr"], "--methods"),
        (["--option", "sisa.slices=2", "--methods", "cr"], "--option"),
        (["--option", "cr=1"], "--option"),
        (["--checkpoints", "a"], "--checkpoints"),
    ],
)
def test_cli_compare_rejects_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], where: str
) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    assert main(["compare", "run", str(path), "--output", str(tmp_path / "o"), *args]) == 2
    assert where in capsys.readouterr().err


@pytest.mark.parametrize(
    "name",
    [
        "compare_mnist_3v8_ood",
        "compare_fashion_pair",
        "compare_fashion10",
        "compare_sentiment",
        "compare_survey",
    ],
)
def test_comparison_scenarios_validate_and_reach_their_checkpoints(name: str) -> None:
    scenario = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    assert scenario.ood is not None and len(scenario.evaluation.checkpoints) == 3
    stream = scenario.stream.phases[0]
    expected = stream.rate * stream.ticks * stream.samples_per_request
    assert expected >= 1.1 * scenario.evaluation.checkpoints[-1]
    # the paper's regime by default (DecoRemoval Sec. 4.1), two covariate shifts at least
    assert scenario.head.sigma == 1 and scenario.head.delta == 1e-3
    assert scenario.rff.dim == 1000
    kinds = [s.kind for s in scenario.evaluation.shift_splits]
    assert kinds.count("gaussian_noise") + kinds.count("rotation") >= 2
    assert scenario.partition.num_clients == 5  # SISA's default of 5 shards


def test_unknown_method_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        run_comparison([build_workload(parse_scenario(TINY), 4)], ["nope"])


def test_compare_never_writes_over_files_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: refused at the start (before any fitting), every file left as it was."""
    from simulator.compare.report import retable
    from simulator.errors import ConfigError

    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    theirs = tmp_path / "paper"
    theirs.mkdir()
    (theirs / "table.md").write_text("my table\n")
    (theirs / "fits.json").write_text('{"mine": true}\n')
    started = time.perf_counter()
    argv = ["compare", "run", str(path), "--methods", "cr", "--seeds", "1", "--output", str(theirs)]
    assert main(argv) == 2
    assert time.perf_counter() - started < 30  # refused before fitting
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: --output: {theirs} is not empty, and --overwrite would not ")
    assert "is not a comparison folder" in line
    assert (theirs / "table.md").read_text() == "my table\n"
    assert sorted(p.name for p in theirs.iterdir()) == ["fits.json", "table.md"]
    with pytest.raises(ConfigError, match="is not a comparison folder"):
        retable(theirs)
    assert (theirs / "table.md").read_text() == "my table\n"


def test_compare_refuses_an_earlier_comparison_without_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A committed results folder (copied here) is refused before any fitting, in one line."""
    import shutil

    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    results = tmp_path / "compare_mnist_3v8_ood"
    shutil.copytree(ROOT / "results" / "compare_mnist_3v8_ood", results)
    before = {p.name: p.read_bytes() for p in results.iterdir()}
    started = time.perf_counter()
    argv = [
        "compare",
        "run",
        str(path),
        "--methods",
        "cr",
        "--seeds",
        "1",
        "--output",
        str(results),
    ]
    assert main(argv) == 2
    assert time.perf_counter() - started < 30  # refused before fitting
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"error: --output: {results} holds an earlier comparison folder; give --overwrite to "
        "replace it, or leave out --output for a new folder under runs/compare/tiny_compare"
    )
    assert {p.name: p.read_bytes() for p in results.iterdir()} == before


def test_compare_writes_under_runs_by_default_and_overwrites_only_when_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    monkeypatch.chdir(tmp_path)
    base = ["compare", "run", str(path), "--methods", "cr", "--seeds", "1", "--checkpoints", "6"]
    assert main([*base, "--no-plots", "--set", "stream.phases.0.ticks=3"]) == 0
    (folder,) = (tmp_path / "runs" / "compare" / "tiny_compare").glob("*-*")
    assert (tmp_path / "runs" / "compare" / "tiny_compare" / "latest").resolve() == folder.resolve()
    assert (folder / "table.md").exists() and (folder / "fits.json").exists()
    capsys.readouterr()
    (folder / "table.md").write_text("stale\n")
    again = [*base, "--no-plots", "--set", "stream.phases.0.ticks=3", "--output", str(folder)]
    assert main([*again, "--overwrite"]) == 0
    assert (folder / "table.md").read_text() != "stale\n"
