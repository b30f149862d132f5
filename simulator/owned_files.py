"""What a command may delete or overwrite in a folder the user named: only what it wrote.

Every command that writes into a user-given folder (``run --output``, ``compare runs --output``,
``compare --output``, ``stack --dir``) declares its :class:`Outputs`: the names of the files it
writes there (``fnmatch`` patterns), the sub-folders it creates, and a *marker* that proves a
folder is one it wrote (``run.json`` written by unlearnsim, ``fits.json`` of a comparison, ...).
Then:

* :func:`refuse_protected` — a folder that is, or holds, the working directory, a home
  directory, a filesystem root or a given file (the scenario being run) is never cleared;
* :func:`clearable` — a folder may be cleared only when it carries the marker and *every* entry
  in it is one of the writer's outputs; otherwise a one-line
  :class:`~simulator.errors.ConfigError` says why, and nothing is touched;
* :func:`clear` — delete exactly those entries (sub-folders whole, symlinks as links);
* :func:`claim` — a folder for a writer that replaces its earlier output only when told
  (``--overwrite``): refused when not empty otherwise, suggesting ``--overwrite`` only where
  it would work and saying why it would not elsewhere;
* :func:`check_overwrite` — a writer of a fixed set of files may replace one of them only in a
  folder that carries its marker (or where none of them exists yet).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import ConfigError


@dataclass(frozen=True)
class Outputs:
    """What one command writes into a folder.

    Parameters
    ----------
    kind : what such a folder is called, for messages (``"run folder"``).
    marker : what proves a folder is one (``"run.json written by unlearnsim"``).
    proof : ``proof(folder)``: the folder carries a genuine marker.
    files : ``fnmatch`` patterns of the files it writes at the top of the folder.
    folders : names of the sub-folders it creates (everything in them is its).
    """

    kind: str
    marker: str
    proof: Callable[[Path], bool]
    files: tuple[str, ...]
    folders: tuple[str, ...] = ()

    def owns(self, entry: Path) -> bool:
        """``entry`` (a direct child of the folder) is one of the writer's outputs."""
        if entry.is_dir() and not entry.is_symlink():
            return entry.name in self.folders
        return any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in self.files)


def protected_folders(keep: Iterable[str | Path] = ()) -> list[tuple[Path, str]]:
    """The folders never cleared, each with what it is.

    The working directory, the home directory (``$HOME`` and the account's), and the folder
    of each file in ``keep``. A filesystem root is refused by :func:`refuse_protected` itself.
    """
    out = [(Path.cwd().resolve(), "the working directory")]
    homes = {Path(os.path.expanduser("~"))}
    try:
        import pwd

        homes.add(Path(pwd.getpwuid(os.getuid()).pw_dir))
    except (ImportError, KeyError):  # no pwd (Windows) or no account entry
        pass
    out += [(h.resolve(), "a home directory") for h in sorted(homes)]
    for file in keep:
        out.append((Path(file).resolve().parent, f"the folder of {Path(file).name}"))
    return out


def protected_reason(folder: str | Path, keep: Iterable[str | Path] = ()) -> str | None:
    """Why ``folder`` is never cleared (a root, or is or holds a protected folder), or None."""
    target = Path(folder).expanduser().resolve()
    if target.parent == target:
        return f"{folder} is a filesystem root; it is never cleared"
    for path, what in protected_folders(keep):
        if path == target:
            return f"{folder} is {what}; it is never cleared"
        if path.is_relative_to(target):
            return f"{folder} holds {what} ({path}); it is never cleared"
    return None


def refuse_protected(folder: str | Path, option: str, keep: Iterable[str | Path] = ()) -> None:
    """Refuse to clear ``folder`` when it is or holds a protected folder.

    Raises
    ------
    ConfigError
        Naming ``option``: ``folder`` is a filesystem root, or is (or holds) the working
        directory, a home directory or the folder of a file in ``keep``.
    """
    reason = protected_reason(folder, keep)
    if reason is not None:
        raise ConfigError(reason, option)


def foreign_reason(folder: Path, outputs: Outputs) -> str | None:
    """Why the non-empty ``folder`` is not the writer's to clear, or None when it is.

    It carries no marker of the writer, or it holds entries the writer does not write (the
    first few are named).
    """
    entries = sorted(folder.iterdir())
    if not entries:
        return None
    if not outputs.proof(folder):
        return f"{folder} is not a {outputs.kind} (it holds no {outputs.marker})"
    strays = [e.name + ("/" if e.is_dir() else "") for e in entries if not outputs.owns(e)]
    if strays:
        named = ", ".join(strays[:3]) + (f" and {len(strays) - 3} more" if len(strays) > 3 else "")
        return f"{folder} holds what is not a {outputs.kind}'s ({named})"
    return None


def clearable(folder: Path, outputs: Outputs, option: str) -> list[Path]:
    """The entries of ``folder`` to delete before the writer writes it again.

    Raises
    ------
    ConfigError
        Naming ``option``: the folder is not empty and carries no marker of the writer, or it
        holds entries the writer does not write (:func:`foreign_reason`).
    """
    reason = foreign_reason(folder, outputs)
    if reason is not None:
        what = "move them or " if "holds what" in reason else ""
        raise ConfigError(
            f"{reason}; nothing was deleted: {what}choose a new or empty folder", option
        )
    return sorted(folder.iterdir())


def claim(
    folder: str | Path,
    outputs: Outputs,
    option: str,
    *,
    overwrite: bool = False,
    keep: Iterable[str | Path] = (),
    instead: str = "choose a new or empty folder",
) -> Path:
    """Make ``folder`` ready for the writer: absent or empty, or cleared with ``overwrite``.

    A non-empty folder is refused without ``overwrite``; the refusal suggests ``--overwrite``
    only when it would work (the folder is the writer's and not protected), and otherwise
    says why it would not. With ``overwrite`` the writer's folder is cleared
    (:func:`clearable`, :func:`clear`); anything else is refused and nothing is deleted.

    Parameters
    ----------
    folder : the folder the user named.
    outputs : what the writer writes there.
    option : the option that named it (``--output``), for messages.
    overwrite : clear an earlier output of the writer first.
    keep : files whose folder is never cleared (the scenario being run).
    instead : what else the user may do, for the refusal (``leave out --output ...``).

    Returns
    -------
    Path
        The folder, created.

    Raises
    ------
    ConfigError
        Naming ``option`` (module docstring). Nothing is deleted then.
    """
    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path} exists and is not a folder", option)
    if path.is_dir() and any(path.iterdir()):
        keep = tuple(keep)
        reason = protected_reason(path, keep) or foreign_reason(path, outputs)
        if reason is not None and not overwrite:
            raise ConfigError(
                f"{path} is not empty, and --overwrite would not clear it: {reason}; {instead}",
                option,
            )
        if reason is not None:
            refuse_protected(path, option, keep)
            clearable(path, outputs, option)  # raises, naming what is in the way
        if not overwrite:
            raise ConfigError(
                f"{path} holds an earlier {outputs.kind}; give --overwrite to replace it, or "
                f"{instead}",
                option,
            )
        clear(clearable(path, outputs, option))
    path.mkdir(parents=True, exist_ok=True)
    return path


def clear(entries: Iterable[Path]) -> None:
    """Delete ``entries`` (from :func:`clearable`): folders whole, symlinks as links."""
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)


def check_overwrite(folder: Path, outputs: Outputs, option: str) -> None:
    """Refuse to write into ``folder`` where that would replace a file of someone else.

    A folder that carries the writer's marker, or holds none of its output names, passes.

    Raises
    ------
    ConfigError
        Naming ``option`` and the first file that would be replaced.
    """
    if not folder.is_dir() or outputs.proof(folder):
        return
    clash = sorted(e.name for e in folder.iterdir() if outputs.owns(e))
    if clash:
        raise ConfigError(
            f"{folder} already holds {clash[0]} and is not a {outputs.kind} (it holds no "
            f"{outputs.marker}); nothing was written: choose a new or empty folder",
            option,
        )


__all__ = [
    "Outputs",
    "check_overwrite",
    "claim",
    "clear",
    "clearable",
    "foreign_reason",
    "protected_folders",
    "protected_reason",
    "refuse_protected",
]
