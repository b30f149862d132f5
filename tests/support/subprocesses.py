"""Start an ``unlearnsim`` process and wait until it has applied some deletion batches."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from support.scenarios import ROOT


def started_until_batches(
    command: list[str], events: Path, batches: int, *, timeout: float = 240.0
) -> subprocess.Popen[str]:
    """Run ``command`` from the repository root until ``events`` records ``batches`` batches.

    Fails the test if the process exits first or the batches do not come within ``timeout``.
    """
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + timeout
    while not (events.exists() and events.read_text().count('"deletion_batch"') >= batches):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"fewer than {batches} deletion batches in time"
        time.sleep(0.05)
    return proc
