"""The command line's edges: ``--version``, exit status 2 for every refusal, grouped
``run --help`` and each sub-command's own help."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from server.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_version_prints_the_installed_version() -> None:
    res = cli("--version")
    assert res.returncode == 0
    assert res.stdout.strip() == f"unlearnsim {metadata.version('unlearnsim')}"


def test_validate_refuses_a_missing_file_with_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["validate", str(missing)]) == 2
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(f"error {missing}: cannot read scenario")


def help_text(*args: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args([*args, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def test_run_help_is_grouped_by_topic(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text("run", capsys=capsys)
    titles = [line for line in text.splitlines() if line and not line[0].isspace()]
    assert titles[1:] == [
        "options:",
        "scenario:",
        "outputs:",
        "stream:",
        "federation:",
        "performance:",
    ]
    # nothing is left in the ungrouped "options:" block but --help itself
    block = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    assert [line.split()[0] for line in block.splitlines() if line.startswith("  -")] == ["-h,"]
    for flag in ("--output", "--overwrite", "--stream", "--transport", "--blas-threads"):
        assert flag in text


@pytest.mark.parametrize(
    ("args", "has", "lacks"),
    [
        (("broker", "start"), "--storage", "{start,stop,status}"),
        (("broker", "stop"), "--pid-file", "--storage"),
        (("stack", "up"), "--wait", "--volumes"),
        (("stack", "down"), "--volumes", "--wait"),
    ],
)
def test_each_subcommand_has_its_own_help(
    args: tuple[str, ...], has: str, lacks: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_text(*args, capsys=capsys)
    assert text.startswith(f"usage: unlearnsim {' '.join(args)} ")
    assert has in text and lacks not in text


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["compare", "scenarios/quickstart.yaml"], ["compare", "run", "scenarios/quickstart.yaml"]),
        (["compare-summary", "a", "b"], ["compare", "summary", "a", "b"]),
        (["compare-retable", "a"], ["compare", "retable", "a"]),
        (["runs", "compare", "a", "--no-plots"], ["compare", "runs", "a", "--no-plots"]),
    ],
)
def test_the_previous_comparison_commands_still_work_with_a_note(
    old: list[str], new: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """One comparison family (``compare run|runs|summary|retable``); the names of the previous
    release are kept for one release, each with a note that names its new form."""
    with pytest.raises(SystemExit) as done:
        main([*old, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr()
    assert f"usage: unlearnsim {' '.join(new[:2])}" in out.out
    assert f"is now 'unlearnsim {' '.join(new[:2])}'" in out.err
    assert "goes in the next release" in out.err


def test_the_current_comparison_commands_print_no_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for action in ("run", "runs", "summary", "retable"):
        with pytest.raises(SystemExit):
            main(["compare", action, "--help"])
        assert capsys.readouterr().err == ""
