"""On a machine with CUDA: the federation trains and extracts features on the GPU and lands
where the CPU run does (same data, seed and stream; float tolerance, since GPU kernels sum in
another order), and the certified head on the GPU (``head.device: cuda``, torch float64) gives
numpy's head, bounds and retrain decisions. Skipped, saying so, where torch sees no GPU (these
CI machines); the same head code runs on torch's CPU kernels in ``test_head_backend.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from simulator.runner import ReportingConfig, run_scenario
from simulator.scenario import load_scenario

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
SCENARIO = Path(__file__).parent.parent / "scenarios" / "federation_tiny.yaml"


def run(device: str, folder: Path, *extra: str) -> dict[str, float]:
    overrides = [f"device={device}", "evaluation.attacks=[]", *extra]
    scenario = load_scenario(SCENARIO, overrides=overrides)
    result = run_scenario(scenario, ReportingConfig(progress=False, plots=False), output_dir=folder)
    return {**result.final, **result.final["metrics"]}


def test_cuda_run_matches_the_cpu_run(tmp_path: Path) -> None:
    cpu, gpu = run("cpu", tmp_path / "cpu"), run("cuda", tmp_path / "cuda")
    assert gpu["removed_total"] == cpu["removed_total"] > 0
    assert gpu["model_version"] == cpu["model_version"]
    assert gpu["accuracy_test"] == pytest.approx(cpu["accuracy_test"], abs=0.02)
    assert np.isfinite(gpu["epsilon_spent"])
    assert gpu["epsilon_spent"] == pytest.approx(cpu["epsilon_spent"], rel=0.2)
    assert gpu["accuracy_retain"] == pytest.approx(cpu["accuracy_retain"], abs=0.02)


@pytest.mark.parametrize("accounting", ["anchored", "guo", "exact"])
def test_head_on_cuda_matches_numpy(accounting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from support.head_backend import parity_settings, run_stream, same_algorithm, twin_heads

    same_algorithm(monkeypatch)
    ref, other = twin_heads("torch", "cuda", **parity_settings(accounting))
    assert other._W.is_cuda
    retrains, corrections = run_stream(ref, other)
    assert retrains >= 1  # budget retrains (warm) on both, same decisions
    if accounting in ("anchored", "exact"):  # and correction steps, measured alike
        assert corrections >= 1


def test_head_on_cuda_folds_cheap_batches_and_decides_as_numpy() -> None:
    from support.head_backend import folds_and_decides_alike, parity_settings, twin_heads

    folds_and_decides_alike(*twin_heads("torch", "cuda", **parity_settings("anchored")))


def test_head_on_cuda_with_reweighting_matches_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    from support.head_backend import run_stream, same_algorithm, twin_heads

    same_algorithm(monkeypatch)
    run_stream(*twin_heads("torch", "cuda", reweigh=True, sigma=0.5, lam=1e-2))


@pytest.mark.parametrize("client_rows", ["host", "auto"])
def test_federation_with_the_head_on_cuda(tmp_path: Path, client_rows: str) -> None:
    """The server's head runs on the GPU; the clients keep their rows in numpy (``host``) or
    on the GPU beside the head (``auto``, ``head.client_rows``: the default on cuda)."""
    cpu = run("cpu", tmp_path / "cpu")
    gpu = run("cpu", tmp_path / "head-cuda", "head.device=cuda", f"head.client_rows={client_rows}")
    assert gpu["removed_total"] == cpu["removed_total"] > 0
    assert gpu["model_version"] == cpu["model_version"]
    assert gpu["accuracy_test"] == pytest.approx(cpu["accuracy_test"], abs=1e-6)
    assert gpu["epsilon_spent"] == pytest.approx(cpu["epsilon_spent"], rel=1e-6, abs=1e-9)
