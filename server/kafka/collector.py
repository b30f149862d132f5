"""The consumer's long-lived objects kept out of the garbage collector's scans.

A consumer's set-up leaves hundreds of thousands of Python objects that live as long as the
process: the federation (the scenario's generated requests, the clients, the model's modules
and their functions), the checkpoint's state, the Kafka client. CPython's full (generation 2)
collection walks every one of them each time it runs, which it does every few thousand
surviving allocations: in the benchmark stream's consumer (Fashion-MNIST, 60,000 rows, 9,927
requests) five full collections of 174-288 ms each stalled a batch during the paced run, as
long as an exact pass, and a full collection of the loaded federation alone took 135 ms
(``docs/benchmarks.md``, issue 25). Freezing them (``gc.freeze``) moves them to a permanent
generation that collections skip; the objects a batch creates are still collected as before,
and reference counting still frees anything, frozen or not, once it is no longer referenced
(only a reference cycle among frozen objects would wait for :func:`frozen_set_up` to end).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_set_up() -> Iterator[None]:
    """Collect once, then freeze every object tracked so far until the block ends.

    The freeze is undone afterwards unless something froze objects before the block (whose
    freeze is then left as it was), so a process that runs several sessions starts each one
    alike.
    """
    already = gc.get_freeze_count()
    gc.collect()  # today's garbage is not frozen with the rest
    gc.freeze()
    try:
        yield
    finally:
        if not already:
            gc.unfreeze()
