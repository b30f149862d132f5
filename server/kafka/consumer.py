"""The deletion-stream consumer: poll, micro-batch, apply, persist, commit, publish.

For every micro-batch (``batcher``):

1. decode each record, whatever its bytes: malformed ones become dead letters (``records``);
2. refuse what the gate refuses (bad signature, not the owner, over the rate limit: ``gate``);
3. answer the requests: duplicates from the ledger, the rest validated and removed by one
   certified update (``apply``), or held for a larger removal (``--min-removal-batch``);
4. persist the head, the ledger, the next offsets and the outbox (the batch's receipts and
   dead letters) atomically (``checkpoint``: a full snapshot every ``snapshot_every`` batches,
   a journal record of the batch in between, :mod:`server.kafka.journal`);
5. commit the offsets to the consumer group (for lag monitoring; the checkpoint is the source
   of truth on restart);
6. publish the outbox (``publisher``), retrying with back-off while the broker is away, on a
   thread of its own while the next batch is read and applied (``delivery``); the next batch
   is persisted only once it is on the broker.

A restart loads the checkpoint, finishes publishing its outbox (sending only what did not
arrive), checks that the log still holds what the checkpoint expects (``offsets``: stop, or
replay or skip as told, never silently) and seeks to the checkpointed offsets, so no request is
lost and none is applied twice. The same check runs when a fetch finds the log shorter than
the position and after the broker was away.

A stop (SIGTERM/SIGINT, :meth:`DeletionConsumer.stop`) ends the session wherever the consumer
waits: polling, backing off, connecting, publishing (``waits``); a fetch error that cannot
heal ends it with :class:`~server.kafka.fetch.FetchError` (``fetch``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError, OffsetOutOfRangeError
from kafka.structs import OffsetAndMetadata

from server.health import process_age
from server.kafka.backoff import Backoff
from server.kafka.batcher import BatchConfig, lag
from server.kafka.checkpoint import CheckpointStore, ConsumerState
from server.kafka.collector import frozen_set_up
from server.kafka.delivery import Delivery
from server.kafka.errors import BrokerUnavailableError
from server.kafka.events import (
    COUNTERS,
    batch_record,
    count_batch,
    kafka_fields,
    recover_batch,
    totals,
)
from server.kafka.fetch import next_records
from server.kafka.gate import Gate, GateConfig, registry_of
from server.kafka.journal import BatchInput
from server.kafka.offsets import Gap, LogProbe, OffsetGapError, Policy, find_gap, fingerprint
from server.kafka.publisher import Publisher
from server.kafka.security import client_options
from server.kafka.topics import Topics, ensure_topics
from server.kafka.waits import ConsumerInterrupted, Waits
from server.kafka.wire import (
    MAX_REQUEST_BYTES,
    Incoming,
    Malformed,
    OutRecord,
    dead_letter,
    decode_request,
    receipt_record,
)
from simulator.runner.federation import Federation
from simulator.runner.monitoring import RunMonitor
from simulator.runner.pipeline import BatchOutcome, apply_batch
from simulator.runner.recorder import RunRecorder
from simulator.stream import DeletionRequest
from simulator.stream.ledger import Ledger

log = logging.getLogger(__name__)

EventHook = Callable[[dict[str, Any], Federation], None]
#: Seconds between heartbeats of the consume loop (to the event hooks, not the events file).
HEARTBEAT_SECONDS = 1.0
#: Seconds the broker has to answer the check at each heartbeat before the consumer is not ready.
BROKER_CHECK_SECONDS = 2.0
#: Seconds the broker has to answer the log check of a fetch (then: not ready, back off, again).
FETCH_CHECK_SECONDS = 5.0


@dataclass(frozen=True)
class ConsumerConfig:
    """Where to read and write, how to batch, whom to trust.

    ``idle_timeout``: stop after this many seconds without a record (None: run until
    :meth:`DeletionConsumer.stop`). ``flush_timeout``: seconds a publish may take before it is
    retried (after checking what arrived). ``events_path``: append one JSON line per batch.
    ``gate``: signature, ownership and rate-limit checks. ``on_offset_gap``: what to do when
    the log no longer holds what the checkpoint expects (``fail``, ``replay``, ``skip``).
    ``min_removal_batch``: fewest rows one client's removal may cover (1: no holding).
    """

    bootstrap: str
    state_dir: Path
    topics: Topics = field(default_factory=Topics)
    group_id: str = "unlearnsim"
    batch: BatchConfig = field(default_factory=BatchConfig)
    max_request_bytes: int = MAX_REQUEST_BYTES
    idle_timeout: float | None = None
    fsync: bool = True
    request_partitions: int = 1
    connect_timeout: float = 60.0
    flush_timeout: float = 10.0
    events_path: Path | None = None
    gate: GateConfig = field(default_factory=GateConfig)
    on_offset_gap: Policy = "fail"
    min_removal_batch: int = 1
    snapshot_every: int = 1


@dataclass(frozen=True)
class _Session:
    """What one :meth:`DeletionConsumer.run` holds open while it loops.

    Attributes
    ----------
    consumer : the Kafka consumer of the requests topic.
    parts : its assigned partitions, by number.
    store : the checkpoint store of the state folder.
    ledger : the answered request ids.
    """

    consumer: KafkaConsumer
    parts: list[TopicPartition]
    store: CheckpointStore
    ledger: Ledger


@dataclass
class _Batch:
    """One micro-batch decoded: its requests with their records, refusals and dead letters.

    Attributes
    ----------
    sources : the record of each request (held ones first).
    requests : the requests, in that order.
    denied : position in ``requests`` -> why the gate refused it.
    dead : dead letters of the records that are not requests.
    kinds : dead letters by kind.
    """

    sources: list[Incoming]
    requests: list[DeletionRequest]
    denied: dict[int, str] = field(default_factory=dict)
    dead: list[OutRecord] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)


class DeletionConsumer:
    """Consumes deletion requests into ``fed`` (see the module docstring)."""

    def __init__(
        self,
        fed: Federation,
        config: ConsumerConfig,
        *,
        on_event: Sequence[EventHook] = (),
        recorder: RunRecorder | None = None,
    ) -> None:
        self.fed = fed
        self.config = config
        self.on_event = list(on_event)
        self.recorder = recorder
        self.waits = Waits()
        self.backoff = Backoff(stop=self.waits.stopped)
        self._stop = False
        self.state = ConsumerState()
        self.session: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._beat = 0.0
        self._recheck = False
        self._gap_seen = False
        self._store: CheckpointStore | None = None
        #: publishes each batch's outbox while the next batch is applied
        self._delivery: Delivery | None = None
        self._options = client_options()
        self._log = LogProbe(
            config.bootstrap, config.topics.requests, options=self._options,
            timeout=config.connect_timeout,
        )  # fmt: skip

    def stop(self) -> None:
        """Return from :meth:`run` soon (safe from a signal handler).

        A batch being applied is finished and checkpointed first; a wait (poll, back-off,
        connecting, publishing an outbox already checkpointed) is left at once
        (:mod:`server.kafka.waits`).
        """
        self._stop = True
        self.waits.stop()

    def run(self) -> dict[str, Any]:
        """Run the consumer loop.

        Consume until stopped or idle; returns a summary (totals over every session so far,
        and this session's own counts and times under ``session``).
        """
        cfg = self.config
        wall = time.perf_counter()
        store = CheckpointStore(
            cfg.state_dir,
            self.fed,
            fsync=cfg.fsync,
            snapshot_every=cfg.snapshot_every,
            min_rows=cfg.min_removal_batch,
            background=cfg.snapshot_every > 1,  # 1: a full checkpoint per batch
        )
        with store:
            resumed = self._restore(store)
            publisher = self._new_publisher()
            self._store, self._delivery = store, Delivery(publisher)
            consumer: KafkaConsumer | None = None
            ended = False
            try:
                with self.waits.abandonable():  # the broker may be away: wait for it, or stop
                    ensure_topics(
                        cfg.bootstrap,
                        cfg.topics,
                        request_partitions=cfg.request_partitions,
                        timeout=cfg.connect_timeout,
                    )
                    consumer = self._open()
                parts = sorted(consumer.assignment(), key=lambda tp: tp.partition)
                session = _Session(consumer, parts, store, Ledger(self.state.ledger))
                self._ready(session, resumed)
                self._emit(
                    {
                        "event": "consumer_start",
                        "resumed": resumed,
                        "startup_seconds": time.perf_counter() - wall,
                        "process_seconds": process_age(),
                        **self._totals(),
                    }
                )
                with frozen_set_up():  # no full collection walks the set-up (collector.py)
                    self._loop(session)
                self._deliver()
                self._close_journal(store)
                ended = True
            except ConsumerInterrupted:  # stopped while waiting: nothing unsaved is lost
                log.info("stopped while waiting; every batch applied is in the checkpoint")
                self._deliver()
                self._close_journal(store)
                ended = True
            finally:
                if not ended:  # an error: a publication in flight gives up (it is checkpointed)
                    self.waits.stopped.set()
                self._delivery.close()
                if consumer is not None:
                    consumer.close(autocommit=False)
                publisher.close()
                self._log.close()
        return self._end(wall, resumed, publisher.retries)

    def _restore(self, store: CheckpointStore) -> bool:
        """Load the checkpoint (if any) into the federation and this consumer; whether it did.

        A batch checkpointed just before a crash goes to the run folder.
        """
        state = store.load()
        if store.recovered is not None:
            self._emit({"event": "checkpoint_recovered", "message": store.recovered})
        resumed = state is not None
        self.state = state = state or ConsumerState()
        for name in COUNTERS:
            state.counters.setdefault(name, 0)
        state.sessions += 1
        if self.recorder is not None:
            recover_batch(self.recorder, state, self.config.topics.receipts)
        registry = registry_of(self.fed) if self.config.gate.ownership else None
        self.gate = Gate(self.config.gate, registry, state.rate)
        return resumed

    def _ready(self, session: _Session, resumed: bool) -> None:
        """Get ready to read: check the log, finish the checkpointed outbox, first snapshot."""
        state, store = self.state, session.store
        self._resume(session.consumer, session.parts, store)  # a gap stops before any send
        if state.outbox:  # the last batch's outbox may not have reached the broker
            assert self._delivery is not None
            with self.waits.abandonable():
                state.published_until = self._delivery.publisher.publish(
                    state.outbox, state.batch, start=state.published_until, verify=True
                )
        if not resumed:  # the journal's base snapshot is set-up, not the first batch's
            store.snapshot(state)
        if state.run.evaluate and state.run.monitor is None:
            # the evaluation baselines are set-up, not the first batch's latency (the same
            # values: nothing is deleted between here and the first batch)
            state.run.monitor = RunMonitor.start(self.fed)

    def _end(self, wall: float, resumed: bool, retries: int) -> dict[str, Any]:
        """The ``consumer_end`` summary, emitted and returned."""
        summary = {"event": "consumer_end", **self._totals()}
        summary["session"] = {
            **self.session,
            "resumed": resumed,
            "publish_retries": retries,
            "wall_seconds": time.perf_counter() - wall,
        }
        summary["publish_retries"] = retries
        summary["gaps"] = list(self.state.gaps)
        self._emit(summary)
        return summary

    def _new_publisher(self) -> Publisher:
        """The publisher of the outboxes (a seam: the tests hold or fail its publications).

        Its back-off is its own (it runs on the delivery's thread, beside the fetches'), and
        ends at the same stop.
        """
        cfg = self.config
        backoff = Backoff(stop=self.waits.stopped)
        return Publisher(cfg.bootstrap, flush_timeout=cfg.flush_timeout, backoff=backoff)

    def _close_journal(self, store: CheckpointStore) -> None:
        """A clean end: snapshot the journaled batches, so the next start replays none."""
        if store.journaled:
            count, t = store.journaled, time.perf_counter()
            store.snapshot(self.state)
            log.info("snapshot after %d journaled batches: %.2f s", count, time.perf_counter() - t)

    # ------------------------------------------------------------------ start
    def _open(self) -> KafkaConsumer:
        cfg = self.config
        consumer = KafkaConsumer(
            bootstrap_servers=cfg.bootstrap,
            group_id=cfg.group_id,
            enable_auto_commit=False,
            auto_offset_reset="none",
            allow_auto_create_topics=False,  # a wiped broker: the topic comes back as created
            max_partition_fetch_bytes=4 * cfg.max_request_bytes,
            fetch_max_bytes=16 * cfg.max_request_bytes,
            # a broker that holds an empty fetch for its whole wait (Tansu does: 0.3 s of a
            # paced request's 0.4 s median on the H200 at 500 ms) delays the batch no longer
            # than the batcher's own wait
            fetch_max_wait_ms=max(10, int(cfg.batch.max_wait * 1000)),
            request_timeout_ms=10000,
            bootstrap_timeout_ms=int(cfg.connect_timeout * 1000),
            **self._options,
        )
        ids = consumer.partitions_for_topic(cfg.topics.requests)
        if not ids:
            consumer.close()
            raise BrokerUnavailableError(f"no partitions for topic {cfg.topics.requests}")
        consumer.assign([TopicPartition(cfg.topics.requests, p) for p in sorted(ids)])
        return consumer

    def _resume(
        self, consumer: KafkaConsumer, parts: list[TopicPartition], store: CheckpointStore
    ) -> None:
        """Check the log against the checkpoint (handling any gap), then seek to it."""
        self._verify(store)
        self._seek(consumer, parts)

    def _seek(self, consumer: KafkaConsumer, parts: list[TopicPartition]) -> None:
        """Read on from the checkpointed offsets (a partition without one: its beginning).

        After a gap, first follow the requests topic's partitions as the broker has them now
        (:meth:`_follow_partitions`).
        """
        if self._gap_seen:
            self._follow_partitions(consumer, parts)
        state = self.state
        for tp in parts:
            if tp.partition in state.offsets:
                consumer.seek(tp, state.offsets[tp.partition])
            else:
                consumer.seek_to_beginning(tp)

    def _follow_partitions(self, consumer: KafkaConsumer, parts: list[TopicPartition]) -> None:
        """Assign every partition the requests topic has now (``parts`` is updated in place).

        A topic lost with the broker's log may come back with another partition count (Tansu
        re-creates a topic a fetch asks for with its default of 4); requests on a partition
        this consumer does not read would never be answered.
        """
        self._gap_seen = False
        topic = self.config.topics.requests
        consumer.topics()  # a fresh metadata answer, not the cache from before the loss
        ids = consumer.partitions_for_topic(topic)
        if not ids or ids == {tp.partition for tp in parts}:
            return
        log.warning("%s now has partitions %s; reading all of them", topic, sorted(ids))
        parts[:] = [TopicPartition(topic, p) for p in sorted(ids)]
        consumer.assign(parts)

    def _verify(
        self,
        store: CheckpointStore,
        partitions: set[int] | None = None,
        timeout: float | None = None,
    ) -> bool:
        """Probe the checkpointed partitions; handle gaps (may raise); whether any was found.

        ``partitions``: only those (default: all); ``timeout``: seconds the broker has to
        answer (default: ``connect_timeout``).
        """
        state = self.state
        probes = self._log.probe(
            {p: o for p, o in state.offsets.items() if partitions is None or p in partitions},
            timeout,
        )
        gaps = [
            gap
            for p, pr in probes.items()
            if (gap := find_gap(pr, state.offsets[p], state.last_records.get(p))) is not None
        ]
        if gaps:  # saved over the last batch's checkpoint: its receipts first
            self._deliver()
        for gap in gaps:
            self._on_gap(gap)
        if gaps:
            store.save(state)
            self._recreate_topics()
            self._gap_seen = True
        return bool(gaps)

    def _recreate_topics(self) -> None:
        """After a gap: create the topics the broker lost, with their partition counts.

        A broker that lost its log may have lost the output topics too; created here
        explicitly, they are not left to an auto-creation with the broker's default count.
        """
        cfg = self.config
        with self.waits.abandonable():
            ensure_topics(
                cfg.bootstrap,
                cfg.topics,
                request_partitions=cfg.request_partitions,
                timeout=cfg.connect_timeout,
            )

    def _on_gap(self, gap: Gap) -> None:
        cfg, state = self.config, self.state
        topic = cfg.topics.requests
        policy = cfg.on_offset_gap
        if policy == "fail":
            self._emit(
                {"event": "offset_gap", "topic": topic, "partition": gap.partition,
                 "kind": gap.kind, "action": "fail", "expected": gap.expected,
                 "earliest": gap.earliest, "latest": gap.latest, "skipped": 0}
            )  # fmt: skip
            if gap.kind == "removed":
                raise OffsetGapError(
                    f"{gap.describe(topic)}. Requests there may never have been answered. "
                    "Stopping instead of dropping it silently: restart with --on-offset-gap "
                    "replay (or skip) to go on with the partitions the topic has now."
                )
            raise OffsetGapError(
                f"{gap.describe(topic)}. Requests there may never have been answered. Stopping "
                "instead of skipping them silently: restart with --on-offset-gap replay to "
                f"re-read the log from offset {gap.earliest} (ids answered before get duplicate "
                f"receipts), or --on-offset-gap skip to go on from offset {gap.resume_at('skip')} "
                f"({gap.skipped('skip')} records never read)."
            )
        resume = gap.resume_at(policy)
        skipped = gap.skipped(policy)
        replayed = gap.latest - resume if policy == "replay" else 0
        record = {
            "event": "offset_gap",
            "topic": topic,
            "partition": gap.partition,
            "kind": gap.kind,
            "action": policy,
            "expected": gap.expected,
            "earliest": gap.earliest,
            "latest": gap.latest,
            "resume_at": resume,
            "skipped": skipped,
            "replayed": replayed,
            "at": time.time(),
        }
        state.last_records.pop(gap.partition, None)
        if gap.kind == "removed":  # nothing left to read there; the others are followed
            log.warning("%s; %s: reading the partitions it has now", gap.describe(topic), policy)
            state.offsets.pop(gap.partition, None)
        else:
            log.warning("%s; %s from offset %d", gap.describe(topic), policy, resume)
            state.offsets[gap.partition] = resume
        state.gaps.append(record)
        for counters in (state.counters, self.session):
            counters["offset_gaps"] += 1
            counters["skipped_records"] += skipped
            counters["replayed_records"] += replayed
        self._emit(record)

    # ------------------------------------------------------------------- loop
    def _loop(self, session: _Session) -> None:
        """Read, handle and back off until stopped or idle for ``idle_timeout``."""
        consumer, parts, store = session.consumer, session.parts, session.store
        idle, idle_since = self.config.idle_timeout, time.monotonic()
        while not self._stop:
            try:
                records = next_records(
                    consumer, parts, self.config.batch, waits=self.waits,
                    topic=self.config.topics.requests,
                )  # fmt: skip
                if self._recheck or self._out_of_range(consumer, parts):
                    self._recheck = False
                    if self._verify(store):  # what was just read may be off the new log
                        self._seek(consumer, parts)
                        continue
            except OffsetOutOfRangeError:
                if not self._verify(store):
                    self.backoff.sleep()  # the log looks fine: do not spin on the broker's word
                self._seek(consumer, parts)
                continue
            except (KafkaError, BrokerUnavailableError) as exc:
                log.warning("reading the requests failed (%s); backing off", exc)
                self._emit({"event": "consumer_waiting", "reason": f"broker: {exc}"}, False)
                self._recheck = True  # the broker may have come back with another log
                self.backoff.sleep()
                continue
            self._heartbeat(parts)
            if records:
                self._handle(records, session)
                idle_since = time.monotonic()
                continue
            if self._deliver():  # no batch to overlap with: the receipts now
                idle_since = time.monotonic()  # idle from when the last batch was done
            if idle is not None and time.monotonic() - idle_since >= idle:
                return

    def _out_of_range(self, consumer: KafkaConsumer, parts: list[TopicPartition]) -> bool:
        """Whether a fetch found a log that ends before where this consumer reads."""
        for tp in parts:
            high = consumer.highwater(tp)
            if high is not None and high < self.state.offsets.get(tp.partition, 0):
                return True
        return False

    def _handle(self, records: list[Incoming], session: _Session) -> None:
        """One micro-batch: decode, gate, apply, persist, commit, then publish and report.

        The publication (and the batch's event, once its receipts are out) is finished when
        the next batch has been applied, or when a fetch finds nothing (:meth:`_deliver`).
        """
        if not self._log_holds(records, session):  # the log check, on every fetch
            return
        t0 = time.perf_counter()
        batch = self._decode(records)
        result = apply_batch(
            self.fed,
            self.state.run,
            batch.requests,
            ledger=session.ledger,
            denied=batch.denied,
            min_rows=self.config.min_removal_batch,
        )
        t_apply = time.perf_counter()
        self._deliver(ahead=True)  # the last batch's receipts, published meanwhile
        t_waited = time.perf_counter()
        reasons = self._advance(records, batch, result)
        given = BatchInput(tuple(r.to_json().decode() for r in batch.requests), batch.denied)
        checkpoint = session.store.save(self.state, given)
        t_saved = time.perf_counter()
        committed = self._commit(session.consumer, session.parts)
        event = result.event
        event.update(
            kafka_fields(self.state, records=len(records), dead=batch.kinds, unauthorised=reasons),
            committed=committed,
            lag_requests=lag(session.consumer, session.parts),
        )
        event.setdefault("timings", {}).update(
            apply=t_apply - t0,
            publish_wait=t_waited - t_apply,
            checkpoint=checkpoint,
            **{f"checkpoint_{part}": s for part, s in session.store.last_parts.items()},
            commit=time.perf_counter() - t_saved,
        )
        if result.report is not None:
            event["timings"]["removal"] = result.report.timings.get("total", 0.0)
        assert self._delivery is not None
        self._delivery.start(
            self.state.outbox,
            self.state.batch,
            start=self.state.published_until,
            outcome=result,
            sent_ms=[
                src.timestamp_ms
                for r, src in zip(result.receipts, batch.sources, strict=True)
                if r is not None
            ],
            started=t0,
        )

    def _decode(self, records: list[Incoming]) -> _Batch:
        """The batch's requests (held ones first), dead letters and the gate's refusals."""
        cfg = self.config
        batch = _Batch(
            sources=[src for src, _ in self.state.pending],
            requests=[req for _, req in self.state.pending],
        )
        for rec in records:
            decoded = decode_request(rec.value, max_bytes=cfg.max_request_bytes)
            if isinstance(decoded, Malformed):
                batch.kinds[decoded.kind] = batch.kinds.get(decoded.kind, 0) + 1
                letter = dead_letter(
                    rec, decoded, source_topic=cfg.topics.requests, topic=cfg.topics.dead_letters
                )
                batch.dead.append(letter)
                continue
            why = self._refuse(decoded, rec)
            if why is not None:
                batch.denied[len(batch.requests)] = why
            batch.requests.append(decoded)
            batch.sources.append(rec)
        return batch

    def _advance(
        self, records: list[Incoming], batch: _Batch, result: BatchOutcome
    ) -> dict[str, int]:
        """Bring the consumer's state past the batch; the gate's refusals by reason.

        Held requests, outbox, offsets and last records, counters and the batch's event.
        """
        cfg, state = self.config, self.state
        state.pending = [(batch.sources[i], batch.requests[i]) for i in result.held]
        state.outbox = [
            receipt_record(r, src, topic=cfg.topics.receipts)
            for r, src in zip(result.receipts, batch.sources, strict=True)
            if r is not None
        ] + batch.dead
        state.batch += 1
        for rec in records:
            if rec.offset + 1 > state.offsets.get(rec.partition, 0):
                state.offsets[rec.partition] = rec.offset + 1
                state.last_records[rec.partition] = fingerprint(
                    rec.offset, rec.timestamp_ms, rec.key, rec.value
                )
        self.gate.prune()
        for counters in (state.counters, self.session):
            count_batch(counters, len(records), result, len(batch.dead))
        reasons: dict[str, int] = {}
        for i in result.unauthorised:
            reason = batch.denied[i].split(":", 1)[0]
            reasons[reason] = reasons.get(reason, 0) + 1
        state.batch_event = batch_record(result, state, len(records), batch.kinds, reasons)
        return reasons

    def _deliver(self, *, ahead: bool = False) -> bool:
        """Wait for the last batch's receipts to be on the broker; emit that batch's event.

        Called before anything else is persisted (:mod:`server.kafka.delivery`). ``ahead``:
        the federation has applied a batch after the one being published. A stop that ended
        the publication then undoes that batch (the last checkpoint is restored into the
        federation) and ends the session: the batch was not saved, its records are read again
        at the next start. Whether a batch was delivered.
        """
        done = None if self._delivery is None else self._delivery.finish()
        if done is None:
            return False
        flight, published = done
        if published.ends is not None:
            self.state.published_until = published.ends
        event = flight.outcome.event
        event["latency_seconds"] = [
            max(0.0, (published.done_ms - sent) / 1000.0) for sent in flight.sent_ms
        ]
        total = published.finished - flight.started
        event["timings"].update(publish=published.seconds, total=total)
        self._emit_batch(flight.outcome)
        if published.ends is None and ahead:
            log.info("stopped while publishing; undoing the batch applied after it")
            assert self._store is not None
            self.state = self._store.reload()
            raise ConsumerInterrupted("stopped while publishing a batch's receipts")
        return True

    def _log_holds(self, records: list[Incoming], session: _Session) -> bool:
        """Whether the log under ``records`` is still the one the checkpoint consumed.

        The record before each partition's first one must be the one last consumed there
        (:func:`~server.kafka.offsets.find_gap`): a log lost and refilled while this consumer
        runs is a gap, handled by ``--on-offset-gap`` as at start (an ``offset_gap`` event;
        ``fail`` raises). Then, or when the broker does not answer, the records are dropped
        and read again from the checkpointed (or the policy's) offsets.
        """
        try:
            parts = {r.partition for r in records}
            if not self._verify(session.store, parts, FETCH_CHECK_SECONDS):
                return True
        except BrokerUnavailableError as exc:
            log.warning("checking the requests log failed (%s); backing off", exc)
            self._emit({"event": "consumer_waiting", "reason": f"broker: {exc}"}, False)
            self.backoff.sleep()
        self._seek(session.consumer, session.parts)
        return False

    def _watch_broker(self, parts: list[TopicPartition]) -> None:
        """Between batches: whether the broker answers (for readiness).

        ``consumer_waiting`` when it does not (a consumer whose broker is away is not ready),
        else ``consumer_ready``.
        """
        try:
            self._log.reachable([tp.partition for tp in parts], BROKER_CHECK_SECONDS)
        except BrokerUnavailableError as exc:
            self._emit({"event": "consumer_waiting", "reason": f"broker: {exc}"}, False)
            return
        self._emit({"event": "consumer_ready"}, False)

    def _refuse(self, request: DeletionRequest, record: Incoming) -> str | None:
        """The gate's verdict; an exception while deciding refuses the request (``other``)."""
        try:
            return self.gate.refuse(request, record)
        except Exception as exc:  # a record must never stop the consumer
            log.exception("authorising request %r failed", request.request_id)
            return f"other: {type(exc).__name__} while authorising"

    def _commit(self, consumer: KafkaConsumer, parts: list[TopicPartition]) -> bool:
        offsets = {
            tp: OffsetAndMetadata(self.state.offsets[tp.partition], "", -1)
            for tp in parts
            if tp.partition in self.state.offsets
        }
        try:
            consumer.commit(offsets, timeout_ms=5000)
            return True
        except (KafkaError, OSError) as exc:  # informational: the checkpoint holds the truth
            log.warning("committing offsets failed (%s); the next batch commits them", exc)
            return False

    # ------------------------------------------------------------- reporting
    def _totals(self) -> dict[str, Any]:
        return totals(self.fed, self.state)

    def _heartbeat(self, parts: list[TopicPartition]) -> None:
        now = time.monotonic()
        if now - self._beat >= HEARTBEAT_SECONDS:
            self._beat = now
            self._emit({"event": "heartbeat"}, False)
            self._watch_broker(parts)

    def _emit_batch(self, outcome: BatchOutcome) -> None:
        """A batch's event and receipts: to the run's recorder, else as any other event."""
        if self.recorder is not None:
            self.recorder.batch(outcome, self.fed)
            for hook in self.on_event:
                hook(outcome.event, self.fed)
        else:
            self._emit(outcome.event)

    def _emit(self, event: dict[str, Any], persist: bool = True) -> None:
        """Dispatch an event to the hooks.

        Send ``event`` to the hooks; ``persist``: also log it (the run's recorder, or the
        events file).
        """
        if self.recorder is not None:
            self.recorder.emit(event, self.fed, persist=persist)
        elif persist and self.config.events_path is not None:
            self.config.events_path.parent.mkdir(parents=True, exist_ok=True)
            with self.config.events_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(event, sort_keys=True, default=str) + "\n")
        for hook in self.on_event:
            hook(event, self.fed)
