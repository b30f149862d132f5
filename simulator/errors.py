"""One exception hierarchy for the whole project.

Configuration and input errors subclass :class:`ValueError` so that callers who
only know the standard library still catch them, and each says what was wrong
and where.
"""

from __future__ import annotations


class UnlearnSimError(Exception):
    """Base class of every error raised on purpose by unlearnsim."""


class ConfigError(UnlearnSimError, ValueError):
    """A scenario or setting is malformed; ``location`` names the YAML path or key.

    ``origin`` names where the value came from when that is not the file (``--set``); the
    message then reads ``origin: location: message``.
    """

    def __init__(
        self, message: str, location: str | None = None, *, origin: str | None = None
    ) -> None:
        self.location = location
        self.origin = origin
        text = f"{location}: {message}" if location else message
        super().__init__(f"{origin}: {text}" if origin else text)


class InputError(UnlearnSimError, ValueError):
    """An argument is invalid (wrong shape, non-finite values, empty selection...)."""


class UnknownSampleError(InputError):
    """Sample ids that are not (or no longer) in the retained set."""

    def __init__(self, ids: list[int], context: str = "retained set") -> None:
        self.ids = ids
        shown = ", ".join(str(i) for i in ids[:10]) + (" ..." if len(ids) > 10 else "")
        super().__init__(f"{len(ids)} sample id(s) not in the {context}: {shown}")


class DataUnavailableError(UnlearnSimError, RuntimeError):
    """A data source cannot be loaded here; the message says what to install or provide."""


class NumericalError(UnlearnSimError, ArithmeticError):
    """A solver failed (non-positive-definite Hessian, no convergence)."""


class ClientUnavailableError(UnlearnSimError, RuntimeError):
    """Federated clients failed or did not answer in time (after any retries).

    ``clients`` maps each failed client id to the reason (timeout, error reply, lost node).
    The server reports them and goes on without them, or rejects the work that needed them.
    """

    def __init__(self, clients: dict[int, str], action: str = "") -> None:
        self.clients = dict(clients)
        self.action = action
        shown = "; ".join(f"client {c}: {r}" for c, r in sorted(self.clients.items()))
        super().__init__(f"{action + ': ' if action else ''}{shown}")


class DeletionFailedError(UnlearnSimError, RuntimeError):
    """A client's step of a deletion failed; every client of the batch is as before it.

    ``client`` is the client whose step failed and ``reason`` what failed (the exception's
    class and message). Nothing of the batch was applied anywhere (the client restored its
    own state, the federation the other clients'), so its requests can be answered and the
    stream goes on (:func:`simulator.runner.pipeline.apply_batch`).
    """

    def __init__(self, client: int, reason: str) -> None:
        self.client = client
        self.reason = reason
        super().__init__(f"client {client} failed while deleting ({reason})")
