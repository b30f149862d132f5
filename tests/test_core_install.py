"""The core install runs the in-process simulator; every other path names its extra in one line.

Each check runs ``unlearnsim`` in a subprocess whose ``sitecustomize`` (written into
``tmp_path``, on that process's ``PYTHONPATH`` only) hides the modules of the extras, so that
they are as absent as in a fresh ``pip install unlearnsim``: ``import`` raises
``ModuleNotFoundError`` and ``importlib.util.find_spec`` returns None.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.scenarios import QUICKSTART, ROOT, SMALL

from server.extras import EXTRA_OF_MODULE

#: Every module an extra installs (and Ray, which flwr[simulation] brings).
EXTRA_MODULES = tuple(sorted(EXTRA_OF_MODULE))

HIDE = '''
import os, sys

_HIDDEN = frozenset(os.environ["UNLEARNSIM_TEST_HIDE"].split(","))


class _Hide:
    """Wraps a finder of sys.meta_path: hidden top-level packages are not found."""

    def __init__(self, finder):
        self._finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _HIDDEN:
            return None
        return self._finder.find_spec(name, path, target)

    def __getattr__(self, attr):
        return getattr(self._finder, attr)


sys.meta_path[:] = [_Hide(f) if hasattr(f, "find_spec") else f for f in sys.meta_path]
'''


def run(
    tmp_path: Path, *argv: str, hide: tuple[str, ...] = EXTRA_MODULES, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in ``tmp_path`` with the modules ``hide`` absent."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "UNLEARNSIM_TEST_HIDE": ",".join(hide),
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
    )


def cli(tmp_path: Path, *args: str, hide: tuple[str, ...] = EXTRA_MODULES) -> tuple[int, str]:
    """Run ``unlearnsim ARGS`` without ``hide``; its exit status and stderr."""
    res = run(tmp_path, "-m", "server.cli", *args, hide=hide)
    return res.returncode, res.stderr


def test_the_hidden_modules_are_absent_in_the_subprocess(tmp_path: Path) -> None:
    probe = (
        "import importlib.util, sys\n"
        "print(','.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None))\n"
        "import kafka\n"
    )
    res = run(tmp_path, "-c", probe, *EXTRA_MODULES, timeout=60)
    assert res.stdout.strip() == ""
    assert "ModuleNotFoundError: No module named 'kafka'" in res.stderr
    shown = run(tmp_path, "-c", probe, "kafka", "flwr", hide=("ray",), timeout=60)
    assert (shown.returncode, shown.stdout.strip()) == (0, "kafka,flwr"), shown.stderr


def test_the_quickstart_runs_without_any_extra(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [arg for o in SMALL for arg in ("--set", o)]
    code, err = cli(tmp_path, "run", str(QUICKSTART), "--output", str(out), "--no-progress", *args)
    assert code == 0, err
    for name in ("run.json", "summary.md", "metrics.json", "batches.csv", "receipts.jsonl"):
        assert (out / name).is_file(), name
    assert list(out.glob("*.png")), "the plots are part of the core"
    assert '"status": "completed"' in (out / "run.json").read_text()


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (
            ["--stream", "kafka", "--bootstrap", "127.0.0.1:9"],
            "error: --stream kafka needs the kafka extra: pip install 'unlearnsim[kafka]'",
        ),
        (
            ["--set", "stream.source=kafka", "--set", "bootstrap=127.0.0.1:9"],
            "error: stream.source: kafka needs the kafka extra: pip install 'unlearnsim[kafka]'",
        ),
        (
            ["--transport", "flower-sim"],
            "error: --transport flower-sim needs the flower extra: "
            "pip install 'unlearnsim[flower]'",
        ),
        (
            ["--set", "transport=flower-deploy"],
            "error: transport: flower-deploy needs the flower extra: "
            "pip install 'unlearnsim[flower]'",
        ),
    ],
)
def test_a_run_whose_extra_is_missing_says_what_to_install_in_one_line(
    tmp_path: Path, options: list[str], line: str
) -> None:
    out = tmp_path / "run"
    code, err = cli(tmp_path, "run", str(QUICKSTART), "--output", str(out), *options)
    assert (code, err.strip()) == (2, line)
    assert not out.exists(), "refused at pre-flight: no run folder"


def test_flower_sim_without_ray_says_which_pythons_have_it(tmp_path: Path) -> None:
    code, err = cli(tmp_path, "run", str(QUICKSTART), "--transport", "flower-sim", hide=("ray",))
    assert code == 2
    assert err.strip() == (
        "error: --transport flower-sim needs Ray, which the flower extra installs on "
        "Python 3.11-3.12, or 3.13-3.14 except on Windows: pip install 'unlearnsim[flower]' "
        "under such a Python"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["produce", str(QUICKSTART), "--bootstrap", "127.0.0.1:9"],
            "error: unlearnsim produce needs the kafka extra: pip install 'unlearnsim[kafka]'",
        ),
        (
            ["stack", "up", "--dir", "stack"],
            "error: unlearnsim stack up needs the stack extra: pip install 'unlearnsim[stack]'",
        ),
    ],
)
def test_other_commands_name_their_extra_in_one_line(
    tmp_path: Path, args: list[str], line: str
) -> None:
    assert cli(tmp_path, *args) == (2, line + "\n")


def test_a_source_read_with_pandas_names_the_data_extra(tmp_path: Path) -> None:
    table = tmp_path / "rows.csv"
    table.write_text("x,label\n" + "".join(f"{i},{i % 2}\n" for i in range(40)))
    scenario = tmp_path / "csv.yaml"
    scenario.write_text(
        f"name: csv\ndata: {{source: csv, path: {table}, label_column: label}}\n"
        "partition: {num_clients: 2}\nstream: {phases: [{name: a, ticks: 1, rate: 1}]}\n"
    )
    line = f"{scenario}: data.source: 'csv' needs the data extra (pandas): " + (
        "pip install 'unlearnsim[data]'"
    )
    assert cli(tmp_path, "run", str(scenario), "--output", "out") == (2, f"error: {line}\n")
    assert not (tmp_path / "out").exists()
    res = run(tmp_path, "-m", "server.cli", "validate", str(scenario), timeout=60)
    assert (res.returncode, res.stdout) == (2, f"error {line}\n")


def test_every_command_still_shows_its_help(tmp_path: Path) -> None:
    for command in ("run", "validate", "produce", "broker", "compare", "stack"):
        res = run(tmp_path, "-m", "server.cli", command, "--help", timeout=60)
        assert res.returncode == 0, (command, res.stderr)
