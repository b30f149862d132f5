"""What of a schema-valid deletion request a federation cannot apply, whatever rows it names.

The wire schema (:class:`simulator.stream.DeletionRequest`) bounds every field on its own; the
batch (:func:`simulator.runner.pipeline.apply_batch`) interprets some of them against the
scenario. Each field the batch interprets is either checked here, before anything changes,
or by the row validation (:func:`simulator.runner.requests.expand`):

* ``tick`` places the request on the scenario's clock: it names the phase in the batch's event
  and the distribution shifts active when the batch is evaluated. A tick past the scenario's
  stream (``0 <= tick < stream.total_ticks``) places it nowhere: the request is rejected
  (:func:`unappliable`) and the batch's tick is taken from the others (:func:`batch_tick`);
* ``sample_ids`` (unknown, already deleted, named twice in a batch) and ``client_id`` (no such
  client) are validated by :func:`~simulator.runner.requests.expand`; a client that failed
  earlier by the pipeline itself;
* ``request_id`` (the ledger key), ``subject`` (the gate's business: ownership and the rate
  limit) and ``requested_at`` (only a latency) are used as given, whatever their value.

So every schema-valid request gets a receipt and none stops the batch (fuzzed over the schema's
whole space in ``tests/test_kafka_fields.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from simulator.scenario import Scenario
from simulator.stream import DeletionRequest


def unappliable(scenario: Scenario, request: DeletionRequest) -> str | None:
    """Why ``request`` cannot be applied in ``scenario`` whatever its rows (None: it can)."""
    ticks = scenario.stream.total_ticks
    if request.tick >= ticks:
        return (
            f"tick {request.tick} outside the scenario's stream (ticks 0..{ticks - 1}; "
            "0 for a request from outside the scenario)"
        )
    return None


def batch_tick(scenario: Scenario, requests: Iterable[DeletionRequest], last: int) -> int:
    """The batch's tick: the latest tick of its requests inside the stream (else ``last``)."""
    ticks = scenario.stream.total_ticks
    return max((r.tick for r in requests if r.tick < ticks), default=last)
