"""Correction steps: where one Newton step leaves a measured residual above the budget, further
steps on the measured gradient bring it down before a retrain is considered.

A correction step is ``w <- w - H_ref'^{-1} r`` with ``r`` the exact gradient of the head on the
retained rows (``simulator/head/certified.py``, ``CertifiedHead._correct``; with bulk rows the
first steps use the factored matrix alone instead of ``H_ref'``). Its error is not
bounded but measured by one more exact pass, so the charge of the released head is its exact
residual; the measured gradient becomes the next step's ``carried`` term, and the anchor's proof
(``docs/certified-head.md``) covers the steps that follow. These tests check the three things
that proof needs: the charge is the released head's exact residual, the gradient carried on is
the released head's (later charges cover the truth), and a step that does not help is not
released.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.heads import planted_problem

from simulator.head import CertifiedHead, HeadConfig, LocalHeadData
from simulator.head.certified import CORRECTION_TARGET


def class_purge() -> tuple[np.ndarray, np.ndarray, list[int]]:
    """A planted problem and a batch of 60% of one class's rows (a distribution shift)."""
    X, y = planted_problem(600, 6, 3, seed=11)
    rows = np.flatnonzero(y == 0)
    return X, y, rows[: int(0.6 * rows.size)].tolist()


def head_with_budget(
    X: np.ndarray, y: np.ndarray, budget: float, *, fold: bool = False, **extra: object
) -> CertifiedHead:
    """An ``anchored`` head (no diagnostic exact pass) whose residual budget is ``budget``.

    The purge is a bulk batch (``solver.py``); ``fold`` folds it into the factors instead, so
    that every solve is a full one whatever the budget (the step does not depend on it).
    """
    unit = HeadConfig(sigma=1.0, epsilon=1.0).budget  # eps' is linear in epsilon
    options: dict = {"sigma": 1.0, "epsilon": budget / unit, "report_exact": False}
    config = HeadConfig(**(options | extra))
    head = CertifiedHead(LocalHeadData(X, y, 3), config, rng=np.random.default_rng(0))
    if fold:
        head._solver.max_bulk_rows = 0
    return head


def one_step_residual(X: np.ndarray, y: np.ndarray, ids: list[int]) -> float:
    """The exact residual that one Newton step (a full solve) leaves after removing ``ids``
    (no corrections: the budget is too large to need them)."""
    head = head_with_budget(X, y, 1e9, fold=True, report_exact=True)
    report = head.remove(ids)
    assert report.corrections == 0 and report.residual_exact is not None
    return report.residual_exact


def test_one_step_is_not_enough_without_corrections() -> None:
    """The workload: after the class purge one step's residual is several times the budget,
    so without correction steps the head must retrain."""
    X, y, purge = class_purge()
    budget = one_step_residual(X, y, purge) / 4
    head = head_with_budget(X, y, budget, correction_steps=0)
    report = head.remove(purge)
    assert report.retrained and report.retrain_reason == "budget"


def test_corrections_certify_the_purge_and_charge_the_released_head() -> None:
    """With correction steps the same purge is released: the charge is the exact residual of
    the head released (measured again here), below the correction target, and every later
    removal's charge still covers the exact residual (the carried gradient is the released
    head's, not an earlier iterate's)."""
    X, y, purge = class_purge()
    first = one_step_residual(X, y, purge)
    budget = first / 4
    head = head_with_budget(X, y, budget)
    report = head.remove(purge)
    assert not report.retrained and report.anchored
    assert report.corrections >= 1 and "correction" in report.timings
    exact = head.exact_residual()
    assert report.residual_exact == pytest.approx(exact, rel=1e-9)
    assert report.cumulative == pytest.approx(exact, rel=1e-9)
    assert exact <= CORRECTION_TARGET * budget < first
    later = [i for i in range(600) if i not in set(purge)][:40]
    for i in later:
        r = head.remove([i])
        assert r.cumulative >= head.exact_residual() * (1 - 1e-9), (i, r)
    assert head.retrains == 0


def test_a_correction_that_does_not_help_is_not_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """A correction that overshoots tenfold (an injected fault in the solves after the
    removal's own step) raises the residual: the head keeps the iterate it measured best, and
    its charge is that iterate's exact residual."""
    X, y, purge = class_purge()
    budget = one_step_residual(X, y, purge) / 4
    head = head_with_budget(X, y, budget, fold=True)
    solver, solve = head._solver, head._solver.solve
    calls = []

    def overshooting(gradient, **options):
        calls.append(1)
        result = solve(gradient, **options)
        if len(calls) == 1:  # the removal's Newton step
            return result
        return dataclasses.replace(result, step=10.0 * result.step)

    monkeypatch.setattr(solver, "solve", overshooting)
    report = head.remove(purge)
    assert report.corrections == 1
    assert report.retrained  # the one-step head stays above the budget


def test_a_head_within_the_budget_takes_no_correction() -> None:
    """Correction steps lower a residual only to the budget (``CORRECTION_TARGET`` 1): the
    one-step head whose exact residual is within the budget is released as it is, with that
    residual as its charge (the next step corrects its gradient and starts the sum afresh, so
    a pass to lower it would buy nothing), and later removals' charges still cover the truth."""
    X, y, purge = class_purge()
    first = one_step_residual(X, y, purge)
    head = head_with_budget(X, y, first / 0.8, fold=True)  # the one-step head at 0.8 of it
    report = head.remove(purge)
    assert not report.retrained and report.anchored and report.corrections == 0
    assert report.cumulative == pytest.approx(first, rel=1e-9)
    assert report.cumulative == pytest.approx(head.exact_residual(), rel=1e-9)
    for i in [i for i in range(600) if i not in set(purge)][:20]:
        assert head.remove([i]).cumulative >= head.exact_residual() * (1 - 1e-9)


def test_correction_steps_must_not_be_negative() -> None:
    from simulator.errors import ConfigError

    with pytest.raises(ConfigError, match="correction_steps"):
        HeadConfig(correction_steps=-1)


def test_anderson_mixing_solves_a_quadratic_with_a_stale_preconditioner() -> None:
    """On a quadratic gradient ``g(w) = H w - c`` with a preconditioner ``P`` that is larger
    than ``H`` in two directions, plain corrections ``w <- w - P^{-1} g`` fall by a constant
    factor per step; mixing the last iterates (``simulator/head/anderson.py``) falls much
    faster, and with one iterate it is the plain step."""
    from simulator.head import anderson
    from simulator.head.backend import NUMPY

    rng = np.random.default_rng(3)
    d, k = 12, 2
    A = rng.normal(size=(k, d, d))
    H = A @ A.transpose(0, 2, 1) + d * np.eye(d)
    B = rng.normal(size=(k, d, 2)) * 3.0
    P = H + B @ B.transpose(0, 2, 1)  # P >= H: the plain iteration contracts, slowly
    c = rng.normal(size=(d, k))

    def gradient(W: np.ndarray) -> np.ndarray:
        return np.einsum("kij,jk->ik", H, W) - c

    def step(g: np.ndarray) -> np.ndarray:
        return np.stack([np.linalg.solve(P[j], g[:, j]) for j in range(k)], axis=1)

    def run(depth: int) -> list[float]:
        W = np.zeros((d, k))
        heads, grads, norms = [W], [gradient(W)], []
        for _ in range(5):
            pairs = anderson.differences(heads[-depth:], grads[-depth:])
            W_hat, g_hat = anderson.mixed(heads[-1], grads[-1], pairs, NUMPY)
            W = W_hat - step(g_hat)
            heads, grads = [*heads, W], [*grads, gradient(W)]
            norms.append(float(np.linalg.norm(grads[-1])))
        return norms

    plain, mixed = run(1), run(anderson.DEPTH)
    assert plain[0] == pytest.approx(mixed[0])  # one iterate: the plain step
    assert plain[-1] < plain[0] and plain[-1] > 0.01 * plain[0]  # linear, slow
    assert mixed[-1] < 1e-4 * plain[-1]
    W0, g0 = rng.normal(size=(d, k)), rng.normal(size=(d, k))
    same = anderson.mixed(W0, g0, [], NUMPY)
    assert same[0] is W0 and same[1] is g0


def test_mixed_corrections_need_no_more_passes_than_plain_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the class purge with a small budget the mixed corrections reach the target in no
    more passes than plain ones and release a head whose charge is its exact residual."""
    from simulator.head import anderson

    X, y, purge = class_purge()
    budget = one_step_residual(X, y, purge) / 40
    passes = []
    for depth in (1, anderson.DEPTH):
        monkeypatch.setattr(anderson, "DEPTH", depth)
        head = head_with_budget(X, y, budget)
        report = head.remove(purge)
        assert not report.retrained
        assert report.cumulative == pytest.approx(head.exact_residual(), rel=1e-9)
        passes.append(report.corrections)
    assert passes[1] <= passes[0]


def purge_in_batches(pairs: int, monkeypatch: pytest.MonkeyPatch) -> tuple[CertifiedHead, list]:
    """60% of one class removed in six batches (a class purge as a stream, like the Kafka
    benchmark's), with at most ``pairs`` secant pairs mixed (0: the plain first step and no
    pairs carried between removals, as before they were)."""
    from simulator.head import anderson

    monkeypatch.setattr(anderson, "PAIRS", pairs)
    X, y = planted_problem(2_000, 16, 3, seed=11)
    rows = np.flatnonzero(y == 0)
    config = HeadConfig(sigma=1.0, epsilon=1.0, report_exact=False)
    head = CertifiedHead(LocalHeadData(X, y, 3), config, rng=np.random.default_rng(0))
    reports = []
    for batch in np.array_split(rows[: int(0.6 * rows.size)], 6):
        reports.append(head.remove(batch.tolist()))
        assert reports[-1].cumulative >= head.exact_residual() * (1 - 1e-9)
    return head, reports


def test_secant_pairs_of_earlier_removals_save_correction_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The removal's own step and the last correcting removal's pairs enter the first
    correction's mixing (``CertifiedHead._correct``): the purge needs fewer passes (8 without
    them, 6 with, measured), no retrain, and every charge still covers the exact residual."""
    from simulator.head import anderson

    pairs = anderson.PAIRS
    head, mixed = purge_in_batches(pairs, monkeypatch)
    _, without = purge_in_batches(0, monkeypatch)
    assert not any(r.retrained for r in without + mixed)
    assert sum(r.corrections for r in mixed) < sum(r.corrections for r in without)
    assert 0 < len(head._pairs) <= pairs


def test_secant_pairs_are_part_of_the_head_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A head restored from ``state_dict`` (and a pickle of it) continues the purge exactly as
    the original: the pairs carried between removals are saved. A state of version 2 (no
    pairs) still loads, and then starts without them."""
    import copy
    import pickle

    from simulator.head.certified import STATE_VERSION

    head, _ = purge_in_batches(4, monkeypatch)
    saved = head.state_dict()
    assert saved["version"] == STATE_VERSION == 4 and len(saved["pairs"]) == len(head._pairs) > 0
    twin, clone = pickle.loads(pickle.dumps(head)), copy.deepcopy(head)
    clone._pairs = ()
    clone.load_state_dict(saved)
    _, y = planted_problem(2_000, 16, 3, seed=11)
    rows = np.flatnonzero(y == 1)[:150].tolist()
    expected = head.remove(rows)
    assert expected.corrections >= 1
    for other in (twin, clone):
        got = other.remove(rows)
        assert (got.corrections, got.cumulative) == (expected.corrections, expected.cumulative)
        np.testing.assert_array_equal(other.W, head.W)
    old = {**saved, "version": 2}
    del old["pairs"]
    clone.load_state_dict(old)
    assert clone._pairs == ()
    del twin.__dict__["_pairs"]  # a head pickled before the pairs existed (a federation cache)
    older = pickle.loads(pickle.dumps(twin))
    assert older._pairs == () and older.remove(np.flatnonzero(y == 2)[:150].tolist()).corrections


def recorded_solves(head: CertifiedHead, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Each solve of ``head``'s solver as (a correction's, with conjugate gradients)."""
    solver, solve, calls = head._solver, head._solver.solve, []

    def recording(gradient, **options):
        calls.append((options.get("rtol") is not None, options.get("conjugate_gradients", True)))
        return solve(gradient, **options)

    monkeypatch.setattr(solver, "solve", recording)
    return calls


@pytest.mark.parametrize("contraction", [0.5, 0.0])
def test_a_bulk_purge_solves_without_the_bulk_rows_until_a_step_is_slow(
    contraction: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The purge held as bulk rows: its first correction solves with the factored matrix
    alone (no conjugate gradients, where the Newton step's solve has them); a correction that
    does not bring the residual below ``CORRECTION_CONTRACTION`` of the lowest (0: every step)
    makes the next ones solve against the bulk rows. The charge is the released head's exact
    residual either way. (A correction without progress is tried again against the bulk rows;
    the fault injected in the test above, on a folded head, stops at once.)"""
    from simulator.head import certified

    monkeypatch.setattr(certified, "CORRECTION_CONTRACTION", contraction)
    X, y, purge = class_purge()
    head = head_with_budget(X, y, one_step_residual(X, y, purge) / 1e4)
    calls = recorded_solves(head, monkeypatch)
    report = head.remove(purge)
    assert head._solver.bulk_rows == len(purge)
    assert not report.retrained and report.anchored and report.corrections >= 2
    assert calls[0] == (False, True) and calls[1] == (True, False)  # step, first correction
    assert len(calls) == 1 + report.corrections
    if contraction == 0.0:
        assert all(cg for _, cg in calls[2:])
    assert report.cumulative == pytest.approx(head.exact_residual(), rel=1e-9)
    assert report.cumulative <= head.budget
