"""``unlearnsim compare run --quick``: the whole pipeline end to end on tiny data (CI's check)."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest

from server.cli import main
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def test_quick_profile_runs_the_mnist_comparison_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "quick"
    started = time.perf_counter()
    code = main(
        [
            "compare",
            str(ROOT / "scenarios" / "compare_mnist_3v8_ood.yaml"),
            "--quick",
            "--methods",
            "cr,decoremoval,decoremoval_extractor",
            "--seeds",
            "2",
            "--output",
            str(out),
        ]
    )
    seconds = time.perf_counter() - started
    assert code == 0
    # about 40 s at load 8 on the 2-core VM; the bound only catches a profile that grew
    assert seconds < 600, f"the quick profile took {seconds:.0f} s"
    command = (out / "command.txt").read_text()
    assert "--quick" in command and "--methods retrain,cr,decoremoval" in command
    table = (out / "table.md").read_text()
    for split in ("test", "label_swap", "noise", "rotation", "digits", "remaining"):
        assert f"`{split}`" in table
    assert "## Verdict" in table and "DR-x vs CR" in table
    assert "remaining split (classes the model was not trained on)" in table
    runs = list(csv.DictReader(io.StringIO((out / "runs.csv").read_text())))
    assert {r["removed"] for r in runs} == {"0", "10", "30"}
    assert all(0 <= float(r["pos_remaining"]) <= 1 for r in runs)
    assert all(float(r["acc_digits"]) > 0.5 for r in runs)  # better than chance on the shift
    verdict = list(csv.DictReader(io.StringIO((out / "verdict.csv").read_text())))
    assert {v["method"] for v in verdict} == {"decoremoval", "decoremoval_extractor"}
    assert (out / "utility.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "wrote" in printed
    assert "regime paper: sigma 1, delta 0.001, " in printed  # the regime in use (issue 29)
    fits = json.loads((out / "fits.json").read_text())
    assert fits["torch_threads"] == 1  # --torch-threads' default, as the fits ran (issue 29)
    # the cross-folder verdict table reads verdict.csv at the last removal count
    assert main(["compare", "summary", str(out), str(tmp_path / "missing")]) == 0
    summary = capsys.readouterr().out
    assert "| quick | 30 | 2 | noise |" in summary and "| DR-x |" in summary
    assert "| p (Holm) | verdict |" in summary  # the verdict reads the adjusted p


def test_regimes_are_named_overrides(tmp_path: Path) -> None:
    from simulator.compare.profiles import QUICK, REGIMES

    path = ROOT / "scenarios" / "compare_fashion_pair.yaml"
    paper = load_scenario(path, overrides=list(REGIMES["paper"]))
    legacy = load_scenario(path, overrides=list(REGIMES["legacy"]))
    assert (paper.head.sigma, paper.head.delta, paper.rff.dim) == (1, 1e-3, 1000)
    assert (legacy.head.sigma, legacy.head.delta, legacy.rff.dim) == (10, 1e-4, 512)
    quick = load_scenario(path, overrides=list(QUICK))
    assert quick.data.max_train == 300 and quick.rff.dim == 64
