"""Twin certified heads (numpy and another backend) and a removal stream that compares them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simulator.head import CertifiedHead, HeadConfig, LocalHeadData
from simulator.head.backend import make_backend
from support.heads import planted_problem

#: Relative tolerance between backends (float64 on both).
RTOL = 1e-9


def same_algorithm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bulk rows on the GPU path as on numpy's (no cheap fold: ``DEVICE_FOLD_FLOPS``), so that
    the two heads run the same algorithm and agree to ``RTOL``."""
    from simulator.head import solver

    monkeypatch.setattr(solver, "DEVICE_FOLD_FLOPS", 0.0)


def parity_settings(accounting: str) -> dict[str, Any]:
    """Head settings under which :func:`run_stream` retrains, and under ``anchored`` and
    ``exact`` also takes correction steps (one allowed per removal, so the 40-row batch still
    retrains), on both heads alike."""
    if accounting in ("anchored", "exact"):
        return {"accounting": accounting, "sigma": 0.02, "lam": 1e-2, "correction_steps": 1}
    return {"accounting": accounting, "sigma": 0.5, "lam": 1e-2}


def twin_heads(
    backend: str, device: str = "cpu", *, reweigh: bool = False, **cfg: Any
) -> list[CertifiedHead]:
    """A numpy head and a ``backend`` head on the same planted problem and seed."""
    X, y = planted_problem(300, 12, 4, seed=3)
    base = np.random.default_rng(3).uniform(1.0, 2.0, size=300)

    def drift(ids, features, labels):  # a function of the retained rows alone
        return base[ids] * (1.0 + 0.3 * np.tanh(features[:, 0] * ids.size / 300))

    heads = []
    for bk in ("numpy", backend):
        data = LocalHeadData(
            X,
            y,
            4,
            weights=base,
            reweigh=drift if reweigh else None,
            backend=make_backend(device if bk != "numpy" else "cpu", bk),
        )
        config = HeadConfig(device=device if bk != "numpy" else "cpu", backend=bk, **cfg)
        heads.append(CertifiedHead(data, config, rng=np.random.default_rng(7)))
    return heads


def assert_same_reports(a: Any, b: Any) -> None:
    """Two removal reports agree within the backends' tolerance."""
    assert a.retrained == b.retrained and a.retrain_reason == b.retrain_reason
    assert (a.anchored, a.corrections) == (b.anchored, b.corrections)
    for key in ("residual_worst", "residual_data", "charged", "cumulative", "epsilon_spent"):
        # abs: charges at the training tolerance are rounding noise (1e-13) next to budgets ~1
        assert getattr(b, key) == pytest.approx(getattr(a, key), rel=RTOL, abs=1e-9), key
    if a.residual_exact is not None:
        assert b.residual_exact == pytest.approx(a.residual_exact, rel=1e-7, abs=1e-12)
    assert a.retrain_iterations == b.retrain_iterations


def run_stream(ref: CertifiedHead, other: CertifiedHead) -> tuple[int, int]:
    """Remove the same batches from both heads, comparing after each.

    Returns the retrains and the correction steps (the same on both heads).
    """
    np.testing.assert_array_equal(ref.b, other.b)
    np.testing.assert_allclose(other.W, ref.W, rtol=RTOL, atol=1e-12)
    retrains = corrections = 0
    batches = [[0], [5], [9, 11, 13], list(range(20, 60)), [61], [62], [63, 64]]
    for ids in batches:
        ra, rb = ref.remove(ids), other.remove(ids)
        assert_same_reports(ra, rb)
        retrains += ra.retrained
        corrections += ra.corrections
        np.testing.assert_allclose(other.W, ref.W, rtol=1e-8, atol=1e-11)
        np.testing.assert_array_equal(ref.b, other.b)
    np.testing.assert_allclose(other.gradient_norms(), ref.gradient_norms(), rtol=1e-6, atol=1e-11)
    return retrains, corrections


def folds_and_decides_alike(ref: CertifiedHead, other: CertifiedHead) -> None:
    """Batches that numpy keeps as bulk rows and ``other`` (a GPU path, default
    ``DEVICE_FOLD_FLOPS``) folds: the solves differ within the solver's tolerance, and every
    decision (retrain, anchor, correction steps) is the same."""
    order = np.random.default_rng(5).permutation(300)
    folded = 0
    for size in (40, 3, 25, 1, 60):
        ids, order = order[:size].tolist(), order[size:]
        a, b = ref.remove(ids), other.remove(ids)
        assert (a.retrained, a.anchored, a.corrections) == (b.retrained, b.anchored, b.corrections)
        # the charged solver residuals differ (each below rtol 1e-5 of the gradient), and a
        # correction step's solve more (CORRECTION_RTOL: its error is measured, not bounded)
        assert b.cumulative == pytest.approx(a.cumulative, rel=1e-2, abs=1e-9)
        rtol = 1e-3 if a.corrections else 1e-5
        np.testing.assert_allclose(other.W, ref.W, rtol=rtol, atol=1e-8)
        folded += ref._solver.bulk_rows - other._solver.bulk_rows
    assert folded > 0  # numpy kept bulk rows that the other folded
