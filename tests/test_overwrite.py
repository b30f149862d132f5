"""``--overwrite`` deletes only what a run wrote, and a run refused at pre-flight writes nothing
(issue 28).

``--overwrite`` clears a folder only when it holds a ``run.json`` that unlearnsim wrote and
nothing but a run's files; never the working directory, a home directory, a filesystem root or
the scenario's folder. Each refusal is one ``error: --output: ...`` line and leaves every file
where it was.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from support.scenarios import QUICKSTART, SMALL

from server.cli import main
from simulator.errors import ConfigError
from simulator.owned_files import refuse_protected
from simulator.runner.run_folder import (
    LATEST,
    RUN_FOLDERS,
    RUN_FORMAT,
    RunManifest,
    claim_folder,
    is_run_folder,
    new_run_folder,
    read_manifest,
    run_outputs,
)


def cli_args(scenario: Path | str, *extra: str) -> list[str]:
    args = ["run", str(scenario), "--no-progress", "--no-plots"]
    for o in SMALL:
        args += ["--set", o]
    return [*args, *extra]


def a_run_folder(folder: Path) -> Path:
    """``folder`` as an earlier run left it: its ``run.json`` and some of a run's files."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = RunManifest(folder, command=["unlearnsim", "run", "x.yaml"])
    manifest.start()
    manifest.end("completed")
    (folder / "summary.md").write_text("old summary\n")
    (folder / "events.jsonl").write_text("{}\n")
    (folder / "kafka-state").mkdir()
    (folder / "kafka-state" / "checkpoint.npz").write_bytes(b"old")
    return folder


def snapshot(folder: Path) -> dict[str, Any]:
    """Every path under ``folder`` with its content (links as their target)."""
    out: dict[str, Any] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            out[key] = ("link", os.readlink(path))
        elif path.is_file():
            out[key] = path.read_bytes()
        else:
            out[key] = "dir"
    return out


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the CLI, expect exit 2 with one error line; returns that line."""
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


def test_a_run_folder_is_recognised_by_its_run_json(tmp_path: Path) -> None:
    folder = a_run_folder(tmp_path / "run")
    assert read_manifest(folder)["format"] == RUN_FORMAT and is_run_folder(folder)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "run.json").write_text(json.dumps({"id": "x", "status": "completed"}))
    assert not is_run_folder(tmp_path / "other")  # a run.json, but not unlearnsim's
    legacy = {"id": "ab12cd34", "status": "completed", "versions": {"unlearnsim": "0.1.0"}}
    (tmp_path / "other" / "run.json").write_text(json.dumps(legacy))
    assert is_run_folder(tmp_path / "other")  # written before run.json had a format
    assert not is_run_folder(tmp_path / "nowhere")


def test_the_run_file_list_names_every_writer() -> None:
    """The one list of a run's files covers what the server's writers put in a run folder."""
    from server.kafka.checkpoint import LEGACY_NAME
    from server.kafka.checkpoint import NAME as CHECKPOINT
    from server.kafka.restart import NAME as FEDERATION
    from server.server_app import SERVER_LOG, TRANSPORT_FILE
    from simulator.reporting.flat import BATCHES_CSV
    from simulator.runner.artifacts import CLIENTS_FILE, HEAD_FILE

    outputs = run_outputs()
    names = [TRANSPORT_FILE, SERVER_LOG, CHECKPOINT, LEGACY_NAME, FEDERATION, BATCHES_CSV]
    names += [HEAD_FILE, CLIENTS_FILE, "run.json", "summary.md", "accuracy.png", "ready"]
    names += [".run.json.123.tmp", ".batches.csv.tmp", f"{CHECKPOINT}.tmp", f"{FEDERATION}.tmp"]
    assert [n for n in names if n not in outputs.files and not _matches(n, outputs)] == []
    assert set(RUN_FOLDERS) == {"kafka-state", "flower", "flwr-home"}


def _matches(name: str, outputs: Any) -> bool:
    import fnmatch

    return any(fnmatch.fnmatchcase(name, p) for p in outputs.files)


def test_overwrite_clears_an_earlier_run_and_runs_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(cli_args(QUICKSTART, "--output", str(out))) == 0
    first = read_manifest(out)["id"]
    (out / "accuracy.png").write_bytes(b"an earlier run's plot")  # a run's file, from before
    (out / "kafka-state").mkdir()
    (out / "kafka-state" / "checkpoint.npz").write_bytes(b"old")
    line = refused(capsys, cli_args(QUICKSTART, "--output", str(out)))
    assert "--overwrite" in line and read_manifest(out)["id"] == first  # nothing touched
    assert main(cli_args(QUICKSTART, "--output", str(out), "--overwrite")) == 0
    info = read_manifest(out)
    assert info["status"] == "completed" and info["id"] != first
    assert not (out / "accuracy.png").exists() and not (out / "kafka-state").exists()
    assert "old summary" not in (out / "summary.md").read_text()


def test_overwrite_refuses_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    here = a_run_folder(tmp_path / "here")  # even a genuine run folder
    scenario = shutil.copy(QUICKSTART, tmp_path / "q.yaml")
    monkeypatch.chdir(here)
    before = snapshot(here)
    line = refused(capsys, cli_args(scenario, "--output", ".", "--overwrite"))
    assert line == "error: --output: . is the working directory; it is never cleared"
    assert snapshot(here) == before


def test_overwrite_of_dot_in_a_users_folder_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: ``cd DIR && unlearnsim run S.yaml --output . --overwrite``."""
    user = tmp_path / "user"
    (user / "notes").mkdir(parents=True)
    (user / "notes" / "ideas.md").write_text("mine")
    (user / "mine.txt").write_text("mine")
    shutil.copy(QUICKSTART, user / "q.yaml")
    monkeypatch.chdir(user)
    before = snapshot(user)
    line = refused(capsys, cli_args("q.yaml", "--output", ".", "--overwrite"))
    assert line.startswith("error: --output: . is the working directory")
    assert snapshot(user) == before


def test_overwrite_refuses_a_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = a_run_folder(tmp_path / "users" / "me")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    before = snapshot(home)
    line = refused(capsys, cli_args(QUICKSTART, "--output", str(home), "--overwrite"))  # ~
    assert line == f"error: --output: {home} is a home directory; it is never cleared"
    line = refused(capsys, cli_args(QUICKSTART, "--output", "~", "--overwrite"))  # quoted
    assert line == f"error: --output: {home} is a home directory; it is never cleared"
    users = tmp_path / "users"
    line = refused(capsys, cli_args(QUICKSTART, "--output", str(users), "--overwrite"))
    assert line.startswith(f"error: --output: {users} holds a home directory ({home})")
    assert snapshot(home) == before


def test_overwrite_refuses_a_filesystem_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before anything is looked at: every deletion is a tripwire here."""

    def tripwire(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"tried to delete {args}")

    monkeypatch.setattr(shutil, "rmtree", tripwire)
    monkeypatch.setattr(Path, "unlink", tripwire)
    monkeypatch.setattr(os, "remove", tripwire)
    root = Path(Path.cwd().anchor)
    with pytest.raises(ConfigError, match="is a filesystem root; it is never cleared"):
        refuse_protected(root, "--output")
    with pytest.raises(ConfigError, match="is a filesystem root") as caught:
        claim_folder(root, overwrite=True)
    assert caught.value.location == "--output"


def test_overwrite_refuses_the_scenarios_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = a_run_folder(tmp_path / "exp")
    scenario = shutil.copy(QUICKSTART, folder / "q.yaml")
    before = snapshot(folder)
    line = refused(capsys, cli_args(scenario, "--output", str(folder), "--overwrite"))
    assert line == f"error: --output: {folder} is the folder of q.yaml; it is never cleared"
    assert snapshot(folder) == before


def test_overwrite_refuses_a_run_folder_with_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = a_run_folder(tmp_path / "out")
    (folder / "mine.txt").write_text("mine")
    (folder / "notes").mkdir()
    (folder / "notes" / "a.md").write_text("mine")
    before = snapshot(folder)
    line = refused(capsys, cli_args(QUICKSTART, "--output", str(folder), "--overwrite"))
    assert line == (
        f"error: --output: {folder} holds what is not a run folder's (mine.txt, notes/); "
        "nothing was deleted: move them or choose a new or empty folder"
    )
    assert snapshot(folder) == before


def test_overwrite_refuses_a_folder_of_earlier_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = tmp_path / "runs"
    for _ in range(3):
        a_run_folder(new_run_folder(parent))
    assert (parent / LATEST).is_symlink()
    before = snapshot(parent)
    line = refused(capsys, cli_args(QUICKSTART, "--output", str(parent), "--overwrite"))
    assert line == (
        f"error: --output: {parent} is not a run folder (it holds no run.json written by "
        "unlearnsim); nothing was deleted: choose a new or empty folder"
    )
    assert snapshot(parent) == before


@pytest.mark.parametrize(
    "manifest",
    [None, {"id": "x", "status": "completed"}, "not json"],
    ids=["none", "foreign", "bad"],
)
def test_overwrite_refuses_a_folder_without_unlearnsims_run_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: object
) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "summary.md").write_text("someone's summary")  # a run's file name, not a run's
    if manifest is not None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        (folder / "run.json").write_text(text)
    before = snapshot(folder)
    line = refused(capsys, cli_args(QUICKSTART, "--output", str(folder), "--overwrite"))
    assert "is not a run folder" in line and snapshot(folder) == before


def test_the_python_api_never_replaces_a_summary_no_run_wrote(tmp_path: Path) -> None:
    from support.scenarios import quiet, scenario

    from simulator.runner import ReportingConfig, run_scenario

    folder = tmp_path / "analysis"
    folder.mkdir()
    (folder / "summary.md").write_text("my own summary")
    options = ReportingConfig(console=quiet(), progress=False, plots=False)
    with pytest.raises(ConfigError, match=r"already holds summary\.md and is not a run folder"):
        run_scenario(scenario(SMALL), options, output_dir=folder)
    assert sorted(p.name for p in folder.iterdir()) == ["summary.md"]
    assert (folder / "summary.md").read_text() == "my own summary"


def _listening() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--stream", "kafka"], "error: --bootstrap: --stream kafka needs --bootstrap HOST:PORT"),
        (["--metrics-port", "70000"], "error: --metrics-port: 70000 is not a TCP port"),
        (
            ["--stream", "kafka", "--bootstrap", "LISTENER", "--signing-key-file", "MISSING"],
            "error: --signing-key-file: cannot read the signing key",
        ),
    ],
    ids=["kafka-without-bootstrap", "bad-metrics-port", "missing-signing-key"],
)
def test_a_run_refused_at_preflight_makes_no_folder_and_keeps_latest(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    expected: str,
) -> None:
    """The README's test command left a failed run in ``runs/quickstart/`` that took ``latest``."""
    monkeypatch.chdir(tmp_path)  # the scenario's output_dir (runs/quickstart) is relative
    parent = tmp_path / "runs" / "quickstart"
    earlier = a_run_folder(new_run_folder(parent))
    before = snapshot(parent)
    with _listening() as listener:
        port = listener.getsockname()[1]
        argv = [a.replace("LISTENER", f"127.0.0.1:{port}") for a in extra]
        argv = [a.replace("MISSING", str(tmp_path / "no-key")) for a in argv]
        line = refused(capsys, cli_args(QUICKSTART, *argv))
    assert line.startswith(expected)
    assert snapshot(parent) == before and (parent / LATEST).resolve() == earlier.resolve()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_a_refused_output_makes_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("mine")
    line = refused(capsys, cli_args(QUICKSTART, "--output", str(taken / "mine.txt" / "sub")))
    assert "is a file, not a folder" in line
    refused(capsys, cli_args(QUICKSTART, "--output", str(taken)))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["mine.txt", "taken"]


def test_the_hint_suggests_overwrite_only_where_it_would_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--overwrite``: "give --overwrite" for an earlier run's folder, else why not."""
    earlier = a_run_folder(tmp_path / "earlier")
    line = refused(capsys, cli_args(QUICKSTART, "--output", str(earlier)))
    assert line == (
        f"error: --output: {earlier} holds an earlier run folder; give --overwrite to replace "
        "it, or leave out --output for a new run folder under the scenario's output_dir"
    )
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "mine.txt").write_text("mine\n")
    mixed = a_run_folder(tmp_path / "mixed")
    (mixed / "mine.txt").write_text("mine\n")
    for folder, why in (
        (notes, f"{notes} is not a run folder (it holds no run.json written by unlearnsim)"),
        (mixed, f"{mixed} holds what is not a run folder's (mine.txt)"),
    ):
        line = refused(capsys, cli_args(QUICKSTART, "--output", str(folder)))
        assert "give --overwrite" not in line
        assert line.startswith(
            f"error: --output: {folder} is not empty, and --overwrite would not clear it: {why}"
        )
        assert (folder / "mine.txt").read_text() == "mine\n"
