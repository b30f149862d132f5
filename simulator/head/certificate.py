"""Certificate arithmetic of certified removal (Guo, Goldstein, Hannun, van der Maaten, ICML 2020).

Loss perturbation ``b ~ N(0, sigma^2 I)`` makes a removal (epsilon, delta)-certified when the
gradient residual ``r = ||grad L_b(w-; D')||`` satisfies ``r <= eps'`` with
``sigma = c eps' / epsilon`` and ``c = sqrt(2 ln(1.5 / delta))`` (Guo et al., Theorem 3).
With sigma fixed the residual budget is therefore ``eps' = sigma * epsilon / c`` and a residual
``beta`` spends ``epsilon(beta) = c * beta / sigma``.

K one-vs-rest heads are separable, so together they are one objective on the stacked d*K
parameter with one Gaussian ``b`` in R^{dK}; the theorem applies once, with the residual the
L2 norm of the stacked per-class residuals (:func:`stacked_norm`; never more than their sum)
and one delta (``method.md`` section 1). A per-class bound ``||r_k|| <= B_k`` gives
``||r|| <= sqrt(sum_k B_k^2)``.

The bounds on the residual of one Newton step ``u = H_ref^{-1} g`` taken from ``w`` with a
Hessian ``H_ref`` evaluated at a reference point ``w_ref`` (``w_ref = w`` for the textbook
step) follow from the mean-value form ``r = (H_ref - Hbar) u + e``, where ``Hbar`` averages the
Hessian on the segment from ``w`` to ``w - u`` and ``e = g - H_ref u`` is the solver's residual.
With ``|l''(s) - l''(t)| <= gamma |s - t|`` (gamma = 1/4 for the logistic loss), rows of norm at
most 1 and sample weights at most ``a_max``:

* data dependent (Guo et al., Corollary 1, generalised to ``w_ref != w`` and weights)::

      r <= gamma a_max ||X'||_2 (||w_ref - w|| + ||u||) ||X' u|| + ||e||

* worst case (Guo et al., Theorem 1: ``4 gamma C^2 / (lam^2 (n - 1))`` for one removal)::

      r <= gamma a_max n' (||w_ref - w|| + U) U + ||e||,   U = (G + ||e||) / (lam n')

  where ``G`` bounds ``||g||`` from the batch size, ``C``, ``||w||`` and the weight changes only,
  and ``U`` bounds the step ``||u||``: ``u = H_ref^{-1} (g - e)`` and ``H_ref >= lam n' I``.

Both keep Guo et al.'s constants (``gamma = 1/4``, the whole step ``||u||`` beside the gap) so
that the ``guo`` and ``worst`` accounting modes reproduce their paper. The tight bound charged
by ``anchored`` accounting (``docs/certified-head.md``, "The tight bound", with its proof) uses
the smallest constant ``gamma* = max |l'''| = 1/(6 sqrt 3)``, the factor 1/2 that the integral
over the step gives, and projections through the Gram matrix ``X'^T X'`` of the retained rows
(Cauchy-Schwarz over the rows) instead of spectral norms::

      r <= gamma* a_max ||X' u|| (||X' (w_ref - w)|| + ||X' u|| / 2) + ||e||

It is never larger than the data-dependent bound (``gamma* < gamma``, ``||X' v|| <=
||X'||_2 ||v||``) nor the worst case (``||X' v|| <= sqrt(n') ||v||``, ``||u|| <= U``).
In a federation ``a_max`` is the largest weight over every client's retained rows.

The projections ``||X' v||`` come from the Gram matrix kept by downdates, in floating point:
:func:`gram_rounding` bounds that computation's error, and the projections charged are
``sqrt(max(fl(v^T G v) + gram_rounding * ||v||^2, 0))``, upper bounds on the exact ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError

FloatArray = NDArray[np.float64]

#: Lipschitz constant of the logistic loss's second derivative used by Guo et al.
GAMMA_LOGISTIC = 0.25
#: The smallest such constant: ``max_s |l'''(s)| = 1 / (6 sqrt 3)``,
#: reached where ``sigmoid(s) = (3 +- sqrt 3) / 6`` (the tight bound's ``gamma*``).
GAMMA_LOGISTIC_TIGHT = 1.0 / (6.0 * math.sqrt(3.0))
#: Bound on the per-sample loss-gradient norm for logistic loss with ``||x|| <= 1``.
C_LOGISTIC = 1.0
#: Unit roundoff of float64: every correctly rounded operation has relative error at most this.
UNIT_ROUNDOFF = 2.0**-53
#: Rows are accepted up to this norm (``LocalHeadData``): 1 up to the clipping's rounding.
ROW_NORM_LIMIT = 1.0 + 1e-9


def certificate_constant(delta: float) -> float:
    """``c = sqrt(2 ln(1.5 / delta))`` (Guo et al., Theorem 3)."""
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must lie in (0, 1), got {delta}", "head.delta")
    return math.sqrt(2.0 * math.log(1.5 / delta))


def residual_budget(*, sigma: float, epsilon: float, delta: float) -> float:
    """Residual budget ``eps' = sigma * epsilon / c``: sigma=10, eps=1, delta=1e-4 gives 2.28."""
    if sigma <= 0 or epsilon <= 0:
        raise ConfigError(f"sigma and epsilon must be positive, got {sigma}, {epsilon}", "head")
    return sigma * epsilon / certificate_constant(delta)


def epsilon_spent(residual: float, *, sigma: float, delta: float) -> float:
    """Privacy spent by an accumulated residual ``beta``: ``c * beta / sigma``."""
    return certificate_constant(delta) * residual / sigma


def rounding_gamma(k: int) -> float:
    """``gamma_k = k u / (1 - k u)`` (Higham 2002, Lemma 3.1), infinite once ``k u >= 1/2``.

    ``|prod_{i <= k} (1 + delta_i)^(+-1) - 1| <= gamma_k`` for ``|delta_i| <= u``: the relative
    error of a sum or dot product of ``k`` terms is at most ``gamma_k`` times the sum of the
    absolute values, in any order of evaluation (Higham, Section 3.1); ``gamma_a + gamma_b +
    gamma_a gamma_b <= gamma_{a+b}``.
    """
    ku = k * UNIT_ROUNDOFF
    return math.inf if ku >= 0.5 else ku / (1.0 - ku)


def gram_rounding(rows: int, dim: int) -> float:
    """``c`` with ``|fl(v^T G v) - ||X' v||^2| <= c ||v||^2`` for the Gram quadratic form.

    ``G = X'^T X'`` is kept as a base ``B^`` (the Gram matrix of the ``N = rows`` rows it was
    summed from at the last training from scratch, with the rows removed since then folded
    out by subtraction) and ``p`` pending removed rows ``R`` (exact copies), and
    ``||X' v||^2`` is computed as ``fl(fl(v^T fl(B^ v)) - fl(||fl(R v)||^2))``
    (:meth:`simulator.head.gram.GramMatrix.quadratic`). With ``S = sum_{i <= N} |x_i| |x_i|^T``
    (absolute values entrywise) and ``||x_i|| <= rho`` (:data:`ROW_NORM_LIMIT`):

    1. *the base*: summing ``N`` products (any order, over any clients) errs by at most
       ``gamma_N S`` entrywise; a fold of ``P`` rows by ``gamma_P |R|^T |R| + u |B^|``, and
       the folded rows are disjoint, so ``|B^ - B| <= gamma_{4N} S``, ``B`` the exact Gram
       matrix of the rows in the base (``B - R^T R = G``) and ``|B^| <= (1 + gamma_{4N}) S``;
    2. *the form*: ``fl(v^T fl(B^ v))`` errs by ``gamma_{2d} |v|^T |B^| |v|`` (a product
       and a dot product of ``d`` terms), ``fl(||fl(R v)||^2)`` by
       ``gamma_{2d+p} || |R| |v| ||^2`` and the subtraction by ``u`` times both;
    3. every term is at most a multiple of ``|v|^T S |v| = sum_i (|x_i| . |v|)^2 <=
       rho^2 N ||v||^2`` (Cauchy-Schwarz per row), and ``p <= N``.

    Adding up with ``gamma_a + gamma_b + gamma_a gamma_b <= gamma_{a+b}``:
    ``|error| <= gamma_{5N + 4d + 2} rho^2 N ||v||^2``; the allowance takes
    ``gamma_{6N + 4d + 4}``, whose margin also covers the rounding of the computed ``||v||``.
    It needs no pass over the rows: ``O(1)`` here, and ``||v||`` is computed with the
    projections. With ``N = 60,000``
    rows of ``d = 1,024`` it is ``2.4e-6 ||v||^2``; it matters where ``||X' v||`` is many
    orders of magnitude below ``sqrt(N) ||v||`` (rank-deficient rows and a tiny ``lam``,
    where the step ``u`` is almost orthogonal to every row).

    Parameters
    ----------
    rows : ``N``, the rows summed into the base at the last training from scratch.
    dim : ``d``.
    """
    if rows <= 0:
        return 0.0
    return rounding_gamma(6 * rows + 4 * dim + 4) * ROW_NORM_LIMIT**2 * rows


def stacked_norm(per_class: FloatArray) -> float:
    """``sqrt(sum_k x_k^2)``: the norm of the stacked residual from per-class norms or bounds."""
    return float(np.linalg.norm(np.asarray(per_class, dtype=np.float64)))


@dataclass(frozen=True)
class StepTerms:
    """What both bounds of one Newton step share (module docstring), per class (K,).

    Attributes
    ----------
    reference_gaps : ``||w_ref,k - w_k||``, the distance from the Hessian's reference point.
    solve_residuals : ``||e_k|| = ||g_k - H_k u_k||``, the solver's own residual.
    max_weight : ``a_max``, the largest sample weight on the retained rows.
    gamma : Lipschitz constant of the loss's second derivative.
    """

    reference_gaps: FloatArray
    solve_residuals: FloatArray
    max_weight: float
    gamma: float = GAMMA_LOGISTIC


@dataclass(frozen=True)
class StepResiduals:
    """One removal step's residual, bounded and measured (stacked norms, ``certificate.py``).

    ``worst`` is the data-independent bound (Guo et al. Theorem 1), ``data`` the data-dependent
    one (Corollary 1), ``tight`` the tight bound (module docstring, third formula), ``exact``
    the exact residual of the head after the step (None when it was not computed).
    """

    worst: float
    data: float
    tight: float
    exact: float | None


def data_dependent_bound(
    terms: StepTerms,
    *,
    spectral_norm: float,
    step_norms: FloatArray,
    projected_norms: FloatArray,
) -> FloatArray:
    """Per-class data-dependent residual bounds (K,) (module docstring, first formula).

    ``gamma a_max ||X'||_2 (||w_ref - w|| + ||u||) ||X' u|| + ||e||`` (Guo et al. Corollary 1,
    generalised to ``w_ref != w`` and weights).

    Parameters
    ----------
    terms : the reference gaps, solve residuals, ``a_max`` and gamma.
    spectral_norm : an upper bound on ``||X'||_2`` of the retained rows.
    step_norms : ``||u_k||``.
    projected_norms : ``||X' u_k||``.
    """
    return (
        terms.gamma
        * terms.max_weight
        * spectral_norm
        * (terms.reference_gaps + step_norms)
        * projected_norms
        + terms.solve_residuals
    )


def tight_bound(
    terms: StepTerms, *, projected_gaps: FloatArray, projected_norms: FloatArray
) -> FloatArray:
    """Per-class tight residual bounds (K,) (module docstring, third formula).

    ``gamma* a_max ||X' u|| (||X' (w_ref - w)|| + ||X' u|| / 2) + ||e||``: the mean-value
    remainder bounded row by row, then Cauchy-Schwarz over the rows (proof in
    ``docs/certified-head.md``). ``terms.gamma`` must be at least the largest third derivative
    of the loss (:data:`GAMMA_LOGISTIC_TIGHT`) and the rows must have norm at most 1.

    Parameters
    ----------
    terms : the solve residuals, ``a_max`` (over every client's retained rows) and gamma.
    projected_gaps : ``||X' (w_ref,k - w_k)||``.
    projected_norms : ``||X' u_k||``.
    """
    return (
        terms.gamma * terms.max_weight * projected_norms * (projected_gaps + 0.5 * projected_norms)
        + terms.solve_residuals
    )


def worst_case_bound(
    terms: StepTerms, *, gradient_bounds: FloatArray, retained: int, lam: float
) -> FloatArray:
    """Per-class worst-case residual bounds (K,) (module docstring, second formula).

    ``gamma a_max n' (||w_ref - w|| + U) U + ||e||`` with ``U = (G + ||e||) / (lam n')`` (Guo
    et al. Theorem 1, with the solver's residual). ``gradient_bounds`` (``G``) bounds
    ``||g_k||`` without looking at the rows' values, e.g. ``m (a_max C + lam ||w_k||) + C
    ||delta a||_1`` for a batch of m removals. ``U`` bounds the step actually taken: the
    solver returns ``u = H^{-1} (g - e)`` with ``e = g - H u``, and ``H >= lam n' I``, so
    ``||u|| <= (||g|| + ||e||) / (lam n')``; a solve that overshoots (``||u||`` above
    ``||H^{-1} g||``) is covered too.
    """
    if retained < 1:
        return np.full_like(gradient_bounds, np.inf)
    u = (gradient_bounds + terms.solve_residuals) / (lam * retained)
    return (
        terms.gamma * terms.max_weight * retained * (terms.reference_gaps + u) * u
        + terms.solve_residuals
    )


def removal_gradient_bound(
    *,
    batch: int,
    head_norms: FloatArray,
    lam: float,
    max_weight: float,
    weight_change_l1: float,
    c: float = C_LOGISTIC,
) -> FloatArray:
    """Data-free bound on ``||g_k||`` for removing ``batch`` rows and re-weighting the rest."""
    return batch * (max_weight * c + lam * head_norms) + c * weight_change_l1
