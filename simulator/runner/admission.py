"""What of a schema-valid deletion request a federation cannot apply, whatever rows it names.

The wire schema (:class:`simulator.stream.DeletionRequest`) bounds every field on its own; the
batch (:func:`simulator.runner.pipeline.apply_batch`) interprets some of them against the
scenario. Each field the batch interprets is either checked here, before anything changes,
or by the row validation (:func:`simulator.runner.requests.expand`):

* ``tick`` places the request on the scenario's clock: it names the phase in the batch's event
  and the distribution shifts active when the batch is evaluated. A tick past the scenario's
  stream (``0 <= tick < stream.total_ticks``) places it nowhere: the request is rejected
  (:func:`unappliable`). A batch is placed by the requests it applied (:func:`batch_place`):
  re-sent duplicates and rejected requests changed nothing and place it nowhere;
* ``sample_ids`` (unknown, already deleted, named twice in a batch) and ``client_id`` (no such
  client) are validated by :func:`~simulator.runner.requests.expand`; a client that failed
  earlier by the pipeline itself;
* ``request_id`` (the ledger key), ``subject`` (the gate's business: ownership and the rate
  limit) and ``requested_at`` (only a latency) are used as given, whatever their value.

So every schema-valid request gets a receipt and none stops the batch (fuzzed over the schema's
whole space in ``tests/test_kafka_fields.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class BatchPlace:
    """Where a batch sits on the scenario's clock, from the requests it applied.

    Attributes
    ----------
    tick : the latest tick of the applied requests (the evaluation sees the shifts active
        then); the run's last tick when none was applied.
    phase : the phase most applied requests came from (a tie: the later phase); the phase of
        ``tick`` when none was applied.
    phases : applied requests per phase, in stream order (empty when none was applied).
    """

    tick: int
    phase: str
    phases: dict[str, int]


def batch_place(scenario: Scenario, applied: Iterable[DeletionRequest], last: int) -> BatchPlace:
    """The :class:`BatchPlace` of a batch whose applied requests are ``applied``.

    ``last``: the run's last tick so far (the place of a batch that applied nothing). Requests
    outside the stream are never applied (:func:`unappliable`) and are ignored here too.
    """
    stream = scenario.stream
    ticks = [r.tick for r in applied if 0 <= r.tick < stream.total_ticks]
    if not ticks:
        at = min(max(last, 0), stream.total_ticks - 1)
        return BatchPlace(last, stream.phase_at(at).name, {})
    order = {p.name: i for i, p in enumerate(stream.phases)}
    counts = Counter(stream.phase_at(t).name for t in ticks)
    phases = dict(sorted(counts.items(), key=lambda kv: order[kv[0]]))
    phase = max(phases, key=lambda name: (phases[name], order[name]))
    return BatchPlace(max(ticks), phase, phases)
