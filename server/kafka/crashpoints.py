"""Test hook: the consumer SIGKILLs itself at a named point of its batch cycle.

``UNLEARNSIM_TEST_KILL_AT=POINT:BATCH`` (unset in normal use) kills the process the first time
it reaches ``POINT`` for a batch numbered ``BATCH`` or later, as a crash there would: no
``finally`` block, no flush. ``tests/test_kafka_kill.py`` restarts it and checks that nothing
is lost, nothing is answered twice and the head is the one a run without crashes reaches.

Points, in the order of one batch's cycle (:class:`server.kafka.checkpoint.CheckpointStore`):

* ``before-journal``: the batch is applied in memory, nothing of it is on disk;
* ``after-save``: its journal record (or snapshot) is on disk, its receipts not yet published;
* ``snapshot-before-rename``: a background snapshot's file is written, not yet renamed over
  the previous one (the writer thread; ``BATCH`` is the snapshot's batch);
* ``snapshot-after-rename``: the new snapshot is in place, the journal not yet trimmed;
* ``trim-before-rename``: the trimmed journal is written, not yet renamed over the old one;
* ``after-trim``: the journal holds only the records after the new snapshot.
"""

from __future__ import annotations

import os
import signal

ENV = "UNLEARNSIM_TEST_KILL_AT"
POINTS = (
    "before-journal",
    "after-save",
    "snapshot-before-rename",
    "snapshot-after-rename",
    "trim-before-rename",
    "after-trim",
)


def reached(point: str, batch: int) -> None:
    """SIGKILL this process if the hook asks for ``point`` at ``batch`` or later."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    name, _, at = spec.partition(":")
    if name == point and batch >= int(at):
        os.kill(os.getpid(), signal.SIGKILL)
