"""Anderson mixing of correction steps: the best combination of the measured iterates.

The correction steps of the certified head (``certified.py``, ``_correct``) iterate
``w <- w - P^{-1} grad L(w)`` with ``P`` the reference point's Hessian: a preconditioned
fixed-point iteration that converges linearly, slowly where the reference point's curvature
has gone stale (a class purge: the purged class's residual fell only about 3x per step on the
benchmark workload). Every iterate's exact gradient is measured anyway, so the last ``m``
pairs ``(w_j, g_j)`` give, per class, the combination whose *linearised* gradient is smallest
(Anderson 1965; Walker and Ni 2011, "Anderson acceleration for fixed-point iterations", the
type-II form):

    gamma_k = argmin_gamma || g_k - dG_k gamma ||,   dG_k = [g_k^(i) - g_k^(i-1), ...],
    w_hat_k = w_k - dW_k gamma_k,   g_hat_k = g_k - dG_k gamma_k,

and the next iterate is ``w_hat - P^{-1} g_hat``. On a quadratic loss and with every iterate kept
this is essentially GMRES with preconditioner ``P`` (Walker and Ni 2011; here the last
three are kept, a truncated form); it only proposes: the head released is always one whose exact
gradient was measured, so the mixing changes how fast the residual falls, never what is
charged. Each class is mixed on its own (the gradient of column ``k`` depends on ``w_k`` only).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.head.backend import Array, Backend

#: Iterate pairs kept for the mixing (differences: one fewer).
DEPTH = 3
#: Secant pairs mixed at most: this correction's newest first, then earlier removals'.
PAIRS = 4


#: A secant pair ``(dW, dG)`` (each d x K): a step between two heads and the change of the
#: exact gradient along it.
Pair = tuple[Array, Array]


def differences(heads: Sequence[Array], gradients: Sequence[Array]) -> list[Pair]:
    """The secant pairs of consecutive iterates, oldest first."""
    return [
        (heads[j] - heads[j - 1], gradients[j] - gradients[j - 1]) for j in range(1, len(heads))
    ]


def mixed(W: Array, g: Array, pairs: Sequence[Pair], bk: Backend) -> tuple[Array, Array]:
    """``(w_hat, g_hat)`` (d, K) from the head ``W``, its gradient ``g`` and secant ``pairs``.

    With no pairs, or where the least-squares problem is degenerate, ``(W, g)`` unchanged
    (the plain correction step).
    """
    if not pairs:
        return W, g
    dW = bk.stack([p[0] for p in pairs])  # (m, d, K)
    dG = bk.stack([p[1] for p in pairs])
    gram = bk.sum(dG[:, None, :, :] * dG[None, :, :, :], axis=2)  # (m, m, K)
    rhs = bk.sum(dG * g[None, :, :], axis=1)  # (m, K)
    both = bk.to_numpy(bk.concat([gram, rhs[None, :, :]], axis=0))  # one read-back
    gram, rhs = both[:-1], both[-1]
    gamma = np.zeros_like(rhs)
    for k in range(rhs.shape[1]):
        A = gram[:, :, k]
        ridge = 1e-12 * float(np.trace(A)) + 1e-300
        solution = np.linalg.lstsq(A + ridge * np.eye(A.shape[0]), rhs[:, k], rcond=None)[0]
        if np.all(np.isfinite(solution)):
            gamma[:, k] = solution
    weights = bk.asarray(gamma)[:, None, :]  # (m, 1, K)
    return W - bk.sum(dW * weights, axis=0), g - bk.sum(dG * weights, axis=0)
