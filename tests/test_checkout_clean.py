"""The suite's check that tests leave the working tree alone (``tests/conftest.py``) catches
what a test could leave behind: a ``runs/`` folder (ignored by git), a new file, a changed one;
and not the caches Python and the tools always write."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from support.checkout import changes, new_changes

ROOT = Path(__file__).resolve().parent.parent


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo, check=True, capture_output=True,
    )  # fmt: skip


def a_checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "results").mkdir(parents=True)
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    (repo / "results" / "table.md").write_text("committed\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "start")
    return repo


def test_a_run_folder_in_the_checkout_is_caught(tmp_path: Path) -> None:
    repo = a_checkout(tmp_path)
    before = changes(repo)
    assert before == set()
    (repo / "runs" / "quickstart" / "20250101T000000Z-abcd1234").mkdir(parents=True)
    (repo / "runs" / "quickstart" / "20250101T000000Z-abcd1234" / "run.json").write_text("{}")
    (repo / "runs" / "quickstart" / "latest").symlink_to("20250101T000000Z-abcd1234")
    (repo / ".unlearnsim" / "stack").mkdir(parents=True)
    (repo / ".unlearnsim" / "stack" / "stack.json").write_text("{}")
    (repo / "results" / "table.md").write_text("changed by a test\n")
    (repo / "results" / "new.csv").write_text("x\n")
    after = changes(repo)
    assert after is not None
    assert set(new_changes(before, after)) == {
        "!! .unlearnsim/stack/stack.json",
        " M results/table.md",
        "?? results/new.csv",
        "!! runs/quickstart/20250101T000000Z-abcd1234/run.json",
        "!! runs/quickstart/latest",
    }


def test_a_new_run_beside_earlier_ones_is_caught(tmp_path: Path) -> None:
    """A developer's own ``runs/`` does not hide the one the tests add."""
    repo = a_checkout(tmp_path)
    (repo / "runs" / "q" / "mine").mkdir(parents=True)
    (repo / "runs" / "q" / "mine" / "run.json").write_text("{}")
    before = changes(repo)
    assert before == {"!! runs/q/mine/run.json"}
    (repo / "runs" / "q" / "theirs").mkdir()
    (repo / "runs" / "q" / "theirs" / "run.json").write_text("{}")
    assert new_changes(before, changes(repo) or set()) == ["!! runs/q/theirs/run.json"]


def test_caches_are_not_changes(tmp_path: Path) -> None:
    repo = a_checkout(tmp_path)
    (repo / "results" / "x.py").write_text("X = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "code")
    subprocess.run(
        [sys.executable, "-m", "py_compile", "x.py"], cwd=repo / "results", check=True
    )  # writes __pycache__/
    assert any((repo / "results" / "__pycache__").iterdir())
    for cache in (".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "u.egg-info"):
        (repo / cache).mkdir()
        (repo / cache / "f").write_text("x")
    assert changes(repo) == set()
    assert changes(tmp_path / "not-a-checkout") is None
