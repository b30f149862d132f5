"""Device-to-host transfers per removal on the torch head (issue 27), counted on CPU torch.

On a GPU every read-back (``.item()``, ``.cpu()``, ``float(t)``, ``bool(t)``, ...) waits for
the device, so a removal that reads back per class pays K waits. The removal path is batched
over the K columns: on the common path one read-back after the solve (residual norms) and one
for the bounds; an exact pass (``anchored``'s re-anchoring, ``exact``, ``report_exact``) adds
one, a refactorisation (a fold of the pending rows) one, a further Neumann step of the solve
one (``solver.py``); each correction step (a solve and an exact pass, ``certified.py``) adds
``READS_PER_CORRECTION``, and one more for the mixing (``anderson.py``): from the second step
on, or from the first where it has secant pairs already (the removal's own step, where the old
head's exact gradient is known, or an earlier correction's).
Whatever K is, a removal that does not retrain reads back at most ``MAX_READS_PER_REMOVAL``
times here, plus those of its correction steps. torch runs here with
``UNLEARNSIM_TORCH_GPU_PATH=1``: the code path a GPU takes, without the CPU's numpy shortcuts
A solve's conjugate-gradient iterations (bulk rows, ``solver.py``) read back once each: the
count is taken less the solver's iterations after its first.
"""

import numpy as np
import pytest
from support.heads import planted_problem
from support.transfers import TransferCounter

from simulator.head import CertifiedHead, HeadConfig, LocalHeadData
from simulator.head.backend import GPU_PATH_VARIABLE, TorchBackend

pytest.importorskip("torch")

#: solve + bounds + exact pass + refactorisation check + a CG solve's closing residual
MAX_READS_PER_REMOVAL = 5
#: the common path of a charge by bounds alone (``guo``, ``worst``, most ``anchored`` steps)
COMMON_PATH_READS = 2
#: a correction step: its solve's residual norms and the exact pass's norms
READS_PER_CORRECTION = 2
#: a correction step after the first: the Anderson mixing's least-squares terms
READS_PER_MIXING = 1


def correction_reads(corrections: int, *, first_mixed: bool) -> int:
    """Read-backs of ``corrections`` correction steps (``certified.py``, ``anderson.py``)."""
    mixings = corrections if first_mixed else max(0, corrections - 1)
    return READS_PER_CORRECTION * corrections + READS_PER_MIXING * mixings


def torch_head(k: int, accounting: str, monkeypatch: pytest.MonkeyPatch) -> CertifiedHead:
    """A torch head on the GPU's code path (CPU), K classes, a budget that rarely retrains."""
    monkeypatch.setenv(GPU_PATH_VARIABLE, "1")
    X, y = planted_problem(1_500, 16, k, seed=5)
    config = HeadConfig(lam=1e-3, sigma=10.0, accounting=accounting, report_exact=False,
                        device="cpu", backend="torch")  # fmt: skip
    data = LocalHeadData(X, y, k, backend=TorchBackend("cpu"))
    return CertifiedHead(data, config, rng=np.random.default_rng(0))


def reads_per_removal(head: CertifiedHead, batches: list[list[int]]) -> list[tuple[int, str]]:
    """Read-backs of each removal that did not retrain, less those of its correction steps,
    with where they came from."""
    out = []
    for ids in batches:
        first_mixed = head._folds_carried() or bool(head._pairs)  # secant pairs at the start
        with TransferCounter() as counter:
            report = head.remove(ids)
        if not report.retrained:
            extra = correction_reads(report.corrections, first_mixed=first_mixed)
            extra += max(0, report.solver_iterations - 1)
            out.append((counter.count - extra, counter.report()))
    return out


@pytest.mark.parametrize("k", [3, 30])
@pytest.mark.parametrize("accounting", ["anchored", "guo", "exact"])
def test_a_removal_reads_back_a_constant_number_of_times_whatever_k(
    k: int, accounting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = torch_head(k, accounting, monkeypatch)
    singles = [[i] for i in range(150)]  # crosses a fold of the pending rows (128)
    batch = [list(range(200, 500))]  # folds at once: a refactorisation in the removal
    reads = reads_per_removal(head, singles + batch)
    assert len(reads) >= 100, "the workload retrains: it no longer measures a removal"
    worst, where = max(reads)
    assert worst <= MAX_READS_PER_REMOVAL, f"{worst} read-backs in one removal:\n{where}"
    fewest = min(count for count, _ in reads)
    assert fewest == COMMON_PATH_READS + (accounting == "exact")  # solve, bounds (, exact)


def test_the_counter_sees_what_the_old_per_class_loop_did(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The counter is not blind: K per-class norms read one by one count K times."""
    head = torch_head(10, "guo", monkeypatch)
    with TransferCounter() as counter:
        for c in range(10):
            float(head._bk.norms(head._W[:, c : c + 1])[0])
        head._bk.to_numpy(head._W)
    assert counter.count == 11


@pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="needs a CUDA device (bench/gpu)"
)
def test_on_cuda_a_removal_synchronises_a_constant_number_of_times() -> None:
    """On a real GPU, every synchronising call that CUDA's sync debug mode reports.

    It sees what the counter cannot: host-to-device copies from pageable memory (the ids and
    weights of the removed rows), and checks inside torch (``linalg.solve`` waits to report a
    singular matrix; the solver uses ``solve_ex``).
    """
    import warnings

    import torch

    X, y = planted_problem(1_500, 16, 30, seed=5)
    config = HeadConfig(lam=1e-3, sigma=10.0, accounting="anchored", report_exact=False,
                        device="cuda", backend="torch")  # fmt: skip
    head = CertifiedHead(
        LocalHeadData(X, y, 30, backend=TorchBackend("cuda")), config, rng=np.random.default_rng(0)
    )
    for i in range(5):
        head.remove([i])
    counts = []
    torch.cuda.set_sync_debug_mode("warn")
    try:
        for i in range(5, 105):
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                report = head.remove([i])
            if not report.retrained:
                syncs = sum("synchroniz" in str(w.message) for w in seen)
                counts.append(syncs - READS_PER_CORRECTION * report.corrections)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    print("synchronising calls per removal:", np.bincount(counts))
    assert counts and max(counts) <= MAX_READS_PER_REMOVAL + 3  # + the rows' uploads
