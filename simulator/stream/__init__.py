"""Deletion streams: the wire events and the deterministic in-process generator.

``events`` defines :class:`DeletionRequest` / :class:`DeletionReceipt` (JSON,
versioned); ``generator`` turns a scenario's ``stream`` section into requests
and groups them into deletion batches.
"""

from simulator.stream.events import STREAM_EPOCH, DeletionReceipt, DeletionRequest
from simulator.stream.generator import batches, generate_stream

__all__ = ["STREAM_EPOCH", "DeletionReceipt", "DeletionRequest", "batches", "generate_stream"]
