"""The warm ClientApp worker: one long-lived process per SuperNode serves all its messages.

Flower's SuperExec starts a fresh ``flwr-clientapp`` process for every message, which imports
torch and the app again and unpacks the app bundle (FAB): seconds per message on a loaded
machine. A SuperNode started with ``--isolation process`` leaves that to whoever claims its
tasks on its Runtime API; this worker does, with the app already imported:

* :meth:`WarmApp.load` imports the ClientApp (``clients.client_app:app``) and what its
  handlers import lazily (torch), once, and fingerprints the project's Python files;
* :func:`serve` claims each task as it arrives (woken by the SuperNode, see
  ``server/flower/warm_nodes.py``; otherwise it polls, backing off) and serves it in a child
  forked from the warm process;
* a task whose FAB carries exactly the preloaded files is served by the preloaded app; any
  other FAB (other code, or another app) is installed and imported the stock way in the child,
  so the run executes the code it shipped, as with Flower's own executor.

Fork per message, not in-process serving: the ClientApp is written for Flower's contract that
each message runs in a fresh process and only ``context.state`` survives. A child keeps that
contract (module globals, torch's global RNG and thread settings, memory growth and leaks die
with it), and a crash (segfault, out-of-memory kill) loses one task, which Flower turns into an
error reply after the task's heartbeat expires, as for ``flwr-clientapp``, instead of the
worker. The fork costs milliseconds (``docs/flower.md``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import select
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import httpx

from server.flower import flwr_internals as fi
from server.processes import alive

#: The ClientApp a worker serves, and what its handlers import on first use: torch (through
#: ``clients.build``), and ``torch._dynamo``, which the first ``torch.optim`` optimizer imports
#: (1.5 s of CPU that every FedAvg message paid in its fresh process).
APP_REF = "clients.client_app:app"
PRELOAD = ("clients.build", "torch._dynamo")
#: Without a wake-up pipe, the worker polls its SuperNode from this pause upwards.
FIRST_POLL = 0.01
#: Pause after the SuperNode's Runtime API refused a connection (it is still starting).
RETRY = 0.1
#: Exit status bits of a serving child: the app answered with an error reply; the FAB was
#: not the preloaded code and was served the stock way (1: the child itself failed).
APP_FAILED, STOCK = 2, 4


@dataclass(frozen=True)
class WarmApp:
    """The preloaded ClientApp and the files it was imported from.

    Attributes
    ----------
    ref : ``module:attribute`` of the app (as in ``[tool.flwr.app.components]``).
    app : the ClientApp.
    digests : sha256 of every ``.py`` file of the app's top-level packages (path relative to
        ``root``, as in a FAB).
    loaded : relative paths of the project modules imported now (a FAB must carry them all).
    """

    ref: str
    app: fi.ClientApp
    root: Path
    digests: dict[str, str]
    loaded: frozenset[str]
    packages: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def load(cls, ref: str = APP_REF, preload: tuple[str, ...] = PRELOAD) -> WarmApp:
        """Import the ClientApp ``ref`` (``module:attribute``) and the ``preload`` modules.

        Records the digests of the project's files now loaded, so that a later change to them
        is detected.
        """
        module_name, _, attribute = ref.partition(":")
        module = importlib.import_module(module_name)
        for name in preload:
            importlib.import_module(name)
        app = getattr(module, attribute)
        if not isinstance(app, fi.ClientApp):
            raise TypeError(f"{ref} is not a flwr ClientApp")
        top = module_name.split(".")[0]
        root = Path(sys.modules[top].__file__ or "").resolve().parent.parent
        packages = project_packages(top, root)
        loaded = {
            f.relative_to(root).as_posix()
            for name, m in list(sys.modules.items())
            if name.split(".")[0] in packages and (f := _module_file(m)) is not None
        }
        digests = {
            f.relative_to(root).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest()
            for pkg in packages
            for f in sorted((root / pkg).rglob("*.py"))
        }
        return cls(ref, app, root, digests, frozenset(loaded), packages)

    def mismatch(self, fab: fi.FabInfo) -> str | None:
        """Why the FAB's code is not the preloaded code (None: it is the same)."""
        files, ref = fi.fab_manifest(fab.content)
        if ref != self.ref:
            return f"the FAB's ClientApp is {ref!r}, this worker preloaded {self.ref!r}"
        ours = {p: d for p, d in files.items() if p.endswith(".py")}
        for path, digest in sorted(ours.items()):
            if self.digests.get(path) != digest:
                return f"{path} differs from {self.root / path}"
        absent = sorted(self.loaded - set(ours))
        if absent:
            return f"the FAB lacks {absent[:3]} that this worker imported"
        return None

    def choose(self, fab: fi.FabInfo) -> fi.ClientApp:
        """The preloaded app for its own FAB; any other FAB's app loaded the stock way."""
        why = self.mismatch(fab)
        if why is None:
            return self.app
        print(f"FAB {fab.fab_hash[:12]}: {why}; loading it the stock way", file=sys.stderr)
        for name in [n for n in sys.modules if n.split(".")[0] in self.packages]:
            del sys.modules[name]  # this is a forked child: the worker keeps its modules
        return fi.load_fab_app(fab)


def project_packages(top: str, root: Path) -> frozenset[str]:
    """Top-level packages shipped with the package ``top``.

    Its distribution's (``unlearnsim``:
    clients, server, simulator), else, for a source tree on ``sys.path``, the imported
    packages that sit next to it in ``root``.
    """
    owners = importlib.metadata.packages_distributions()
    dists = set(owners.get(top, []))
    if dists:
        return frozenset(name for name, ds in owners.items() if dists & set(ds))
    return frozenset(
        name
        for name, m in list(sys.modules.items())
        if "." not in name and (f := _module_file(m)) is not None and f.parent.parent == root
    )


def _module_file(module: object) -> Path | None:
    path = getattr(module, "__file__", None)
    return Path(path).resolve() if isinstance(path, str) else None


def serve(
    address: str, app: WarmApp, *, wake: int | None, node_pid: int | None, idle: float = 1.0
) -> None:
    """Claim and serve the SuperNode's ClientApp tasks until the SuperNode is gone.

    Parameters
    ----------
    address : the SuperNode's Runtime API (``127.0.0.1:PORT``).
    app : the preloaded app.
    wake : read end of a pipe the SuperNode writes a byte to for every message it stores;
        None: poll, from :data:`FIRST_POLL` after a task up to ``idle`` seconds.
    node_pid : the SuperNode's process (the worker ends with it); None: serve forever.
    idle : longest wait between two looks at the Runtime API.
    """
    client = fi.acquire_client(address)
    pause = FIRST_POLL
    trusted: set[str] = set()  # FAB hashes found to carry exactly the preloaded code
    while node_pid is None or alive(node_pid):
        try:
            task = fi.acquire_task(client)
        except httpx.HTTPError:  # the SuperNode's Runtime API is not up (yet), or gone
            time.sleep(RETRY)
            continue
        if task is not None:
            serve_forked(address, task, app, trusted)
            pause = FIRST_POLL
        elif wake is not None:
            if not _wait_for_wake(wake, idle):
                return  # the SuperNode closed the pipe: it has exited
        else:
            time.sleep(pause)
            pause = min(pause * 1.5, idle)


def _wait_for_wake(fd: int, timeout: float) -> bool:
    """Wait for a wake-up byte (or ``timeout``); False when the writer has gone."""
    ready, _, _ = select.select([fd], [], [], timeout)
    if ready:
        return os.read(fd, 4096) != b""
    return True


def serve_forked(
    address: str, task: fi.AcquiredTask, app: WarmApp, trusted: set[str] | None = None
) -> int:
    """Serve ``task`` in a child of this process; returns the child's exit status.

    ``trusted``: FAB hashes already found to be the preloaded code (their check is skipped);
    the task's FAB is added when the child served it with the preloaded app.
    """
    trusted = set() if trusted is None else trusted
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.perf_counter()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: serve, then leave without running the parent's cleanup
        stock = False

        def choose(fab: fi.FabInfo) -> fi.ClientApp:
            nonlocal stock
            chosen = app.app if fab.fab_hash in trusted else app.choose(fab)
            stock = chosen is not app.app
            return chosen

        def serve_one() -> int:
            die_with_parent(parent)
            served = fi.serve_task(address, task.token, choose)
            return (0 if served else APP_FAILED) | (STOCK if stock else 0)

        exit_child(serve_one)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if code in (0, APP_FAILED):
        trusted.add(task.fab_hash)
    elif code not in (STOCK, STOCK | APP_FAILED):
        print(f"task {task.task_id}: the serving process ended with {code}", file=sys.stderr)
    print(f"task {task.task_id} of run {task.run_id}: {seconds:.3f} s, exit {code}", flush=True)
    return code


def exit_child(body: Callable[[], int]) -> NoReturn:
    """End a forked child with the exit code of ``body``, never returning into the parent's code.

    An exception in ``body`` is printed and exits 1; stdout and stderr are flushed, then
    ``os._exit`` leaves without running the parent's cleanup (``atexit``, ``finally`` blocks).
    """
    code = 1
    try:
        code = body()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def die_with_parent(parent: int) -> None:
    """Have the kernel send SIGTERM to this process when ``parent`` exits (Linux)."""
    if sys.platform != "linux":
        return
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent was gone before the call
        os._exit(1)
