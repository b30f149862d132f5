"""The certificate's bounds hold, and are tight enough that weakening any term is caught.

Every charged bound must dominate the exact residual ``||grad L_b(W; D')||`` (Guo et al., ICML
2020). The generic hypothesis test draws re-weighted problems (weights changing between
removals, ``a_max`` > 1); the constructed cases below are where a bound is within a small
factor of the truth (one feature, every row alike, margins where the logistic curvature
changes fastest), so that a bound made smaller by dropping a term, the ``a_max`` factor or
part of ``gamma`` falls below the exact residual and the test fails.
``scripts/mutation-check`` applies such mutants to the bound code and reports survivors.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm
from support.heads import planted_problem

from simulator.errors import ConfigError
from simulator.head import CertifiedHead, HeadConfig, LocalHeadData, certificate_constant
from simulator.head.certificate import (
    GAMMA_LOGISTIC,
    StepTerms,
    removal_gradient_bound,
    stacked_norm,
    worst_case_bound,
)
from simulator.head.logistic import sigmoid


def test_gamma_is_a_lipschitz_constant_of_the_logistic_curvature() -> None:
    """``|l''(s) - l''(t)| <= gamma |s - t|`` needs ``gamma >= max |l'''| = 1/(6 sqrt 3)``."""
    s = np.linspace(-12.0, 12.0, 200_001)
    p = sigmoid(s)
    curvature = p * (1.0 - p)
    steepest = float(np.max(np.abs(np.diff(curvature) / np.diff(s))))
    assert steepest == pytest.approx(1.0 / (6.0 * np.sqrt(3.0)), rel=1e-4)
    assert steepest <= GAMMA_LOGISTIC


def one_feature_head(
    *,
    n: int = 400,
    positive_share: float = 0.79,
    weight: float = 1.0,
    lam: float = 1e-4,
    sigma: float = 1e-3,
    accounting: str = "guo",
    reweigh=None,
) -> tuple[CertifiedHead, np.ndarray]:
    """Every row is ``x = 1``; 79% of labels are 1, so the margin sits near ``logit(0.79)``,
    where ``l''`` changes fastest: the bounds are at most a few times the truth here."""
    X = np.ones((n, 1))
    positives = round(positive_share * n)
    y = np.r_[np.ones(positives, np.int64), np.zeros(n - positives, np.int64)]
    data = LocalHeadData(X, y, 2, weights=np.full(n, weight), reweigh=reweigh)
    config = HeadConfig(lam=lam, sigma=sigma, epsilon=1e9, accounting=accounting)  # type: ignore[arg-type]
    return CertifiedHead(data, config, rng=np.random.default_rng(0)), np.flatnonzero(y == 0)


def tightness(head: CertifiedHead, ids: np.ndarray) -> float:
    """Remove ``ids`` one at a time; check the charge covers the exact residual every time and
    return the largest ratio exact / charge (1 would be a bound that is exactly tight)."""
    ratio = 0.0
    for i in ids:
        r = head.remove([int(i)])
        assert not r.retrained and r.residual_exact is not None
        assert r.residual_worst >= r.residual_data * (1 - 1e-9)
        assert r.cumulative >= r.residual_exact * (1 - 1e-9), (r.cumulative, r.residual_exact)
        ratio = max(ratio, r.residual_exact / r.cumulative)
    return ratio


@pytest.mark.parametrize("weight", [1.0, 30.0])
def test_charge_covers_the_exact_residual_in_a_tight_case(weight: float) -> None:
    """Sequential removals move the head away from the Hessian's reference point, so the
    ``gamma * a_max * ||w_ref - w||`` term carries most of the error. The data bound is within
    3x of the truth: a 5x smaller ``gamma`` or a dropped ``a_max`` (weights of 30) fails."""
    head, negatives = one_feature_head(weight=weight)
    assert tightness(head, negatives[:40]) > 0.3  # weakening the bound 4x breaks the test


@pytest.mark.parametrize("weight", [1.0, 30.0])
def test_worst_case_covers_the_data_bound_in_a_tight_case(weight: float) -> None:
    """With a large lam the Hessian is ``lam n' I`` almost exactly and every row is alike, so
    the worst case (``||X'||_2 <= sqrt(n')``, ``||u|| <= G / (lam n')``) is within 3x of the
    data-dependent bound; with it the charge covers the exact residual too."""
    head, negatives = one_feature_head(weight=weight, lam=20.0, accounting="worst")
    ratio = 0.0
    for i in negatives[:30]:
        r = head.remove([int(i)])
        assert not r.retrained and r.residual_exact is not None
        assert r.residual_worst >= r.residual_data
        assert r.cumulative >= r.residual_exact
        ratio = max(ratio, r.residual_data / r.residual_worst)
    assert ratio > 0.3


def test_worst_case_under_exact_accounting_covers_the_known_gradient() -> None:
    """Under ``exact`` the Newton step also corrects the head's measured gradient (``carried``),
    so the worst case's ``G`` must include its norm. A head trained to a loose tolerance keeps a
    large gradient (norm ~116 here against a removal's ~1); the worst case must still cover the
    data-dependent bound of the step that corrects it (without the term it is ~1e4x smaller)."""
    n = 400
    X = np.ones((n, 1))
    y = np.r_[np.ones(316, np.int64), np.zeros(n - 316, np.int64)]
    # damped Newton stops where the loose tolerance lets it (lbfgs's polish would go on)
    config = HeadConfig(
        lam=20.0, sigma=1e-3, epsilon=1e9, accounting="exact", tol=1.0, cold_solver="newton"
    )
    head = CertifiedHead(LocalHeadData(X, y, 2), config, rng=np.random.default_rng(0))
    assert stacked_norm(head.gradient_norms()) > 50.0
    for i in np.flatnonzero(y == 0)[:5]:
        r = head.remove([int(i)])
        assert not r.retrained and r.residual_exact is not None
        assert r.residual_worst >= r.residual_data >= r.residual_exact


def test_worst_case_step_bound_covers_an_overshooting_solve() -> None:
    """``U`` must bound the step the solver returns, ``u = H^{-1} (g - e)``: with ``H >= lam n'
    I`` and ``||g|| <= G`` that is ``||u|| <= (G + ||e||) / (lam n')``, not ``G / (lam n')``. An
    explicit solve that overshoots (``u = 1.9 H^{-1} g``, relative residual 0.9, on the extreme
    matrix ``H = lam n' I``) is covered: the bound is at least ``gamma a_max n' (||w_ref - w|| +
    ||u||) ||u|| + ||e||``, what Theorem 1's chain bounds with ``||X'||_2, ||X' u|| / ||u|| <=
    sqrt(n')``: equal to it here, up to rounding (without the solver's residual in ``U`` it is
    1.4-1.8x too small)."""
    lam, n, a_max = 0.1, 200, 3.0
    g = np.random.default_rng(0).normal(size=(3, 2))
    H = lam * n * np.eye(3)
    u = 1.9 * np.linalg.solve(H, g)
    e = np.linalg.norm(g - H @ u, axis=0)
    gaps = np.array([0.5, 0.0])
    terms = StepTerms(reference_gaps=gaps, solve_residuals=e, max_weight=a_max)
    bound = worst_case_bound(terms, gradient_bounds=np.linalg.norm(g, axis=0), retained=n, lam=lam)
    step = np.linalg.norm(u, axis=0)
    assert np.all(bound >= (GAMMA_LOGISTIC * a_max * n * (gaps + step) * step + e) * (1 - 1e-12))


def test_worst_case_covers_the_data_bound_when_the_solve_overshoots() -> None:
    """An injected fault (the solver's factors are those of ``H / 1.5``, a tolerance of 0.9 keeps
    the step) makes every step 1.5x too long. With a large ``b`` the margins saturate, so the
    Hessian is ``lam n' I`` almost exactly and ``G`` is within a few percent of ``||g||``: the
    worst case, with the solver's residual in ``U``, still covers the data-dependent bound
    (which uses the step taken); without it, it fell below it from the first removal."""
    head, _ = one_feature_head(lam=1.0, sigma=4000.0, positive_share=0.05, accounting="worst")
    head._solver.rtol = 0.9
    head._solver._factors = head._solver._factors / np.sqrt(1.5)
    for i in np.flatnonzero(head.data.labels == 1)[:5]:
        r = head.remove([int(i)])
        assert not r.retrained and r.residual_exact is not None
        assert r.residual_worst >= r.residual_data * (1 - 1e-9), (r.residual_worst, r.residual_data)
        assert r.cumulative >= r.residual_exact


def test_solver_residual_is_charged() -> None:
    """A loose solve (an injected fault: the solver's factors are those of ``1.5 H``, and a
    tolerance of 0.9 lets it keep the step) leaves a residual ``||g - H u||`` of about a third
    of ``||g||``, which dominates the error: the data-dependent and worst-case bounds must add
    it (a bound that forgot it falls below the exact residual, or below the other bound).
    Since the solver takes a Neumann step after every Woodbury solve, a loose tolerance alone
    no longer leaves such a residual: the fault is needed."""
    head, negatives = one_feature_head(lam=2.0, positive_share=0.6)
    head._solver.rtol = 0.9
    head._solver._factors = head._solver._factors * np.sqrt(1.5)
    ratio = tightness(head, negatives[:10])
    assert ratio > 0.3


class ShrinkingWeights:
    """Weights that depend on the retained rows only: ``1 + 9 * (share of positives kept)``
    for positives, 1 for the rest; every removal of a positive row changes them all."""

    def __call__(self, ids: np.ndarray, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
        share = float(np.mean(labels == 1))
        return np.where(labels == 1, 1.0 + 9.0 * share, 1.0)


def test_reweighting_between_removals_is_charged() -> None:
    """Weights that change for every retained row after each removal (as decorrelation
    weights refitted on ``D'`` do): the step targets the new objective and the bounds carry
    the ``||delta a||_1`` and ``a_max`` terms."""
    head, _ = one_feature_head(reweigh=ShrinkingWeights(), lam=1e-3)
    positives = np.flatnonzero(head.data.labels == 1)
    tightness(head, positives[:15])


def gradient_of_step(head: CertifiedHead, ids: list[int]) -> tuple[float, np.ndarray]:
    """``||g||`` of the step a removal takes (per class) and the data-free bound on it."""
    W, W_ref = head.W, head._W_ref
    delta = head.data.delete(ids, W=W, W_ref=W_ref)
    g = -delta.removed_gradient - head.config.lam * len(ids) * W
    if delta.reweighted is not None:
        g = g + delta.reweighted.gradient
    bound = removal_gradient_bound(
        batch=len(ids),
        head_norms=np.linalg.norm(W, axis=0),
        lam=head.config.lam,
        max_weight=delta.max_weight,
        weight_change_l1=delta.weight_change_l1,
    )
    return bound, np.linalg.norm(g, axis=0)


@pytest.mark.parametrize(
    ("lam", "sigma", "reweigh", "weight", "batch"),
    [
        (1e-4, 1e-3, ShrinkingWeights(), 1.0, 1),
        (1e-4, 1e-3, None, 1.0, 1),
        (1.0, 4000.0, None, 1.0, 1),
        (1e-4, 1e-3, None, 20.0, 1),
        (1e-4, 1e-3, None, 1.0, 8),
    ],
    ids=["weights-change", "fixed-weights", "large-b", "large-weights", "batch"],
)
def test_gradient_bound_covers_the_step_gradient(lam, sigma, reweigh, weight, batch) -> None:
    """``G = m (a_max C + lam ||w||) + C ||delta a||_1 >= ||g||``, each term needed somewhere:
    re-weighting makes the last one dominate, a large perturbation ``b`` (which pushes ``w``
    far from 0) the ``lam ||w||`` term, heavy rows ``a_max``, a batch the factor ``m``.
    """
    head, _ = one_feature_head(
        lam=lam, sigma=sigma, reweigh=reweigh, weight=weight, positive_share=0.05
    )
    positives = np.flatnonzero(head.data.labels == 1)
    bound, actual = gradient_of_step(head, [int(i) for i in positives[:batch]])
    assert np.all(bound >= actual * (1 - 1e-12))
    assert np.all(bound <= 4.0 * actual)  # tight enough that a dropped term is visible


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(40, 200),
    d=st.integers(1, 8),
    k=st.integers(2, 4),
    batch=st.integers(1, 10),
    steps=st.integers(1, 4),
    a_max=st.floats(1.0, 50.0),
    reweigh=st.booleans(),
    seed=st.integers(0, 10_000),
    lam=st.sampled_from([1e-4, 1e-3, 1e-2, 1e-1]),
)
def test_bounds_dominate_exact_residual_with_reweighting(
    n, d, k, batch, steps, a_max, reweigh, seed, lam
) -> None:
    """Random problems, weights in [1, a_max] that change between removals: per step both
    bounds plus the charge so far cover the exact residual, and the worst case covers the
    data-dependent bound."""
    X, y = planted_problem(n, d, k, seed=seed)
    rng = np.random.default_rng(seed)
    base = rng.uniform(1.0, a_max, size=n)

    def drift(ids: np.ndarray, features: np.ndarray, labels: np.ndarray) -> np.ndarray:
        # a function of the retained rows alone, different after every removal
        return base[ids] * (1.0 + 0.5 * np.tanh(features[:, 0] * ids.size / n))

    data = LocalHeadData(X, y, k, weights=base, reweigh=drift if reweigh else None)
    head = CertifiedHead(
        data,
        HeadConfig(lam=lam, sigma=1.0, epsilon=1e9, accounting="guo"),
        rng=np.random.default_rng(seed),
    )
    pool = rng.permutation(n)
    for s in range(steps):
        ids = pool[s * batch : (s + 1) * batch]
        if len(ids) == 0 or head.data.retained_count - len(ids) < 2:
            break
        before = head.cumulative_residual
        r = head.remove(ids.tolist())
        assert r.residual_exact is not None
        if r.retrained:  # even 1e9 can be spent at lam = 1e-4 (seed 1): the step was discarded
            break
        assert r.residual_worst >= r.residual_data * (1 - 1e-9)
        assert before + r.residual_data >= r.residual_exact * (1 - 1e-9)
        assert r.cumulative >= r.residual_exact * (1 - 1e-9)


def test_one_mechanism_on_the_stacked_head() -> None:
    """K one-vs-rest heads with one Gaussian b in R^{dK} are one mechanism: its privacy loss is
    the sum of the heads' losses and depends on the stacked residual only, and at a stacked
    residual equal to the budget its tail beyond epsilon stays below one delta. Charging the
    stacked norm is never more than the old sum over heads."""
    epsilon, delta, sigma = 1.0, 1e-4, 10.0
    c = certificate_constant(delta)
    budget = sigma * epsilon / c
    rng = np.random.default_rng(0)
    per_head = rng.uniform(0.0, 1.0, size=10)
    per_head *= budget / stacked_norm(per_head)  # stacked residual exactly at the budget
    r = rng.normal(size=(32, 10))
    r *= per_head / np.linalg.norm(r, axis=0)
    b = rng.normal(0.0, sigma, size=(32, 10))
    joint = (np.sum((b + r) ** 2) - np.sum(b**2)) / (2 * sigma**2)
    heads = [
        (np.sum((b[:, j] + r[:, j]) ** 2) - np.sum(b[:, j] ** 2)) / (2 * sigma**2)
        for j in range(10)
    ]
    assert joint == pytest.approx(sum(heads))
    # the loss is N(||r||^2 / (2 sigma^2), ||r||^2 / sigma^2): its tail beyond epsilon
    s = budget / sigma
    assert norm.sf(epsilon, loc=s**2 / 2, scale=s) <= delta
    assert stacked_norm(per_head) <= per_head.sum()


def test_multiclass_head_charges_the_stacked_norm() -> None:
    X, y = planted_problem(300, 6, 4, seed=3)
    head = CertifiedHead(
        LocalHeadData(X, y, 4), HeadConfig(lam=1e-2, sigma=1.0), rng=np.random.default_rng(1)
    )
    r = head.remove([1, 2, 3])
    assert r.residual_exact == pytest.approx(stacked_norm(head.gradient_norms()))
    assert r.residual_exact == pytest.approx(float(np.linalg.norm(head._gradient_exact(head.W))))


def test_binary_task_is_one_head() -> None:
    X, y = planted_problem(200, 5, 2, seed=4)
    head = CertifiedHead(LocalHeadData(X, y, 2), HeadConfig(lam=1e-2), rng=np.random.default_rng(0))
    assert head.W.shape == (5, 1) and head.b.shape == (5, 1)
    scores = X @ head.W
    np.testing.assert_array_equal(head.predict(X), (scores[:, 0] > 0).astype(np.int64))
    assert np.mean(head.predict(X) == y) > 0.8


def test_training_residual_is_charged() -> None:
    """A head trained to a loose tolerance starts with a residual of its own: the charge must
    start there (the first removal's exact residual contains it)."""
    head, negatives = one_feature_head(lam=1e-3)
    loose = HeadConfig(lam=1e-3, sigma=1e-3, epsilon=1e9, tol=0.05, cold_solver="newton")
    head = CertifiedHead(head.data, loose, rng=np.random.default_rng(0))
    assert head.cumulative_residual > 1.0  # Newton stopped early: a real training residual
    r = head.remove([int(negatives[0])])
    assert r.cumulative >= r.residual_exact


def test_a_trained_head_is_released_within_the_budget() -> None:
    """A budget below the training tolerance (``tol * n = 20`` here, budget 0.011): training
    stops with a residual of 11.3, and Newton steps on the trained Hessian bring it within the
    budget before the head is released; so do the retrains that follow. Without the steps the
    head was released charged about 1,000x its budget."""
    head, negatives = one_feature_head(lam=1e-3)
    small = HeadConfig(  # damped Newton: training stops at the loose tolerance
        lam=1e-3, sigma=1e-3, epsilon=50.0, tol=0.05, accounting="guo", cold_solver="newton"
    )
    head = CertifiedHead(head.data, small, rng=np.random.default_rng(0))
    assert head.budget < 0.012
    assert head.cumulative_residual <= head.budget
    assert head.cumulative_residual == head.exact_residual()  # the measured residual is charged
    retrains = 0
    for i in negatives[:10]:
        r = head.remove([int(i)])
        retrains += r.retrained
        assert head.exact_residual() <= r.cumulative <= r.budget
    assert retrains > 0  # the retrained heads were brought within the budget too


def test_a_budget_below_the_gradients_rounding_is_refused() -> None:
    """``sigma = 1e-15`` makes the budget 2.3e-16, below the floating-point floor of the
    gradient of 400 rows (about 1e-14): no head can be certified, and set-up says which settings
    to change instead of releasing a head charged above its budget."""
    head, _ = one_feature_head(lam=1e-3)
    tiny = HeadConfig(lam=1e-3, sigma=1e-15, accounting="guo")
    with pytest.raises(ConfigError, match=r"raise head\.sigma or head\.epsilon") as refused:
        CertifiedHead(head.data, tiny, rng=np.random.default_rng(0))
    assert refused.value.location == "head.sigma"
