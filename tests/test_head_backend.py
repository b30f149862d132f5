"""The head on torch (CPU here; the same code path as CUDA) against numpy: same maths."""

import numpy as np
import pytest
from support.head_backend import (
    RTOL,
    assert_same_reports,
    folds_and_decides_alike,
    parity_settings,
    run_stream,
    same_algorithm,
    twin_heads,
)
from support.heads import planted_problem

from simulator.errors import ConfigError
from simulator.head import CertifiedHead, HeadConfig, HessianSolver, LocalHeadData
from simulator.head.backend import GPU_PATH_VARIABLE, NumpyBackend, TorchBackend, resolve

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("gpu_path", [False, True], ids=["cpu-path", "gpu-path"])
@pytest.mark.parametrize("accounting", ["anchored", "guo", "exact", "worst"])
def test_torch_cpu_head_matches_numpy(
    accounting: str, gpu_path: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the GPU's code path the torch head's arrays are tensors; on the CPU's it computes
    with numpy on the torch rows' memory (``Backend.small_work``). Either way every report,
    head and retrain matches the numpy head's."""
    if gpu_path:  # torch without its numpy fast paths: what a GPU runs
        monkeypatch.setenv(GPU_PATH_VARIABLE, "1")
        same_algorithm(monkeypatch)
    ref, other = twin_heads("torch", **parity_settings(accounting))
    assert isinstance(ref._bk, NumpyBackend)
    assert isinstance(other.data.backend, TorchBackend)
    assert isinstance(other._bk, TorchBackend if gpu_path else NumpyBackend)
    assert isinstance(other._W, torch.Tensor) == gpu_path
    retrains, corrections = run_stream(ref, other)
    assert retrains >= 1  # the budget forces (warm) retrains on both
    if accounting in ("anchored", "exact"):  # and correction steps, measured alike
        assert corrections >= 1


def test_gpu_path_folds_cheap_batches_and_decides_as_numpy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """By default the GPU path folds a batch that numpy keeps as bulk rows (the fold is cheap
    on a GPU: ``DEVICE_FOLD_FLOPS``); every decision is numpy's."""
    monkeypatch.setenv(GPU_PATH_VARIABLE, "1")
    folds_and_decides_alike(*twin_heads("torch", **parity_settings("anchored")))


def test_torch_cpu_head_matches_numpy_with_reweighting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch code (the GPU's path) with re-weighting, against numpy."""
    monkeypatch.setenv(GPU_PATH_VARIABLE, "1")
    same_algorithm(monkeypatch)
    ref, other = twin_heads("torch", reweigh=True, sigma=0.5, lam=1e-2)
    run_stream(ref, other)


def test_torch_cold_retrain_and_rebuild_path_match_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch code (the GPU's path) with cold retrains and rebuilt Hessians."""
    monkeypatch.setenv(GPU_PATH_VARIABLE, "1")
    same_algorithm(monkeypatch)
    ref, other = twin_heads("torch", retrain="cold", hessian_mode="rebuild", sigma=0.5, lam=1e-2)
    run_stream(ref, other)


def test_torch_rebuilds_of_the_classes_that_moved_match_numpy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The torch code (the GPU's path) rebuilds the same classes' Hessians at the same
    removals as numpy (``head.rereference_after``), and every report and head matches."""
    monkeypatch.setenv(GPU_PATH_VARIABLE, "1")
    same_algorithm(monkeypatch)
    ref, other = twin_heads("torch", accounting="anchored", sigma=0.3, lam=1e-2,
                            rereference_after=1)  # fmt: skip
    rebuilt: dict[int, list[tuple[int, ...] | None]] = {id(ref): [], id(other): []}
    refresh = CertifiedHead._refresh

    def recording(head: CertifiedHead, classes: tuple[int, ...] | None = None) -> None:
        rebuilt[id(head)].append(classes)
        refresh(head, classes)

    monkeypatch.setattr(CertifiedHead, "_refresh", recording)
    run_stream(ref, other)
    assert rebuilt[id(ref)] == rebuilt[id(other)]
    assert any(c is not None and len(c) < 4 for c in rebuilt[id(ref)]), rebuilt
    np.testing.assert_allclose(np.asarray(other._W_ref), ref._W_ref, rtol=RTOL, atol=1e-12)


def test_numpy_head_on_torch_rows_and_back() -> None:
    """Data and head may sit on different backends: statistics move at the boundary."""
    X, y = planted_problem(200, 6, 3, seed=1)
    ref = CertifiedHead(LocalHeadData(X, y, 3), HeadConfig(), rng=np.random.default_rng(0))
    mixed = CertifiedHead(
        LocalHeadData(X, y, 3, backend=TorchBackend("cpu")),
        HeadConfig(),
        rng=np.random.default_rng(0),
    )
    np.testing.assert_allclose(mixed.W, ref.W, rtol=RTOL)
    assert_same_reports(ref.remove([4, 8]), mixed.remove([4, 8]))


def test_solver_on_torch_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    k, d = 3, 20
    A = rng.normal(size=(k, d, d))
    H = A @ A.transpose(0, 2, 1) + d * np.eye(d)
    rows, coef = rng.normal(size=(5, d)) * 0.3, rng.uniform(0, 0.25, size=(5, k))
    g = rng.normal(size=(d, k))
    out = []
    for bk in (NumpyBackend(), TorchBackend("cpu")):
        s = HessianSolver(bk.asarray(H), backend=bk)
        s.downdate_rows(rows, coef, diagonal=0.5)
        r = s.solve(g)
        out.append((bk.to_numpy(r.step), r.residual_norms, bk.to_numpy(s.hessians)))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-10)
    np.testing.assert_allclose(out[1][2], out[0][2], rtol=1e-12)
    assert np.all(out[1][1] <= HessianSolver(H).rtol * np.linalg.norm(g, axis=0))


def test_device_settings() -> None:
    assert resolve("cpu", "auto") == ("cpu", "numpy")
    assert resolve("cpu", "torch") == ("cpu", "torch")
    assert resolve("cuda", "auto") == ("cuda", "torch")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve("auto", "auto")[0] == expected
    with pytest.raises(ConfigError):
        HeadConfig(device="cuda", backend="numpy")
    with pytest.raises(ConfigError):
        HeadConfig(device="tpu")  # type: ignore[arg-type]


def test_inference_tensors_of_a_torch_head_survive_every_use_outside_its_methods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The head's methods run in inference mode (``TorchBackend.kernels_only``): what they
    make there is read, copied, pickled and restored outside, and written again inside.

    After a retrain every array of the head is one made in inference mode; pending Gram rows
    make ``state_dict`` and pickling fold, which must not write in place outside it.
    """
    import copy
    import pickle

    monkeypatch.setenv(GPU_PATH_VARIABLE, "1")  # the solver's and Gram's tensors too (GPU path)
    ref, head = twin_heads("torch", sigma=0.5, lam=1e-2)
    head.retrain()
    ref.retrain()
    for i in range(3):  # pending Gram and Woodbury rows
        assert_same_reports(ref.remove([i]), head.remove([i]))
    assert head._gram._base.is_inference()
    saved = head.state_dict()
    lent = head.state_dict(host=False)
    twin = pickle.loads(pickle.dumps(head))
    clone = copy.deepcopy(head)
    for other in (twin, clone, head):
        other.load_state_dict(saved)
    head.load_state_dict(saved)
    for i in range(3, 40):  # past the pending limits: folds write into the arrays
        expected = ref.remove([i])
        for other in (head, twin, clone):
            assert_same_reports(expected, other.remove([i]))
    assert lent["solver"]["base"].is_inference()
