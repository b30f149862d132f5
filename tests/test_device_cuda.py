"""On a machine with CUDA: the federation trains and extracts features on the GPU and lands
where the CPU run does (same data, seed and stream; float tolerance, since GPU kernels sum in
another order). Skipped, saying so, where torch sees no GPU (these CI machines)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from simulator.runner import run_scenario
from simulator.scenario import load_scenario

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
SCENARIO = Path(__file__).parent.parent / "scenarios" / "federation_tiny.yaml"


def run(device: str, folder: Path) -> dict[str, float]:
    scenario = load_scenario(SCENARIO, overrides=[f"device={device}", "evaluation.attacks=[]"])
    result = run_scenario(scenario, output_dir=folder, progress=False, plots=False)
    return {**result.final, **result.final["metrics"]}


def test_cuda_run_matches_the_cpu_run(tmp_path: Path) -> None:
    cpu, gpu = run("cpu", tmp_path / "cpu"), run("cuda", tmp_path / "cuda")
    assert gpu["removed_total"] == cpu["removed_total"] > 0
    assert gpu["model_version"] == cpu["model_version"]
    assert gpu["accuracy_test"] == pytest.approx(cpu["accuracy_test"], abs=0.02)
    assert np.isfinite(gpu["epsilon_spent"])
    assert gpu["epsilon_spent"] == pytest.approx(cpu["epsilon_spent"], rel=0.2)
    assert gpu["accuracy_retain"] == pytest.approx(cpu["accuracy_retain"], abs=0.02)
