"""Certified removal against slow references: exact retraining, exact residuals, the budget."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.heads import planted_problem

from simulator.errors import InputError, UnknownSampleError
from simulator.head import (
    CertifiedHead,
    HeadConfig,
    HessianSolver,
    LocalHeadData,
    certificate_constant,
    residual_budget,
    train_head,
)
from simulator.head.logistic import StatisticsRequest, objective_gradient, predict_classes


def make_head(n=300, d=8, k=3, seed=0, **cfg):
    X, y = planted_problem(n, d, k, seed=seed)
    head = CertifiedHead(LocalHeadData(X, y, k), HeadConfig(**cfg), rng=np.random.default_rng(seed))
    return X, y, head


def retrained(X, y, k, removed, b, lam, weights=None):
    keep = np.setdiff1d(np.arange(len(y)), removed)
    w = None if weights is None else weights[keep]
    return train_head(LocalHeadData(X[keep], y[keep], k, weights=w), b, lam=lam).W


def test_budget_arithmetic_matches_method_notes() -> None:
    assert certificate_constant(1e-4) == pytest.approx(4.385, abs=5e-4)
    assert residual_budget(sigma=10, epsilon=1, delta=1e-4) == pytest.approx(2.28, abs=5e-3)


def test_training_reaches_gradient_tolerance() -> None:
    X, y, head = make_head(n=500, d=10, k=4, tol=1e-8)
    norms = head.gradient_norms()
    assert np.all(norms <= 1e-8 * 500)


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(80, 300),
    d=st.integers(2, 12),
    k=st.integers(2, 4),
    batch=st.integers(1, 8),
    seed=st.integers(0, 1000),
)
def test_newton_removal_matches_exact_retraining(n, d, k, batch, seed) -> None:
    lam = 0.05
    X, y, head = make_head(n=n, d=d, k=k, seed=seed, lam=lam, sigma=1.0, accounting="exact")
    W0 = head.W
    removed = np.random.default_rng(seed).choice(n, size=batch, replace=False)
    report = head.remove(removed.tolist())
    assert not report.retrained
    ref = retrained(X, y, k, removed, head.b, lam)
    dist = np.linalg.norm(head.W - ref) / np.linalg.norm(ref)
    before = np.linalg.norm(W0 - ref) / np.linalg.norm(ref)
    assert dist <= 1e-2
    assert dist <= 0.2 * before + 1e-9  # the step does most of the work
    agree = np.mean(head.predict(X) == predict_classes(X @ ref))
    assert agree >= 0.97


def test_sequential_single_removals_track_retraining() -> None:
    lam = 0.01
    X, y, head = make_head(
        n=400, d=10, k=3, seed=5, lam=lam, sigma=1.0, epsilon=1e6, accounting="guo"
    )
    ids = list(range(0, 40, 2))
    reports = head.remove_sequentially(ids)
    assert len(reports) == 20 and not any(r.retrained for r in reports)
    ref = retrained(X, y, 3, np.array(ids), head.b, lam)
    assert np.linalg.norm(head.W - ref) / np.linalg.norm(ref) < 1e-2


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(60, 250),
    d=st.integers(2, 10),
    k=st.integers(2, 4),
    batch=st.integers(1, 12),
    steps=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    lam=st.sampled_from([1e-3, 1e-2, 1e-1]),
)
def test_bounds_dominate_exact_residual(n, d, k, batch, steps, seed, lam) -> None:
    X, y, head = make_head(
        n=n, d=d, k=k, seed=seed, lam=lam, sigma=1.0, epsilon=1e6, accounting="guo"
    )
    rng = np.random.default_rng(seed)
    pool = rng.permutation(n)
    for s in range(steps):
        before = head.cumulative_residual
        ids = pool[s * batch : (s + 1) * batch]
        if len(ids) == 0 or head.data.retained_count - len(ids) < 2:
            break
        r = head.remove(ids.tolist())
        assert r.residual_exact is not None
        if r.retrained:  # the step was discarded; its residual no longer describes the head
            break
        assert r.residual_worst >= r.residual_data * (1 - 1e-9)
        # per step: the new error is bounded; the exact residual also carries earlier error
        assert r.residual_data + before >= r.residual_exact * (1 - 1e-9)
        assert r.cumulative >= r.residual_exact * (1 - 1e-9)


def test_retrain_exactly_when_budget_would_be_exceeded() -> None:
    X, y, head = make_head(n=300, d=6, k=2, seed=2, lam=1e-3, sigma=0.05, accounting="guo")
    budget = head.budget
    b_before = head.b
    seen_retrain = False
    for i in range(60):
        before = head.cumulative_residual
        r = head.remove([i])
        would = before + r.charged
        assert r.retrained == (would > budget)
        if r.retrained:
            seen_retrain = True
            assert r.cumulative == head.cumulative_residual < 1e-6
            assert not np.allclose(head.b, b_before)  # fresh perturbation
            b_before = head.b
        else:
            assert r.cumulative == pytest.approx(would) and r.cumulative <= budget
        assert r.epsilon_spent == pytest.approx(certificate_constant(1e-4) * r.cumulative / 0.05)
    assert seen_retrain and head.retrains >= 1


def test_reweighting_targets_the_new_objective() -> None:
    """Recomputed weights change every retained row's term; the step must follow them."""
    lam = 0.01
    X, y = planted_problem(250, 6, 3, seed=11)
    w0 = np.random.default_rng(0).uniform(0.5, 1.5, size=250)

    def reweigh(ids, feats, labels):
        return w0[ids] * (1.0 + 0.05 * np.tanh(feats[:, 0]))

    data = LocalHeadData(X, y, 3, weights=w0, reweigh=reweigh)
    head = CertifiedHead(
        data, HeadConfig(lam=lam, accounting="exact"), rng=np.random.default_rng(3)
    )
    removed = [4, 9, 17]
    r = head.remove(removed)
    new_w = data.weights
    keep = np.setdiff1d(np.arange(250), removed)
    assert not np.allclose(new_w[keep], w0[keep])
    ref = train_head(LocalHeadData(X[keep], y[keep], 3, weights=new_w[keep]), head.b, lam=lam).W
    assert np.linalg.norm(head.W - ref) / np.linalg.norm(ref) < 1e-3
    # the charged residual is the exact gradient norm of the *new* objective
    stats = LocalHeadData(X[keep], y[keep], 3, weights=new_w[keep]).statistics(
        StatisticsRequest(head.W)
    )
    exact = np.linalg.norm(objective_gradient(stats, head.W, head.b, lam=lam))
    assert r.charged == pytest.approx(exact, rel=1e-8)
    # ignoring the weight change would have left a much larger residual
    stale = LocalHeadData(X[keep], y[keep], 3, weights=w0[keep]).statistics(
        StatisticsRequest(head.W)
    )
    stale_res = np.linalg.norm(objective_gradient(stale, head.W, head.b, lam=lam))
    assert stale_res > 10 * r.charged


def test_incremental_hessian_equals_rebuild() -> None:
    X, y, head = make_head(n=200, d=5, k=2, seed=4, lam=0.01, accounting="guo")
    head.remove([1, 2, 3])
    head.remove([7])
    rebuilt = head.data.statistics(StatisticsRequest(head._W_ref, hessian=True))
    H = rebuilt.hessian + 0.01 * rebuilt.count * np.eye(5)
    np.testing.assert_allclose(head._solver.hessians, H, rtol=1e-10, atol=1e-10)


def test_rebuild_mode_and_refresh_track_retraining() -> None:
    for mode, refresh in (("incremental", 0), ("rebuild", 0), ("incremental", 2)):
        X, y, head = make_head(
            n=200,
            d=5,
            k=2,
            seed=9,
            lam=0.01,
            sigma=1.0,
            epsilon=1e6,
            hessian_mode=mode,
            refresh_every=refresh,
        )
        reports = head.remove_sequentially(range(6))
        assert not any(r.retrained for r in reports)
        ref = retrained(X, y, 2, np.arange(6), head.b, 0.01)
        assert np.linalg.norm(head.W - ref) / np.linalg.norm(ref) < 1e-3, mode


@pytest.mark.parametrize("pending", [0, 3, 40])
def test_solver_low_rank_downdates_match_direct_solve(pending) -> None:
    rng = np.random.default_rng(pending)
    A = rng.normal(size=(3, 20, 20))
    H = A @ A.transpose(0, 2, 1) + 20 * np.eye(20)
    solver = HessianSolver(H, max_pending_rows=16)
    target = H.copy()
    for _ in range(pending):  # one row at a time, as sequential removals do
        row = rng.normal(size=(1, 20)) * 0.3
        coef = rng.uniform(0.0, 0.25, size=(1, 3))
        solver.downdate_rows(row, coef, diagonal=0.01)
        target -= coef.T[:, :, None] * (row.T @ row)[None] + 0.01 * np.eye(20)
    dense = rng.normal(size=(3, 20, 20)) * 0.01
    dense = dense @ dense.transpose(0, 2, 1)
    if pending == 3:
        solver.downdate_dense(-dense)
        target += dense
    g = rng.normal(size=(20, 3))
    res = solver.solve(g)
    np.testing.assert_allclose(solver.hessians, target, atol=1e-10)
    for c in range(3):
        np.testing.assert_allclose(res.step[:, c], np.linalg.solve(target[c], g[:, c]), rtol=1e-9)
    assert res.residual_norms.max() < 1e-9
    # more pending rows than the limit fold into the base and force a new factorisation
    assert solver.factorisations == (1 if pending == 0 else 2)


@pytest.mark.parametrize("floor", [0.0, 20.0])
def test_solver_reports_the_true_residual_it_leaves(floor: float) -> None:
    """The residual the bounds charge (``||e||``) is that of the returned step, exactly.

    A loose ``rtol`` stops the solve after one Neumann step, leaving a visible residual; the
    reported norms must equal ``||g - H u||`` with the dense matrices, not a recurrence's
    estimate (zero, or ``mu ||z||``).
    """
    rng = np.random.default_rng(11)
    A = rng.normal(size=(3, 20, 20))
    H = A @ A.transpose(0, 2, 1) + 20 * np.eye(20)
    solver = HessianSolver(H, max_pending_rows=64, rtol=1e-2)
    target = H.copy()
    for _ in range(30):
        row = rng.normal(size=(1, 20)) * 0.3
        coef = rng.uniform(0.0, 0.25, size=(1, 3))
        solver.downdate_rows(row, coef, diagonal=0.2)
        target -= coef.T[:, :, None] * (row.T @ row)[None] + 0.2 * np.eye(20)
    g = rng.normal(size=(20, 3))
    res = solver.solve(g, floor=floor)
    true = np.array([np.linalg.norm(g[:, c] - target[c] @ res.step[:, c]) for c in range(3)])
    assert true.min() > 1e-8  # the loose tolerance left something to report
    np.testing.assert_allclose(res.residual_norms, true, rtol=1e-6)


def test_same_seed_same_result() -> None:
    outs = []
    for _ in range(2):
        X, y, head = make_head(n=150, d=5, k=3, seed=21)
        head.remove([3, 4])
        r = head.remove([10])
        outs.append((head.W, head.b, r.residual_data, r.cumulative))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    assert outs[0][2:] == outs[1][2:]


@pytest.mark.parametrize(
    ("ids", "error"),
    [
        ([], InputError),
        ([1, 1], InputError),
        ([10_000], UnknownSampleError),
        ([-1], UnknownSampleError),
        ([1.5], InputError),
        ([float("nan")], InputError),
        ([[1, 2]], InputError),
    ],
)
def test_bad_ids_leave_head_unchanged(ids, error) -> None:
    X, y, head = make_head(n=100, d=4, k=2, seed=1)
    W, version, kept = head.W, head.model_version, head.data.retained_count
    with pytest.raises(error):
        head.remove(ids)
    np.testing.assert_array_equal(head.W, W)
    assert head.model_version == version and head.data.retained_count == kept


def test_already_removed_id_is_unknown() -> None:
    X, y, head = make_head(n=100, d=4, k=2, seed=1)
    head.remove([5])
    W = head.W
    with pytest.raises(UnknownSampleError, match="1 sample id"):
        head.remove([5, 6])
    np.testing.assert_array_equal(head.W, W)
    assert 6 in head.data.retained_ids


def test_bad_rows_rejected() -> None:
    X, y = planted_problem(20, 3, 2, seed=0)
    with pytest.raises(InputError, match="norm"):
        LocalHeadData(X * 3, y, 2)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(InputError, match="non-finite"):
        LocalHeadData(Xn, y, 2)
    with pytest.raises(InputError):
        LocalHeadData(X, y[:5], 2)


def test_removing_every_row_resets_the_head_to_zero() -> None:
    X, y, head = make_head(n=40, d=3, k=2, seed=0, lam=0.1)
    head.remove(list(range(30)))
    r = head.remove(list(range(30, 40)))
    assert r.retrained and r.retrain_reason == "empty" and r.retained == 0
    assert np.all(head.W == 0.0) and head.data.retained_count == 0
    with pytest.raises(UnknownSampleError):
        head.remove([0])


@pytest.mark.parametrize("accounting", ["guo", "worst", "exact"])
def test_epsilon_spent_is_monotone_between_retrains(accounting) -> None:
    """The charge since the last retrain never goes down (exact: the running maximum); under
    anchored it drops at an anchor (tests/test_certificate_tight.py)."""
    X, y, head = make_head(n=300, d=6, k=3, seed=8, lam=1e-2, sigma=1.0, accounting=accounting)
    last = head.epsilon_spent
    for i in range(0, 60, 3):
        r = head.remove([i, i + 1, i + 2])
        if r.retrained:
            last = r.epsilon_spent
            continue
        assert r.epsilon_spent >= last and r.accounting == accounting and r.delta == 1e-4
        assert r.budget_used_ratio <= 1.0
        last = r.epsilon_spent
        if accounting == "exact":
            assert r.cumulative >= r.residual_exact and r.charged == r.residual_exact


def test_charge_per_accounting_mode() -> None:
    from simulator.head.accounting import anchor, charge
    from simulator.head.certificate import StepResiduals

    def residuals(exact: float | None) -> StepResiduals:
        return StepResiduals(worst=5.0, data=2.0, tight=0.25, exact=exact)

    assert charge("guo", previous=1.0, residuals=residuals(0.5)).cumulative == 3.0
    assert charge("worst", previous=1.0, residuals=residuals(0.5)).cumulative == 6.0
    assert charge("anchored", previous=1.0, residuals=residuals(None)).cumulative == 1.25
    up = charge("exact", previous=1.0, residuals=residuals(1.5))
    down = charge("exact", previous=1.0, residuals=residuals(0.5))
    assert (up.charged, up.cumulative) == (1.5, 1.5)
    assert (down.charged, down.cumulative) == (0.5, 1.0)  # the charge stays monotone
    assert (anchor(residuals(0.5)).charged, anchor(residuals(0.5)).cumulative) == (0.5, 0.5)
    with pytest.raises(InputError):
        charge("exact", previous=0.0, residuals=residuals(None))
    with pytest.raises(InputError):
        anchor(residuals(None))


def test_guo_accounting_needs_no_exact_residual() -> None:
    """Under guo accounting with report_exact off no gradient round is made after the step."""
    X, y, head = make_head(
        n=200, d=5, k=3, seed=2, lam=1e-2, sigma=1.0, report_exact=False, accounting="guo"
    )
    r = head.remove([4, 5])
    assert r.residual_exact is None and "exact" not in r.timings
    assert r.charged == r.residual_data


def test_anchored_accounting_charges_the_tight_bound_without_a_pass() -> None:
    """The default (anchored) with report_exact off and room in the budget: no gradient round,
    the tight bound is charged, and it is below Guo et al.'s data-dependent bound."""
    X, y, head = make_head(n=200, d=5, k=3, seed=2, lam=1e-2, sigma=1.0, report_exact=False)
    assert head.config.accounting == "anchored"
    r = head.remove([4, 5])
    assert r.residual_exact is None and "exact" not in r.timings and not r.anchored
    assert r.charged == r.residual_tight < r.residual_data
