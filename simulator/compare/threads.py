"""Torch's intra-op thread count for the duration of a comparison.

The networks here are small; on the shared 2-core machines torch's default of two intra-op
threads made a tiny MLP's Hessian-vector product about 20x slower than one thread (measured:
89 ms vs 4.3 ms under load), and it would skew the removal-time comparison towards whichever
method ran while the other core was free. The comparison therefore runs torch single-threaded
by default and restores the previous setting afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the body with ``torch.set_num_threads(count)`` (None: leave it as it is)."""
    if count is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, count))
    try:
        yield
    finally:
        torch.set_num_threads(previous)
