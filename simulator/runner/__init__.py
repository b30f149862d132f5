"""The in-process runner: a scenario becomes a trained federation and a played deletion stream.

``RunResult`` is light; the rest (torch, the models) is imported on first use, so a launcher
that only waits for a run elsewhere (``--transport flower-deploy``) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from simulator.runner.result import RunResult

if TYPE_CHECKING:
    from simulator.runner.federation import Federation, build_federation
    from simulator.runner.run import ReportingConfig, run_scenario

__all__ = ["Federation", "ReportingConfig", "RunResult", "build_federation", "run_scenario"]

_LAZY = {
    "run_scenario": "simulator.runner.run",
    "ReportingConfig": "simulator.runner.run",
    "Federation": "simulator.runner.federation",
    "build_federation": "simulator.runner.federation",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
