"""Errors of the Kafka adapter (subclasses of the project's :class:`UnlearnSimError`)."""

from __future__ import annotations

from simulator.errors import UnlearnSimError


class BrokerUnavailableError(UnlearnSimError, RuntimeError):
    """The Kafka broker did not answer in time (the message names the address)."""


class CheckpointError(UnlearnSimError, RuntimeError):
    """A checkpoint cannot be used: another consumer holds it, or it belongs to another run."""
