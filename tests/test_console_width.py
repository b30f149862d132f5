"""Output fits its terminal: no line wider than the console (100 columns when piped), numbers
never cut, explanations wrapped under their bullet, and a progress bar on one line."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress
from support.scenarios import QUICKSTART, SMALL

from server.cli import PIPED_WIDTH, main
from simulator.reporting.console import fitted_table
from simulator.runner.run import progress_columns

ROOT = Path(__file__).resolve().parents[1]


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_a_piped_quickstart_has_no_line_over_100_columns(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    res = subprocess.run(
        [sys.executable, "-m", "server.cli", "run", str(QUICKSTART), "--output",
         str(tmp_path / "q"), "--no-plots"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert PIPED_WIDTH == 100
    assert widest(res.stdout) <= 100, [x for x in res.stdout.splitlines() if len(x) > 100]
    assert "…" not in res.stdout  # nothing cut
    assert "what happened:" in res.stdout and "Phases" in res.stdout


def test_at_80_columns_nothing_is_wider_or_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    sets = [arg for o in SMALL for arg in ("--set", o)]
    argv = ["run", str(QUICKSTART), *sets, "--output", str(tmp_path / "q"), "--no-plots"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert widest(out) <= 80 and "…" not in out
    for phase in ("warmup", "class-1-purge", "client-2-cleanup"):  # whole phase names
        assert phase in out


@pytest.mark.parametrize("width", [60, 80, 100, 140])
def test_the_progress_bar_stays_on_one_line(width: int) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=width)
    with Progress(*progress_columns(width), console=console) as bar:
        task = bar.add_task("deletion stream", total=30, info="", step="")
        info = "removed 12345  budget 100%  acc 0.999"
        bar.update(task, advance=30, info=info, step="evaluation baselines (LiRA references)")
    (line,) = buf.getvalue().splitlines()
    assert len(line) <= width
    assert "30/30" in line and info in line and "eta 0:00:00" in line


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120])
def test_a_fitted_table_never_cuts_a_number(width: int) -> None:
    header = ("phase", "batches", "samples", "peak budget", "difference [95% t]", "p (Holm)")
    rows = [
        ("client-2-cleanup", "10", "12345", "99.34%", "+23.66 [+12.54, +34.78]", "0.00123"),
        ("warmup", "3", "7", "0.5%", "-0.0025 [-0.0031, +0.0019]", "1"),
    ]
    buf = io.StringIO()
    Console(file=buf, width=width).print(fitted_table(width, "t", header, rows))
    out = buf.getvalue()
    assert widest(out) <= width and "…" not in out
    words = out.split()
    for row in rows:
        for cell in row:
            for word in cell.split():
                assert word in words, (width, word)
