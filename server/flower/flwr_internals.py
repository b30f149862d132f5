"""Everything unlearnsim uses of Flower's internals, pinned to the flwr 1.42 series.

Flower's public API covers the apps (``ClientApp``, ``Message``, ``Context``). A long-lived
ClientApp worker next to a SuperNode, and shorter waits than the SuperNode's hard-coded
sleeps, need internals; they are imported and used here and nowhere else
(``tests/test_flower_internals.py`` fails loudly when any of them changes, and
:func:`pin_problems` makes the warm SuperNode refuse to start on a Flower it was not written
for, naming the stock ``flower-supernode`` as the way out). Paths below are relative to the
installed ``flwr/``. The one exception is the simulation engine's message queue, replaced for
``flower-sim`` runs in :mod:`server.flower.sim_engine` (with its own pin check).

Warm worker (``server/flower/clientapp_worker.py``), what ``flwr-clientapp`` does for one task
(``supernode/runtime/run_clientapp.py``), minus the process start, the FAB install and the
app import:

* the Runtime API client (``supercore/runtime``, ``supercore/interceptors``,
  ``supercore/retry``) and ``AcquireTaskRequest`` (``proto/runtime_pb2``), as the SuperExec
  uses them to claim a task (``supercore/superexec/run_superexec.py``);
* ``pull_task_input``, ``push_message``, ``push_task_output`` of ``run_clientapp.py`` and the
  task heartbeat (``supercore/heartbeat.py``);
* ``install_from_fab`` (``cli/install.py``) and ``get_load_client_app_fn``
  (``clientapp/utils.py``): the stock way to load a FAB's ClientApp, for a FAB that is not the
  code this worker preloaded.

SuperNode (``supernode/start_client_internal.py``), run in-process by
``server/flower/warm_nodes.py``:

* ``_pull_and_store_message`` is wrapped so that every stored message wakes the worker at once
  (no polling between the SuperNode and its worker);
* opt-in (:class:`Polling`): the module's ``time`` is replaced by a clock whose ``sleep(3)``
  (nothing to receive) backs off from ``Polling.fast`` to ``Polling.idle`` and restarts after
  every message, and whose ``sleep(0.5)`` (waiting for the ClientApp's reply, an in-memory
  check) waits :data:`REPLY_CHECK`; and ``PULL_INITIAL_BACKOFF`` (``supercore/constant.py``,
  1 s, bound as the default ``initial_backoff`` of ``pull_objects`` and
  ``pull_and_inflate_object_from_tree`` in ``supercore/inflatable/inflatable_utils.py``)
  becomes ``Polling.fast`` in the processes that call :func:`apply_pull_backoff` (SuperNode,
  worker, ServerApp).
"""

from __future__ import annotations

import importlib
import inspect
import io
import logging
import os
import sys
import time
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import flwr
from flwr.app import Context, Error, Message
from flwr.cli.install import install_from_fab
from flwr.clientapp import ClientApp
from flwr.clientapp.client_app import LoadClientAppError
from flwr.clientapp.utils import get_load_client_app_fn
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest, AcquireTaskResponse
from flwr.supercore import log
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.inflatable import inflatable_utils
from flwr.supercore.interceptors import (
    RuntimeTokenHttpInterceptor,
    RuntimeVersionHttpInterceptor,
)
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode import start_client_internal as supernode_loop
from flwr.supernode.cli.flower_supernode import flower_supernode
from flwr.supernode.runtime import run_clientapp

from server.flower.environment import POLL_ENV

__all__ = ["AcquiredTask", "ClientApp", "FabInfo", "Polling"]

#: The Flower series this module was written against (pyproject pins ``flwr==1.42.*``).
FLWR_SERIES = "1.42."
#: The SuperNode's hard-coded sleeps (``supernode/start_client_internal.py``).
IDLE_SLEEP, REPLY_SLEEP = 3, 0.5
#: What a patched ``sleep(0.5)`` waits: the reply check is a lookup in the SuperNode's memory.
REPLY_CHECK = 0.005


# ---------------------------------------------------------------------------- polling
@dataclass(frozen=True)
class Polling:
    """Waits of the patched SuperNode (opt-in; Flower's own: 3 s idle, 0.5 s, 1 s backoff).

    Attributes
    ----------
    fast : first idle poll after a message, and the first pull backoff (seconds).
    idle : the idle poll grows by ``growth`` per empty poll up to this.
    """

    fast: float
    idle: float = 1.0
    growth: float = 1.5

    def __post_init__(self) -> None:
        if not 0 < self.fast <= self.idle:
            raise ValueError(f"need 0 < fast <= idle, got fast={self.fast} idle={self.idle}")


def polling_from_env(env: dict[str, str] | None = None) -> Polling | None:
    """:class:`Polling` from ``UNLEARNSIM_FLOWER_POLL`` (unset or empty: Flower's waits)."""
    raw = (os.environ if env is None else env).get(POLL_ENV, "").strip()
    if not raw:
        return None
    try:
        fast = float(raw)
    except ValueError:
        raise ValueError(f"{POLL_ENV} must be seconds, got {raw!r}") from None
    return Polling(fast=fast, idle=max(1.0, fast))


class SuperNodeClock:
    """Stands in for the ``time`` module inside ``start_client_internal`` (see module doc)."""

    def __init__(self, polling: Polling) -> None:
        self._polling = polling
        self._next = polling.fast

    def sleep(self, seconds: float) -> None:
        if seconds == IDLE_SLEEP:  # nothing to receive: back off
            time.sleep(self._next)
            self._next = min(self._next * self._polling.growth, self._polling.idle)
        else:  # waiting for the ClientApp's reply (or its content) in the SuperNode's memory
            time.sleep(min(seconds, REPLY_CHECK))

    def activity(self) -> None:
        """A message arrived: poll fast again."""
        self._next = self._polling.fast

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def apply_pull_backoff(seconds: float) -> None:
    """First backoff when a message's content is not uploaded yet (Flower: 1 s)."""
    for fn in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        assert fn.__kwdefaults__ is not None
        fn.__kwdefaults__["initial_backoff"] = seconds


# ---------------------------------------------------------------------------- SuperNode
def run_supernode(
    argv: list[str], *, on_message: Callable[[], None], polling: Polling | None
) -> None:
    """Run ``flower-supernode ARGV`` in this process (it returns when the SuperNode exits).

    ``on_message`` is called after the SuperNode stored each message it received.
    """
    clock = SuperNodeClock(polling) if polling is not None else None
    pull = supernode_loop._pull_and_store_message

    def pull_and_store(*args: Any, **kwargs: Any) -> int | None:
        run_id: int | None = pull(*args, **kwargs)
        if run_id is not None:
            if clock is not None:
                clock.activity()
            on_message()
        return run_id

    supernode_loop._pull_and_store_message = pull_and_store
    if clock is not None and polling is not None:
        setattr(supernode_loop, "time", clock)  # noqa: B010 (the module's `time` global)
        apply_pull_backoff(polling.fast)
    sys.argv = ["flower-supernode", *argv]
    flower_supernode()


# ---------------------------------------------------------------------------- worker
@dataclass(frozen=True)
class AcquiredTask:
    """A ClientApp task the worker claimed from its SuperNode."""

    token: str
    task_id: int
    run_id: int
    fab_hash: str


@dataclass(frozen=True)
class FabInfo:
    """What a task's FAB says about its code."""

    fab_id: str
    fab_version: str
    fab_hash: str
    content: bytes


def acquire_client(address: str) -> RuntimeHttpClient:
    """A Runtime API client that claims tasks (no retries: the caller decides)."""
    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=True,
        root_certificates=None,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
    )


def acquire_task(client: RuntimeHttpClient) -> AcquiredTask | None:
    """Claim a pending ClientApp task of the SuperNode, if there is one."""
    res: AcquireTaskResponse = client.AcquireTask(
        AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    )
    if not (res.HasField("task") and res.token):
        return None
    return AcquiredTask(res.token, res.task.task_id, res.task.run_id, res.task.fab_hash)


def serve_task(address: str, token: str, choose: Callable[[FabInfo], ClientApp]) -> bool:
    """Serve one claimed task as ``flwr-clientapp`` would; False when the app failed.

    ``choose`` returns the ClientApp for the task's FAB. An exception in it or in the app
    becomes an error reply (the codes and reason format of ``run_clientapp``).
    """
    client = RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=True,
        root_certificates=None,
        interceptors=[
            RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
            RuntimeTokenHttpInterceptor(token),
        ],
        retry_invoker=make_simple_http_retry_invoker(),
    )
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    message: Message | None = None
    context: Context | None = None
    reply: Message | None = None
    status, details = SubStatus.FAILED, "ClientApp task failed due to unknown reason"
    try:
        message, context, run, fab = run_clientapp.pull_task_input(client)
        app = choose(FabInfo(run.fab_id, run.fab_version, fab.hash_str, fab.content))
        reply = app(message=message, context=context)
        status, details = SubStatus.COMPLETED, ""
    except Exception as ex:
        code = ErrorCode.CLIENT_APP_RAISED_EXCEPTION
        details = f"{type(ex)}:<'{ex}'>"
        if isinstance(ex, LoadClientAppError):
            code = ErrorCode.LOAD_CLIENT_APP_EXCEPTION
            details = "An exception was raised when attempting to load `ClientApp`"
        log(logging.ERROR, "ClientApp raised an exception", exc_info=ex)
        if message is not None:
            reply = Message(Error(code=code, reason=details), reply_to=message)
    finally:
        if reply is not None and context is not None:
            try:
                run_clientapp.push_message(client, reply, context)
            except Exception as ex:  # the run may have ended meanwhile
                log(logging.ERROR, "Failed to push reply message", exc_info=ex)
                status, details = SubStatus.FAILED, f"pushing the reply failed: {ex}"
        run_clientapp.push_task_output(
            client=client, context=context, sub_status=status, details=details
        )
        heartbeat.stop()
        client.close()
    return status == SubStatus.COMPLETED


def fab_manifest(fab: bytes) -> tuple[dict[str, str], str | None]:
    """A FAB's files (path -> sha256, from its ``.info/CONTENT``) and its ClientApp reference."""
    with zipfile.ZipFile(io.BytesIO(fab)) as z:
        lines = z.read(".info/CONTENT").decode().strip().splitlines()
        project = tomllib.loads(z.read("pyproject.toml").decode())
    files = {path: digest for path, digest, _ in (line.split(",") for line in lines)}
    ref = project.get("tool", {}).get("flwr", {}).get("app", {}).get("components", {})
    return files, ref.get("clientapp")


def load_fab_app(fab: FabInfo) -> ClientApp:
    """The FAB's own ClientApp, installed and imported the stock way."""
    install_from_fab(fab.content, skip_prompt=True)
    load = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)
    app: ClientApp = load(fab.fab_id, fab.fab_version, fab.fab_hash)
    return app


# ---------------------------------------------------------------------------- the pin
def pin_problems() -> list[str]:
    """What no longer matches the Flower internals this module relies on (empty: all good)."""
    problems: list[str] = []
    if not flwr.__version__.startswith(FLWR_SERIES):
        problems.append(f"flwr {flwr.__version__} is not the {FLWR_SERIES}x series")
    expected: dict[Callable[..., Any], set[str]] = {
        RuntimeHttpClient.from_server_address: {
            "server_address", "insecure", "root_certificates", "interceptors", "retry_invoker",
        },
        run_clientapp.pull_task_input: {"client"},
        run_clientapp.push_message: {"client", "message", "context"},
        run_clientapp.push_task_output: {"client", "context", "sub_status", "details"},
        install_from_fab: {"fab_file", "skip_prompt"},
        get_load_client_app_fn: {"default_app_ref", "app_path", "multi_app"},
        make_task_heartbeat_fn_http: {"client"},
        inflatable_utils.pull_objects: {"initial_backoff"},
        inflatable_utils.pull_and_inflate_object_from_tree: {"initial_backoff"},
    }  # fmt: skip
    for fn, names in expected.items():
        missing = names - set(inspect.signature(fn).parameters)
        if missing:
            problems.append(f"{fn.__qualname__} lost parameters {sorted(missing)}")
    for fn in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        backoff = (fn.__kwdefaults__ or {}).get("initial_backoff")
        if backoff not in (1, 1.0):  # patched (a SuperNode in this process) or changed
            problems.append(f"{fn.__qualname__} initial_backoff is {backoff!r}, not 1")
    fields = set(AcquireTaskRequest.DESCRIPTOR.fields_by_name)
    if "supported_task_types" not in fields:
        problems.append("AcquireTaskRequest has no supported_task_types")
    if str(TaskType.CLIENT_APP) != "flwr-clientapp":
        problems.append(f"TaskType.CLIENT_APP is {TaskType.CLIENT_APP!r}")
    for name in ("start", "stop"):
        if not callable(getattr(HeartbeatSender, name, None)):
            problems.append(f"HeartbeatSender.{name} is gone")
    problems += _supernode_loop_problems(supernode_loop)
    return problems


def _supernode_loop_problems(module: ModuleType) -> list[str]:
    """The SuperNode loop still sleeps as described, and calls the function we wrap."""
    if isinstance(getattr(module, "time", None), SuperNodeClock):
        return []  # patched in this process by run_supernode: checked before that
    source = inspect.getsource(module)
    problems = []
    counts = {
        f"time.sleep({IDLE_SLEEP})": 1,
        f"time.sleep({REPLY_SLEEP})": 2,
        "run_id = _pull_and_store_message(": 1,
        "pull_objects(": 1,
    }
    for snippet, n in counts.items():
        found = source.count(snippet)
        if found != n:
            problems.append(f"start_client_internal has {found} x `{snippet}`, expected {n}")
    if getattr(module, "time", None) is not time:
        problems.append("start_client_internal no longer imports the time module as `time`")
    grid = importlib.import_module("flwr.superlink.grid.http_grid")
    if "pull_objects(" not in inspect.getsource(grid.HttpGrid.pull_messages):
        problems.append("HttpGrid no longer pulls message content with pull_objects")
    return problems
