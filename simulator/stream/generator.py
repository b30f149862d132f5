"""Deterministic deletion streams generated from a scenario's ``stream`` section.

Ticks run phase after phase. In every tick of a phase:

1. each withdrawal scheduled for the tick emits one request with ``client_id``;
   from then on that client's samples count as gone;
2. ``Poisson(rate)`` requests arrive, plus ``burst.size`` more when
   ``tick_in_phase % burst.every == 0``;
3. each request comes from one data subject (:mod:`simulator.stream.subjects`):
   a first sample is drawn uniformly among the still-retained samples that match
   the phase target (random: every remaining client; class: ``labels ==
   class_id``; client: that client's shard) and whose subject still holds at
   least ``samples_per_request`` of them; the request names it and
   ``samples_per_request - 1`` more of its subject's matching samples, drawn
   without replacement. The request's ``subject`` owns every id it names. (With
   one sample per request this is the uniform draw over matching samples.)

A sample id is named at most once across the stream, and never after its
client withdrew. When no subject holds enough matching samples any more, the
tick emits no further request (a request never names fewer than
``samples_per_request`` ids); the rest of the pool stays. A phase whose draws
asked for requests but that emitted none at all (its target matches no retained
sample: a class the task lacks, an emptied client) is an error naming the phase,
not a quiet stretch. ``class_id`` is a source label, mapped to a class index by
:func:`simulator.data.labels.class_index`.
Everything is drawn from ``rng``: the same seed gives the same stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import numpy as np
from numpy.typing import NDArray

from simulator.data.labels import class_index
from simulator.errors import ConfigError, InputError
from simulator.scenario.stream_spec import Phase, StreamSpec, Target
from simulator.stream.events import STREAM_EPOCH, DeletionRequest
from simulator.stream.subjects import SubjectRegistry, client_subject, subject_registry


class _RetainedPool:
    """Which sample ids are still retained, and by which client."""

    def __init__(self, client_indices: Sequence[NDArray[np.int64]], labels: NDArray[np.int64]):
        labels = np.asarray(labels)
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise InputError(
                f"labels should be a 1-D integer array, got {labels.dtype}{labels.shape}"
            )
        self.labels = labels
        self.owner = np.full(labels.shape[0], -1, dtype=np.int64)
        for client, ids in enumerate(client_indices):
            ids = np.asarray(ids)
            if ids.size and not np.issubdtype(ids.dtype, np.integer):
                raise InputError(f"client {client} ids should be integers, got {ids.dtype}")
            if ids.size and (ids.min() < 0 or ids.max() >= labels.shape[0]):
                raise InputError(f"client {client} holds ids outside 0..{labels.shape[0] - 1}")
            if np.any(self.owner[ids] >= 0) or np.unique(ids).size != ids.size:
                raise InputError(f"client {client} shares sample ids with another client")
            self.owner[ids] = client
        self.num_clients = len(client_indices)
        self.alive = self.owner >= 0

    def candidates(self, target: Target, klass: int | None) -> NDArray[np.int64]:
        """Retained ids matching ``target`` (``klass``: its class index), in increasing order."""
        mask = self.alive
        if target.kind == "class":
            mask = mask & (self.labels == klass)
        elif target.kind == "client":
            mask = mask & (self.owner == target.client)
        return np.flatnonzero(mask).astype(np.int64)

    def remove(self, ids: NDArray[np.int64]) -> None:
        self.alive[ids] = False

    def withdraw(self, client: int) -> None:
        self.alive[self.owner == client] = False


def _check_clients(stream: StreamSpec, num_clients: int) -> None:
    for i, phase in enumerate(stream.phases):
        if phase.target.client is not None and phase.target.client >= num_clients:
            raise InputError(f"phase {i} targets client {phase.target.client} of {num_clients}")
    for withdrawal in stream.withdrawals:
        if withdrawal.client >= num_clients:
            raise InputError(f"withdrawal of client {withdrawal.client} of {num_clients}")


def generate_stream(  # noqa: PLR0913 (keyword-only, each a part of the task)
    stream: StreamSpec,
    *,
    client_indices: Sequence[NDArray[np.int64]],
    labels: NDArray[np.int64],
    class_labels: Sequence[int],
    scenario_name: str,
    rng: np.random.Generator,
    subjects: SubjectRegistry | None = None,
) -> list[DeletionRequest]:
    """Generate the deletion requests of a scenario stream (see the module docstring).

    Parameters
    ----------
    stream
        The scenario's ``stream`` section.
    client_indices
        Global sample ids of each client's shard (disjoint).
    labels
        Class index (``0..len(class_labels) - 1``) of every global sample id.
    class_labels
        The source label of each class index (``Dataset.class_labels``): a ``class_id``
        target names one of them.
    scenario_name
        Prefix of the request ids ``f"{scenario_name}-{seq:07d}"``.
    rng
        Source of all randomness.
    subjects
        Who owns which row (default: :func:`~simulator.stream.subjects.subject_registry`
        of the shards with ``stream.rows_per_subject``).

    Returns
    -------
    list of DeletionRequest
        In tick order; ``requested_at = 2026-01-01T00:00:00Z + tick * tick_seconds``.

    Raises
    ------
    InputError
        When the shards overlap, hold ids outside ``labels`` or the stream names
        a client that does not exist.
    ConfigError
        A ``class_id`` that is not one of ``class_labels``, or a phase that asked for
        requests and generated none (naming the phase).
    """
    pool = _RetainedPool(client_indices, labels)
    _check_clients(stream, pool.num_clients)
    classes = _target_classes(stream, class_labels, pool.labels)
    if subjects is None:
        subjects = subject_registry(
            client_indices, pool.labels.shape[0], rows_per_subject=stream.rows_per_subject
        )
    withdrawals: dict[int, list[int]] = {}
    for withdrawal in stream.withdrawals:
        withdrawals.setdefault(withdrawal.at, []).append(withdrawal.client)
    requests: list[DeletionRequest] = []

    def emit(tick: int, sample_ids: list[int] | None, client: int | None) -> None:
        seq = len(requests)
        if client is not None:
            subject = client_subject(client)
        else:
            subject = subjects.owner((sample_ids or [-1])[0]) or "nobody"
        requests.append(
            DeletionRequest(
                request_id=f"{scenario_name}-{seq:07d}",
                subject=subject,
                sample_ids=sample_ids,
                client_id=client,
                requested_at=STREAM_EPOCH + timedelta(seconds=tick * stream.tick_seconds),
                tick=tick,
            )
        )

    tick = 0
    for i, phase in enumerate(stream.phases):
        size = phase.samples_per_request
        wanted = emitted = 0
        for tick_in_phase in range(phase.ticks):
            for client in withdrawals.get(tick, []):
                pool.withdraw(client)
                emit(tick, None, client)
            count = int(rng.poisson(phase.rate))
            if phase.burst is not None and tick_in_phase % phase.burst.every == 0:
                count += phase.burst.size
            candidates = pool.candidates(phase.target, classes[i]) if count else np.empty(0, int)
            wanted += count
            for ids in _draw(candidates, subjects.subject_of, count, size, rng):
                pool.remove(ids)
                emit(tick, sorted(ids.tolist()), None)
                emitted += 1
            tick += 1
        _check_phase_emitted(i, phase, wanted, emitted)
    return requests


def _target_classes(
    stream: StreamSpec, class_labels: Sequence[int], labels: NDArray[np.int64]
) -> list[int | None]:
    """The class index of each phase's ``class_id`` (None: not a class target)."""
    if labels.size and (labels.min() < 0 or labels.max() >= len(class_labels)):
        raise InputError(f"labels should be class indices 0..{len(class_labels) - 1}")
    return [
        None
        if phase.target.class_id is None
        else class_index(class_labels, phase.target.class_id, f"stream.phases.{i}.target.class_id")
        for i, phase in enumerate(stream.phases)
    ]


def _check_phase_emitted(i: int, phase: Phase, wanted: int, emitted: int) -> None:
    """A phase whose draws asked for requests must have emitted at least one."""
    if not wanted or emitted:
        return
    target = phase.target
    what = {"class": f"class_id {target.class_id}", "client": f"client {target.client}"}
    raise ConfigError(
        f"phase {phase.name!r} generated no deletion request ({wanted} asked for): no data "
        f"subject holds {phase.samples_per_request} retained sample(s) of its target "
        f"({what.get(target.kind, target.kind)})",
        f"stream.phases.{i}",
    )


def _draw(
    candidates: NDArray[np.int64],
    subject_of: NDArray[np.int64],
    count: int,
    size: int,
    rng: np.random.Generator,
) -> list[NDArray[np.int64]]:
    """Up to ``count`` requests of ``size`` ids each, one subject per request (step 3)."""
    out: list[NDArray[np.int64]] = []
    if not count or not candidates.size:
        return out
    owners = subject_of[candidates]
    left = np.bincount(owners[owners >= 0], minlength=int(owners.max(initial=0)) + 1)
    free = owners >= 0
    for _ in range(count):
        eligible = np.flatnonzero(free & (left[np.maximum(owners, 0)] >= size))
        if not eligible.size:
            break
        first = int(rng.choice(eligible))
        subject = owners[first]
        others = np.flatnonzero(free & (owners == subject))
        others = others[others != first]
        chosen = np.concatenate([[first], rng.choice(others, size=size - 1, replace=False)])
        free[chosen] = False
        left[subject] -= size
        out.append(candidates[chosen].astype(np.int64))
    return out


def batches(
    requests: Sequence[DeletionRequest], max_batch_requests: int
) -> list[list[DeletionRequest]]:
    """Group requests by tick (consecutive runs) and cut each group into chunks.

    Every batch holds requests of a single tick, at most ``max_batch_requests``
    of them, in the original order.
    """
    if max_batch_requests < 1:
        raise InputError(f"max_batch_requests should be >= 1, got {max_batch_requests}")
    result: list[list[DeletionRequest]] = []
    for request in requests:
        last = result[-1] if result else None
        if last is not None and last[-1].tick == request.tick and len(last) < max_batch_requests:
            last.append(request)
        else:
            result.append([request])
    return result
