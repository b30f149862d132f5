"""Dependence between feature columns under sample weights: the estimators and their gradients.

Rows ``u_i`` of a lifted matrix ``U`` (n x kq, :meth:`FourierLift.apply`) stack ``q`` random
Fourier functions of each of ``k`` feature columns (blocks of ``q`` columns). Every estimator
below is a weighted covariance ``C(w)`` (kq x kq) of which only the off-diagonal blocks count:

    f(w) = sum_{a < b} || C_ab(w) ||_F^2 = 1/2 || M o C(w) ||_F^2,

where ``M`` masks out the q x q diagonal blocks (``1/2`` because ``C`` is symmetric). With
``G = M o C`` every gradient follows from ``df = <G, dC>``. Two estimators:

* ``paper``: DecoRemoval's weighted partial cross-covariance (``decoremoval.tex``, Sec. 3.2,
  the equation for ``Sigma_hat_{AB;w}``), the plain covariance of the re-weighted rows
  ``v_i = w_i u_i``::

      C(w) = 1/(n-1) sum_i (v_i - vbar)(v_i - vbar)^T,   vbar = (1/n) sum_j v_j,
      df/dw_i = 2/(n-1) * u_i . (G (v_i - vbar)).

  It is quartic in ``w``; because ``v_i`` scales with ``w_i``, it also grows with the spread of
  the weights, which keeps them from collapsing onto a subgroup.
* ``stablenet``: the weighted covariance of StableNet's reference code (Zhang et al., CVPR
  2021), for weights summing to ``n``::

      C(w) = (1/n) sum_i w_i u_i u_i^T - m m^T,          m = (1/n) sum_i w_i u_i,
      df/dw_i = (1/n) [(u_i - m)^T G (u_i - m) - m^T G m].

  Moving the whole mass onto one class removes the between-class part of the dependence; on
  well-separated classes that part dominates, and the weights collapse (``docs/decorrelation.md``).

:func:`grouped_dependence` sums an estimator over groups of rows (the ``class_conditional``
objective: the paper's estimator within each class).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Estimator = Literal["paper", "stablenet"]


def _mask_diagonal_blocks(C: FloatArray, block: int) -> FloatArray:
    """``M o C`` in place: zero the q x q diagonal blocks (dependence *within* a column)."""
    P = C.shape[0]
    if block < 1 or P % block or P // block < 2:
        raise InputError(f"U has {P} columns, not at least 2 blocks of {block}")
    k = P // block
    C.reshape(k, block, k, block)[np.arange(k), :, np.arange(k), :] = 0.0
    return C


def _stablenet_terms(U: FloatArray, w: FloatArray, block: int) -> tuple[FloatArray, FloatArray]:
    """``(G, m)`` of the StableNet estimator (module docstring)."""
    n = U.shape[0]
    m = U.T @ w / n
    Uc = U - m
    # C = (1/n) sum w_i u_i u_i^T - m m^T, written in centred form for accuracy.
    C = (Uc * w[:, None]).T @ Uc / n + (1.0 - w.sum() / n) * np.outer(m, m)
    return _mask_diagonal_blocks(C, block), m


def _paper_terms(U: FloatArray, w: FloatArray, block: int) -> tuple[FloatArray, FloatArray]:
    """``(G, Vc)`` of the paper's estimator: ``Vc = w o U - vbar`` (module docstring)."""
    n = U.shape[0]
    if n < 2:
        raise InputError("the paper's covariance needs at least 2 rows")
    Vc = U * w[:, None]
    Vc -= Vc.mean(axis=0)
    C = Vc.T @ Vc / (n - 1)
    return _mask_diagonal_blocks(C, block), Vc


def _value(G: FloatArray) -> float:
    return 0.5 * float(np.sum(G * G))


def estimator_dependence(
    U: FloatArray, w: FloatArray, *, block: int, estimator: Estimator
) -> float:
    """``f(w)`` of one estimator on all rows of ``U`` (module docstring)."""
    terms = _paper_terms if estimator == "paper" else _stablenet_terms
    G, _ = terms(U, w, block)
    return _value(G)


def estimator_gradient(
    U: FloatArray, w: FloatArray, *, block: int, estimator: Estimator
) -> FloatArray:
    """``df/dw`` (n,) of one estimator (module docstring)."""
    n = U.shape[0]
    if estimator == "paper":
        G, Vc = _paper_terms(U, w, block)
        out: FloatArray = (2.0 / (n - 1)) * np.einsum("ij,ij->i", Vc @ G, U)
        return out
    G, m = _stablenet_terms(U, w, block)
    Uc = U - m
    grad: FloatArray = (np.einsum("ij,ij->i", Uc @ G, Uc) - m @ G @ m) / n
    return grad


def grouped_dependence(
    U: FloatArray, w: FloatArray, groups: IntArray, *, block: int, estimator: Estimator
) -> float:
    """``sum_g f(w_g)`` over the groups of rows with at least 2 rows (smaller ones: 0)."""
    return float(
        sum(
            estimator_dependence(U[rows], w[rows], block=block, estimator=estimator)
            for rows in group_rows(groups)
        )
    )


def grouped_gradient(
    U: FloatArray, w: FloatArray, groups: IntArray, *, block: int, estimator: Estimator
) -> FloatArray:
    """Gradient of :func:`grouped_dependence` (rows of groups with < 2 rows get 0)."""
    out = np.zeros(U.shape[0])
    for rows in group_rows(groups):
        out[rows] = estimator_gradient(U[rows], w[rows], block=block, estimator=estimator)
    return out


def group_rows(groups: IntArray) -> list[IntArray]:
    """Row indices of each group with at least 2 rows, in increasing group order."""
    out: list[IntArray] = []
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g).astype(np.int64)
        if rows.size >= 2:
            out.append(rows)
    return out
