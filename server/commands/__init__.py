"""Subcommands of the ``unlearnsim`` CLI, one module each (see ``server/cli.py``)."""
