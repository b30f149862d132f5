"""Environment of every Flower process we start (infra.md, "Flower").

* ``FLWR_HOME`` inside the run folder: Flower's config, installed app bundles and logs stay
  with the run and never touch ``~/.flwr``;
* no telemetry, no update check, no runtime dependency installation (otherwise the SuperLink
  runs ``uv sync`` and downloads gigabytes: every machine must already have the environment);
* Ray binds to loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``);
* the SuperExec polls for tasks every 0.5 s instead of 1 s (it launches the ServerApp, and
  on stock SuperNodes each ClientApp process; warm SuperNodes have none): an idle SuperLink
  costs 1.3% of a core with it, 4.8% at 0.1 s (docs/flower.md, "Polling");
* this Python environment's scripts first on ``PATH`` (the SuperLink and SuperNodes start
  ``flower-superexec``, ``flwr-serverapp`` and ``flwr-clientapp`` by name).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

#: Flower's default port of a SuperNode's Runtime API (on 127.0.0.1).
SUPERNODE_PORT = 9094
#: Opt-in to shorter SuperNode waits (seconds; see ``server/flower/flwr_internals.py``).
POLL_ENV = "UNLEARNSIM_FLOWER_POLL"

FLOWER_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.5",
}


def flower_env(home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) plus the Flower settings above."""
    env = dict(os.environ if base is None else base)
    env.update(FLOWER_ENV)
    env["FLWR_HOME"] = str(home)
    scripts = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([scripts, env.get("PATH", "")])
    home.mkdir(parents=True, exist_ok=True)
    return env


def apply_flower_env(home: Path) -> None:
    """Set the Flower settings in this process (the simulation runs here)."""
    os.environ.update(flower_env(home))
