"""The Flower internals behind the warm SuperNodes (``server/flower/flwr_internals.py``).

If Flower changes any of them, the first test fails and names what changed: update
``flwr_internals.py`` (and the pin in ``pyproject.toml``) before anything else.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from server.flower import flwr_internals as fi
from server.flower.deployment import stage_app
from server.flower.settings import APP_DIR

ROOT = Path(__file__).parent.parent


def test_the_pinned_flower_internals_still_match() -> None:
    problems = fi.pin_problems()
    assert problems == [], "Flower's internals changed:\n" + "\n".join(problems)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["optional-dependencies"]["flower"]
    assert any(d.startswith("flwr") and "==1.42.*" in d for d in deps), deps


def test_the_supernode_clock_backs_off_when_idle_and_restarts_on_a_message() -> None:
    clock = fi.SuperNodeClock(fi.Polling(fast=0.001, idle=0.004, growth=2.0))
    waits = []
    for _ in range(4):
        waits.append(clock._next)
        clock.sleep(fi.IDLE_SLEEP)  # what the SuperNode calls when nothing came
    assert waits == [0.001, 0.002, 0.004, 0.004]
    clock.activity()
    assert clock._next == 0.001
    started = time.monotonic()
    clock.sleep(fi.REPLY_SLEEP)  # the reply wait: an in-memory check, not 0.5 s
    assert time.monotonic() - started < 0.25
    assert clock.monotonic() > 0  # everything else is the time module's


def test_polling_is_opt_in() -> None:
    assert fi.polling_from_env({}) is None
    assert fi.polling_from_env({fi.POLL_ENV: " "}) is None
    assert fi.polling_from_env({fi.POLL_ENV: "0.05"}) == fi.Polling(fast=0.05, idle=1.0)
    with pytest.raises(ValueError, match="must be seconds"):
        fi.polling_from_env({fi.POLL_ENV: "fast"})
    with pytest.raises(ValueError, match="0 < fast <= idle"):
        fi.Polling(fast=2.0, idle=1.0)


def build_fab(app: Path, out: Path) -> bytes:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FLWR_HOME": str(out / "home")}
    flwr = Path(sys.executable).parent / "flwr"
    done = subprocess.run(
        [str(flwr), "build", "--app", str(app)], cwd=out, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (fab,) = out.glob("*.fab")
    return fab.read_bytes()


WORKER_CHECK = """
import hashlib, sys
from pathlib import Path
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from server.flower.clientapp_worker import WarmApp
from server.flower.flwr_internals import FabInfo

own, changed = (Path(p).read_bytes() for p in sys.argv[1:3])
info = lambda b: FabInfo("unlearnsim/unlearnsim", "0.1.0", hashlib.sha256(b).hexdigest(), b)
warm = WarmApp.load()
assert warm.mismatch(info(own)) is None, warm.mismatch(info(own))
print("why:", warm.mismatch(info(changed)))
assert warm.choose(info(own)) is warm.app
app = warm.choose(info(changed))
assert app is not warm.app
print("module:", sys.modules["clients.client_app"].__file__)
TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1
ctx = Context(run_id=7, node_id=5, node_config={"partition-id": 2}, state=RecordDict(),
              run_config={})
msg = Message(RecordDict(), dst_node_id=5, message_type="query.hello")
msg.metadata.__dict__["_message_id"] = "m"
reply = app(msg, ctx)
print("partition:", reply.content.config_records["config"]["partition-id"])
"""


def test_the_worker_serves_its_own_fab_warm_and_any_other_the_stock_way(tmp_path: Path) -> None:
    """The preloaded app answers for a FAB of the same files; a FAB whose code differs is
    installed and imported from the FAB (as ``flwr-clientapp`` would), and it answers."""
    own = build_fab(stage_app(tmp_path / "app"), tmp_path / "own")
    changed_app = stage_app(tmp_path / "changed")
    records = changed_app / "clients" / "protocol.py"
    records.write_text(records.read_text() + "\n# a change the environment does not have\n")
    changed = build_fab(changed_app, tmp_path / "changed-fab")
    (tmp_path / "own.fab").write_bytes(own)
    (tmp_path / "changed.fab").write_bytes(changed)
    assert hashlib.sha256(own).hexdigest() != hashlib.sha256(changed).hexdigest()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            WORKER_CHECK,
            str(tmp_path / "own.fab"),
            str(tmp_path / "changed.fab"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home")},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "why: clients/protocol.py differs from" in done.stdout
    module = done.stdout.split("module:")[1].split()[0]
    assert module.startswith(str(tmp_path / "flwr-home")) and APP_DIR.as_posix() not in module
    assert "partition: 2" in done.stdout
