"""The deletion-stream consumer: poll, micro-batch, apply, persist, commit, publish.

For every micro-batch (``batcher``):

1. decode each record; malformed ones become dead letters (``records``);
2. answer the requests: duplicates from the ledger, the rest validated and removed by one
   certified update (``apply``);
3. persist the head, the ledger, the next offsets and the outbox (the batch's receipts and
   dead letters) atomically (``checkpoint``);
4. commit the offsets to the consumer group (for lag monitoring; the checkpoint is the source
   of truth on restart);
5. publish the outbox (``publisher``), retrying with back-off while the broker is away.

A restart loads the checkpoint, finishes publishing its outbox (sending only what did not
arrive) and seeks to the checkpointed offsets, so no request is lost and none is applied twice.
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

from server.kafka.apply import BatchResult, apply_requests
from server.kafka.backoff import Backoff
from server.kafka.batcher import BatchPolicy, lag, next_batch
from server.kafka.checkpoint import CheckpointStore, StreamState
from server.kafka.errors import BrokerUnavailableError, CheckpointError
from server.kafka.events import COUNTERS, batch_event, count_batch, totals
from server.kafka.ledger import Ledger
from server.kafka.publisher import Publisher
from server.kafka.records import (
    MAX_REQUEST_BYTES,
    Incoming,
    Malformed,
    OutRecord,
    dead_letter,
    decode_request,
    receipt_record,
)
from server.kafka.topics import Topics, ensure_topics
from simulator.runner.setup import Federation
from simulator.stream import DeletionRequest

log = logging.getLogger(__name__)

EventHook = Callable[[dict[str, Any], Federation], None]


@dataclass(frozen=True)
class ConsumerConfig:
    """Where to read and write, and how to batch.

    ``idle_timeout``: stop after this many seconds without a record (None: run until
    :meth:`DeletionConsumer.stop`). ``flush_timeout``: seconds a publish may take before it is
    retried (after checking what arrived). ``events_path``: append one JSON line per batch.
    """

    bootstrap: str
    state_dir: Path
    topics: Topics = field(default_factory=Topics)
    group_id: str = "unlearnsim"
    batch: BatchPolicy = field(default_factory=BatchPolicy)
    max_request_bytes: int = MAX_REQUEST_BYTES
    idle_timeout: float | None = None
    fsync: bool = True
    request_partitions: int = 1
    connect_timeout: float = 60.0
    flush_timeout: float = 10.0
    events_path: Path | None = None


class DeletionConsumer:
    """Consumes deletion requests into ``fed`` (see the module docstring)."""

    def __init__(
        self, fed: Federation, config: ConsumerConfig, *, on_event: Sequence[EventHook] = ()
    ) -> None:
        self.fed = fed
        self.config = config
        self.on_event = list(on_event)
        self.backoff = Backoff()
        self._stop = False
        self.state = StreamState()

    def stop(self) -> None:
        """Finish the current batch, then return from :meth:`run` (safe from a signal handler)."""
        self._stop = True

    def run(self) -> dict[str, Any]:
        """Consume until stopped or idle; returns a summary (counters, model version, ...)."""
        cfg = self.config
        wall = time.perf_counter()
        with CheckpointStore(cfg.state_dir, self.fed, fsync=cfg.fsync) as store:
            state = store.load()
            resumed = state is not None
            self.state = state = state or StreamState()
            for name in COUNTERS:
                state.counters.setdefault(name, 0)
            ledger = Ledger(state.ledger)
            ensure_topics(
                cfg.bootstrap,
                cfg.topics,
                request_partitions=cfg.request_partitions,
                timeout=cfg.connect_timeout,
            )
            publisher = Publisher(
                cfg.bootstrap, flush_timeout=cfg.flush_timeout, backoff=self.backoff
            )
            consumer = self._open(state)
            try:
                if state.outbox:  # the last batch's outbox may not have reached the broker
                    state.published_until = publisher.publish(
                        state.outbox, state.batch, start=state.published_until, verify=True
                    )
                self._emit({"event": "consumer_start", "resumed": resumed, **self._totals()})
                parts = sorted(consumer.assignment(), key=lambda tp: tp.partition)
                self._loop(consumer, parts, store, ledger, publisher)
            finally:
                consumer.close(autocommit=False)
                publisher.close()
        summary = {"event": "consumer_end", **self._totals()}
        summary["publish_retries"] = publisher.retries
        summary["wall_seconds"] = time.perf_counter() - wall
        self._emit(summary)
        return summary

    # ------------------------------------------------------------------ loop
    def _open(self, state: StreamState) -> KafkaConsumer:
        cfg = self.config
        consumer = KafkaConsumer(
            bootstrap_servers=cfg.bootstrap,
            group_id=cfg.group_id,
            enable_auto_commit=False,
            auto_offset_reset="none",
            max_partition_fetch_bytes=4 * cfg.max_request_bytes,
            fetch_max_bytes=16 * cfg.max_request_bytes,
            request_timeout_ms=10000,
            bootstrap_timeout_ms=int(cfg.connect_timeout * 1000),
        )
        ids = consumer.partitions_for_topic(cfg.topics.requests)
        if not ids:
            consumer.close()
            raise BrokerUnavailableError(f"no partitions for topic {cfg.topics.requests}")
        parts = [TopicPartition(cfg.topics.requests, p) for p in sorted(ids)]
        consumer.assign(parts)
        for tp in parts:
            if tp.partition in state.offsets:
                consumer.seek(tp, state.offsets[tp.partition])
            else:
                consumer.seek_to_beginning(tp)
        return consumer

    def _loop(
        self,
        consumer: KafkaConsumer,
        parts: list[TopicPartition],
        store: CheckpointStore,
        ledger: Ledger,
        publisher: Publisher,
    ) -> None:
        idle, idle_since = self.config.idle_timeout, time.monotonic()
        while not self._stop:
            try:
                records = next_batch(consumer, parts, self.config.batch)
            except OffsetOutOfRangeError as exc:  # records this consumer never applied are gone
                raise CheckpointError(
                    f"{self.config.topics.requests} no longer holds the checkpointed offsets "
                    f"{self.state.offsets} (topic recreated or records expired): {exc}"
                ) from exc
            except KafkaError as exc:
                log.warning("polling failed (%s); backing off", exc)
                self.backoff.sleep()
                continue
            if records:
                self._handle(records, consumer, parts, store, ledger, publisher)
                idle_since = time.monotonic()
            elif idle is not None and time.monotonic() - idle_since >= idle:
                return

    def _handle(
        self,
        records: list[Incoming],
        consumer: KafkaConsumer,
        parts: list[TopicPartition],
        store: CheckpointStore,
        ledger: Ledger,
        publisher: Publisher,
    ) -> None:
        cfg, state = self.config, self.state
        t0 = time.perf_counter()
        requests: list[DeletionRequest] = []
        sources: list[Incoming] = []
        dead: list[OutRecord] = []
        kinds: dict[str, int] = {}
        for rec in records:
            decoded = decode_request(rec.value, max_bytes=cfg.max_request_bytes)
            if isinstance(decoded, Malformed):
                kinds[decoded.kind] = kinds.get(decoded.kind, 0) + 1
                dead.append(
                    dead_letter(
                        rec,
                        decoded,
                        source_topic=cfg.topics.requests,
                        topic=cfg.topics.dead_letters,
                    )
                )
            else:
                requests.append(decoded)
                sources.append(rec)
        result = apply_requests(self.fed, ledger, requests)
        t_apply = time.perf_counter()
        state.outbox = [
            receipt_record(r, src, topic=cfg.topics.receipts)
            for r, src in zip(result.receipts, sources, strict=True)
        ] + dead
        state.batch += 1
        for rec in records:
            state.offsets[rec.partition] = max(state.offsets.get(rec.partition, 0), rec.offset + 1)
        self._count(records, result, len(dead))
        state.forgotten.extend(result.removed)
        state.last_tick = max([state.last_tick, *(r.tick for r in requests)])
        checkpoint = store.save(state)
        t_saved = time.perf_counter()
        committed = self._commit(consumer, parts)
        t_committed = time.perf_counter()
        state.published_until = publisher.publish(
            state.outbox, state.batch, start=state.published_until, verify=False
        )
        t_end = time.perf_counter()
        done_ms = time.time() * 1000.0
        event = self._event(result, len(records), kinds, committed, lag(consumer, parts))
        event["latency_seconds"] = [max(0.0, (done_ms - s.timestamp_ms) / 1000.0) for s in sources]
        event["timings"] = {
            **({"removal": result.report.timings.get("total", 0.0)} if result.report else {}),
            "apply": t_apply - t0,
            "checkpoint": checkpoint,
            "commit": t_committed - t_saved,
            "publish": t_end - t_committed,
            "total": t_end - t0,
        }
        self._emit(event)

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
    def _count(self, records: list[Incoming], result: BatchResult, dead: int) -> None:
        count_batch(self.state.counters, len(records), result, dead)

    def _totals(self) -> dict[str, Any]:
        return totals(self.fed, self.state)

    def _event(
        self, result: BatchResult, records: int, dead: dict[str, int], committed: bool, lagging: int
    ) -> dict[str, Any]:
        event = batch_event(self.fed, self.state, result, records=records, dead=dead)
        event.update(committed=committed, lag_requests=lagging)
        return event

    def _emit(self, event: dict[str, Any]) -> None:
        if self.config.events_path is not None:
            self.config.events_path.parent.mkdir(parents=True, exist_ok=True)
            with self.config.events_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(event, sort_keys=True, default=str) + "\n")
        for hook in self.on_event:
            hook(event, self.fed)
