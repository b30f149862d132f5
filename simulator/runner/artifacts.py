"""End-of-run artifacts that compare transports: the head and the clients' own reports.

``head.npz`` holds the final head ``W``, its perturbation ``b`` and ``model_version``;
``clients.json`` holds every live client's :class:`~simulator.federation.ClientReport`
(rows, retained rows, deletion messages it received, accuracy of the head on its rows), asked
of the clients themselves, plus the clients that failed during the run (``excluded``) or did
not answer this last question (``unavailable``). Every run writes them at its end
(:class:`~simulator.runner.recorder.RunRecorder`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simulator.errors import ClientUnavailableError
from simulator.runner.federation import Federation

HEAD_FILE = "head.npz"
CLIENTS_FILE = "clients.json"


def write_artifacts(folder: Path, fed: Federation) -> None:
    """Write ``head.npz`` and ``clients.json`` for ``fed`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    head = fed.head
    np.savez(folder / HEAD_FILE, W=head.W, b=head.b, model_version=np.int64(head.model_version))
    unavailable: dict[str, str] = {}
    try:
        reports = fed.client_reports()
    except ClientUnavailableError as err:  # reported, not fatal: the run itself is complete
        reports = {}
        unavailable = {str(c): r for c, r in sorted(err.clients.items())}
    payload = {
        "transport": fed.transport.name if fed.transport is not None else "inprocess",
        "clients": {str(c): r.to_dict() for c, r in sorted(reports.items())},
        "excluded": {str(c): r for c, r in sorted(fed.excluded.items())},
        "unavailable": unavailable,
    }
    (folder / CLIENTS_FILE).write_text(json.dumps(payload, indent=2, allow_nan=True) + "\n")
