"""Where a run writes, and ``run.json``: what ran, when, with what, and how it ended.

* :func:`new_run_folder` — the scenario's default ``output_dir`` is a *parent*: every run gets
  ``<output_dir>/<UTC timestamp>-<short id>/`` and ``<output_dir>/latest`` (a relative
  symlink) points at the newest one, so a sweep keeps every run;
* :func:`claim_folder` — an explicit ``--output DIR`` is used as given, but only when it is
  empty (or absent), cleared first with ``overwrite``, or kept when the caller resumes (a Kafka
  consumer on its own checkpoint appends); anything else is refused with a
  :class:`~simulator.errors.ConfigError`, so nothing stale ever sits beside new files.
  ``overwrite`` clears only a run folder (:func:`run_outputs`, :mod:`simulator.owned_files`):
  one whose ``run.json`` unlearnsim wrote and that holds nothing but a run's files, and never
  the working directory, a home directory, a filesystem root or the scenario's folder;
* :class:`RunManifest` — ``run.json``: ``format`` (:data:`RUN_FORMAT`, the mark of a run
  folder), ``id``, ``started_at``/``ended_at`` (UTC ISO 8601),
  ``status`` (``running``, ``completed``, ``failed`` with ``error``, ``interrupted`` with
  ``interrupted``: batch k of N), the ``command`` line, package ``versions`` and the ``git``
  commit of the checkout (``git rev-parse`` with a timeout; never fails the run).

Pure standard library (no rich, no torch): the CLI and :func:`simulator.runner.run_scenario`
both use it.
"""

from __future__ import annotations

import json
import os
import platform
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from simulator.owned_files import Outputs, check_overwrite, claim

MANIFEST = "run.json"
#: ``run.json``'s ``format``: marks a folder as a run folder that unlearnsim wrote.
RUN_FORMAT = "unlearnsim-run/1"
MARKER = f"{MANIFEST} written by unlearnsim"
LATEST = "latest"
#: Distributions whose versions go into ``run.json`` (absent ones are recorded as null).
PACKAGES = ("unlearnsim", "torch", "numpy", "scipy", "scikit-learn", "flwr", "pydantic")
STATUSES = ("running", "completed", "failed", "interrupted")
#: What else a run writes at the top of its folder, besides the recorder's
#: :data:`~simulator.reporting.run_report.OUTPUT_FILES`: ``run.json`` and its temporary file,
#: ``batches.csv``'s, the ServerApp's ``transport.json`` and log (:mod:`server.server_app`),
#: and a Kafka consumer's state files when ``--state-dir`` is the run folder itself
#: (:mod:`server.kafka.checkpoint`, :mod:`server.kafka.restart`, :mod:`server.health`).
RUN_FILES = (
    MANIFEST,
    f".{MANIFEST}.*.tmp",
    ".batches.csv.tmp",
    "transport.json",
    "flower-server.log",
    "checkpoint.npz",
    "checkpoint.npz.tmp",
    "checkpoint.pkl",
    "federation.pkl",
    "federation.pkl.tmp",
    "lock",
    "ready",
    "ready.tmp",
)
#: The sub-folders a run creates: the Kafka consumer's default state folder, a deployed Flower
#: run's processes and app (:mod:`server.flower.deployment`), the simulation engine's home.
RUN_FOLDERS = ("kafka-state", "flower", "flwr-home")


def now_iso() -> str:
    """The current UTC time, ISO 8601 with milliseconds and ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id() -> str:
    """A short random run id (8 hex digits)."""
    return secrets.token_hex(4)


def new_run_folder(parent: str | Path, run_id: str | None = None) -> Path:
    """Create ``parent/<UTC timestamp>-<run id>/`` and point ``parent/latest`` at it.

    Parameters
    ----------
    parent : the scenario's ``output_dir``.
    run_id : the run's id (default: a new one).

    Returns
    -------
    Path
        The new, empty run folder.
    """
    parent = Path(parent)
    rid = run_id or new_run_id()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    parent.mkdir(parents=True, exist_ok=True)
    folder = parent / f"{stamp}-{rid}"
    folder.mkdir()
    point_latest(parent, folder)
    return folder


def point_latest(parent: Path, folder: Path) -> None:
    """Atomically make ``parent/latest`` a relative symlink to ``folder``.

    A no-op where the file system has no symlinks.
    """
    link = parent / LATEST
    tmp = parent / f".{LATEST}.{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(folder.name, target_is_directory=True)
        os.replace(tmp, link)
    except OSError:  # no symlinks here (or `latest` is a real folder): the runs are still kept
        tmp.unlink(missing_ok=True)


def latest_folder(parent: str | Path) -> Path | None:
    """The folder ``parent/latest`` points at, if any."""
    link = Path(parent) / LATEST
    return link.resolve() if link.is_symlink() and link.resolve().is_dir() else None


def is_run_manifest(data: dict[str, Any]) -> bool:
    """``data`` (a parsed ``run.json``) was written by :class:`RunManifest`.

    Its ``format`` is :data:`RUN_FORMAT`; or, written before that key existed, it has an
    ``id``, a ``status`` and ``versions`` that name ``unlearnsim``.
    """
    if data.get("format") == RUN_FORMAT:
        return True
    versions = data.get("versions")
    return (
        isinstance(versions, dict)
        and "unlearnsim" in versions
        and isinstance(data.get("id"), str)
        and data.get("status") in (*STATUSES, "crashed")
    )


def is_run_folder(folder: str | Path) -> bool:
    """``folder`` holds a ``run.json`` that unlearnsim wrote."""
    return is_run_manifest(read_manifest(folder))


def run_outputs() -> Outputs:
    """Everything a run writes into its folder, and how a run folder is recognised.

    The one list of a run's files (:data:`RUN_FILES`, :data:`RUN_FOLDERS` and the recorder's
    ``OUTPUT_FILES``): ``--overwrite`` deletes these and nothing else.
    """
    from simulator.reporting.run_report import OUTPUT_FILES

    return Outputs(
        kind="run folder",
        marker=MARKER,
        proof=is_run_folder,
        files=(*RUN_FILES, *OUTPUT_FILES),
        folders=RUN_FOLDERS,
    )


def check_recorder_target(folder: str | Path, option: str = "output_dir") -> None:
    """Refuse a folder where a run's recorder would replace files that no run wrote.

    The recorder deletes and rewrites its ``OUTPUT_FILES`` (``summary.md``, ``metrics.json``,
    ...) in its folder; a folder that already holds one of them must be a run folder.

    Raises
    ------
    ConfigError
        Naming ``option`` and the file in the way.
    """
    from simulator.reporting.run_report import OUTPUT_FILES

    recorder = Outputs(kind="run folder", marker=MARKER, proof=is_run_folder, files=OUTPUT_FILES)
    check_overwrite(Path(folder), recorder, option)


def claim_folder(
    folder: str | Path,
    *,
    overwrite: bool = False,
    resume: bool = False,
    keep: tuple[str | Path, ...] = (),
) -> Path:
    """Make an explicit output folder ready for a run (module docstring).

    Parameters
    ----------
    folder : the explicit ``--output``.
    overwrite : clear a non-empty run folder first (only a run's files, :func:`run_outputs`).
    resume : keep a non-empty folder (a Kafka consumer resuming its own checkpoint there).
    keep : files whose folder is never cleared (the scenario file being run).

    Raises
    ------
    ConfigError
        ``folder`` is a file, or a non-empty folder without ``overwrite`` or ``resume``, or
        ``overwrite`` would clear what is not a run folder's
        (:func:`simulator.owned_files.clearable`) or a protected folder
        (:func:`simulator.owned_files.refuse_protected`). Nothing is deleted then.
    """
    path = Path(folder).expanduser()  # as the pre-flight checked it
    if resume and path.is_dir():
        return path
    return claim(
        path,
        run_outputs(),
        "--output",
        overwrite=overwrite,
        keep=keep,
        instead="leave out --output for a new run folder under the scenario's output_dir",
    )


def package_versions() -> dict[str, str | None]:
    """Python's and each of :data:`PACKAGES`' versions (null where not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(where: Path | None = None, timeout: float = 2.0) -> dict[str, Any] | None:
    """The commit of the git checkout holding this package, and whether it has local changes.

    ``None`` outside a checkout, without git, or past ``timeout`` seconds.
    """
    cwd = where or Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


@dataclass
class RunManifest:
    """``run.json`` of one run folder.

    Merged into the file and rewritten atomically on every change (the recorder and an outer
    command may both add to it).

    Parameters
    ----------
    folder : the run folder.
    command : the command line (default: ``sys.argv``).
    extra : more keys written at the start (e.g. ``scenario``, ``kafka_state_dir``).
    """

    folder: Path
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    extra: dict[str, Any] = field(default_factory=dict)

    def start(self) -> None:
        """Write ``run.json`` with status ``running``.

        A folder whose run is already running in a live process (the CLI started it; the
        ServerApp runs under a SuperLink) keeps its id and command; a resumed folder (a Kafka
        consumer's) keeps its id and lists the earlier sessions (``crashed`` where a process
        died without recording its end).
        """
        earlier = read_manifest(self.folder)
        if earlier.get("status") == "running" and _alive(earlier):
            self._write({**earlier, **self.extra})
            return
        named = re.fullmatch(r"\d{8}T\d{6}Z-([0-9a-f]{8})", self.folder.name)
        rid = earlier.get("id") or (named.group(1) if named else new_run_id())
        data: dict[str, Any] = {
            "format": RUN_FORMAT,
            "id": rid,
            "started_at": now_iso(),
            "ended_at": None,
            "status": "running",
            "command": self.command,
            "cwd": os.getcwd(),
            "host": platform.node(),
            "pid": os.getpid(),
            "versions": package_versions(),
            "git": git_commit(),
            **self.extra,
        }
        if earlier:  # a Kafka consumer resuming in its folder
            keep = ("started_at", "ended_at", "status", "interrupted", "error")
            session = {k: earlier[k] for k in keep if k in earlier}
            if session.get("status") == "running":  # that process died without an end
                session["status"] = "crashed"
            data["sessions"] = [*earlier.get("sessions", []), session]
        self._write(data)

    def update(self, **values: Any) -> None:
        """Add keys (e.g. ``interrupted``) to ``run.json``."""
        self._write({**read_manifest(self.folder), **values})

    def end(self, status: str, *, error: str | None = None) -> None:
        """Record how the run ended (``completed``, ``failed`` with ``error``, ``interrupted``)."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        data = read_manifest(self.folder)
        data.update(status=status, ended_at=now_iso())
        if error is not None:
            data["error"] = error
        started = data.get("started_at")
        if isinstance(started, str):
            began = datetime.fromisoformat(started.replace("Z", "+00:00"))
            data["wall_seconds"] = round((datetime.now(UTC) - began).total_seconds(), 3)
        self._write(data)

    def _write(self, data: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{MANIFEST}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        os.replace(tmp, self.folder / MANIFEST)


def _alive(manifest: dict[str, Any]) -> bool:
    """The process that wrote ``manifest`` still runs (on this host)."""
    pid = manifest.get("pid")
    if manifest.get("host") != platform.node() or not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_ACTIVE: set[Path] = set()


@contextmanager
def tracked(
    folder: str | Path, command: list[str] | None = None, **extra: Any
) -> Iterator[RunManifest]:
    """Keep ``run.json`` for the code inside.

    ``running`` now; at the end ``completed``, ``interrupted`` (a ``KeyboardInterrupt``, or an
    ``interrupted`` key the recorder added after a graceful stop) or ``failed`` with the error.
    Nested uses on the same folder (the CLI around :func:`~simulator.runner.run_scenario`)
    leave it to the outermost. ``command``: the command line to record (default ``sys.argv``).
    """
    manifest = RunManifest(Path(folder), extra=extra)
    if command is not None:
        manifest.command = list(command)
    key = Path(folder).resolve()
    if key in _ACTIVE:
        if extra:
            manifest.update(**extra)
        yield manifest
        return
    _ACTIVE.add(key)
    manifest.start()
    try:
        yield manifest
    except KeyboardInterrupt:
        manifest.end("interrupted")
        raise
    except BaseException as exc:
        manifest.end("failed", error=f"{type(exc).__name__}: {exc}")
        raise
    else:
        done = "interrupted" if read_manifest(folder).get("interrupted") else "completed"
        manifest.end(done)
    finally:
        _ACTIVE.discard(key)


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """``folder/run.json`` as a dict (empty when absent or unreadable)."""
    try:
        data = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
