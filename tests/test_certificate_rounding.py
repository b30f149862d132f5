"""The Gram projections of the bounds are upper bounds in floating point, not only on paper.

``||X' v||^2`` is computed from the Gram matrix kept by downdates, ``v^T base v - ||R v||^2``,
whose rounding errs by up to ``gram_rounding(N, d) ||v||^2`` (``simulator/head/certificate.py``,
with its derivation). Where every row lies on one line and ``lam`` is tiny, a Newton step is
almost orthogonal to the rows (``lam n'`` is all the curvature off the line, and the
perturbation's component there is large): ``||X' u||`` is then many orders of magnitude below
``sqrt(n') ||u||``, the computed form is rounding noise (negative, or below the truth), and a
charge without the allowance fell below the exact residual, measured here in long double.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.head import CertifiedHead, HeadConfig, LocalHeadData
from simulator.head.certificate import gram_rounding
from simulator.head.gram import GramMatrix
from simulator.head.logistic import signed_labels


def rank_one_rows(
    n: int, d: int, k: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` unit rows ``+-x0`` on one random line of R^d, with uniform labels in [0, k)."""
    line = rng.normal(size=(1, d))
    X = rng.normal(size=(n, 1)) @ line
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, rng.integers(0, k, size=n)


def _sigmoid(t: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-t))`` without overflow, in the precision of ``t``."""
    out = np.empty_like(t)
    positive = t >= 0
    out[positive] = 1 / (1 + np.exp(-t[positive]))
    e = np.exp(t[~positive])
    out[~positive] = e / (1 + e)
    return out


def exact_residual_long_double(head: CertifiedHead) -> float:
    """``||grad L_b(W; D')||`` of the released head, in long double from its float64 ``W``, ``b``
    and rows (``logistic.py``: ``sum_i a_i (-y_ik sigmoid(-y_ik s_ik)) x_i + lam n' w_k + b_k``)."""
    data = head.data
    assert isinstance(data, LocalHeadData)
    ld = np.longdouble
    X = data.features.astype(ld)
    Y = signed_labels(data.labels, data.num_classes).astype(ld)
    a = data.weights.astype(ld)  # 0 on removed rows
    W, b = head.W.astype(ld), head.b.astype(ld)
    slopes = -Y * _sigmoid(-Y * (X @ W))
    gradient = X.T @ (a[:, None] * slopes) + ld(head.config.lam) * data.retained_count * W + b
    return float(np.sqrt(np.sum(gradient**2)))


@pytest.mark.parametrize(
    ("accounting", "d", "k", "epsilon"),
    [("anchored", 2, 3, 1.0), ("guo", 6, 2, 1e6)],
    ids=["anchored-tight", "guo-data"],
)
def test_charge_covers_the_exact_residual_with_rank_one_rows_and_tiny_lam(
    accounting: str, d: int, k: int, epsilon: float
) -> None:
    """``lam = 1e-8``, ``sigma = 1e3``, 1,000 rows on one line, 20 single removals: every head
    released on its bounds is charged at least its exact residual. Without the allowance 9 of
    the 20 tight-bound releases (up to 4x) and all 19 data-bound releases (up to 160x) were
    undercharged."""
    rng = np.random.default_rng(0)
    X, y = rank_one_rows(1000, d, k, rng)
    config = HeadConfig(lam=1e-8, sigma=1e3, epsilon=epsilon, accounting=accounting)  # type: ignore[arg-type]
    head = CertifiedHead(LocalHeadData(X, y, k), config, rng=np.random.default_rng(0))
    order = rng.permutation(len(y))
    released = 0
    for i in order[:20]:
        r = head.remove([int(i)])
        if r.retrained or r.anchored:
            continue  # charged by a measurement, not by the bounds
        released += 1
        exact = exact_residual_long_double(head)
        assert r.cumulative >= exact, (r.cumulative, exact)
    assert released >= 10


def test_allowance_covers_the_rounding_of_the_gram_form() -> None:
    """On rank-one rows, with rows pending and folded, the computed ``v^T G v`` of vectors almost
    orthogonal to the rows errs by no more than ``gram_rounding(N, d) ||v||^2`` from the exact
    ``||X' v||^2`` (long double), and without the allowance falls below it for some of them."""
    n, d = 500, 6
    X, _ = rank_one_rows(n, d, 2, np.random.default_rng(3))
    gram = GramMatrix(X.T @ X, max_pending=8)
    gram.downdate(X[:20])  # past max_pending: folded into the base
    gram.downdate(X[20:25])  # pending
    retained = X[25:].astype(np.longdouble)
    line = X[0] / np.linalg.norm(X[0])
    rng = np.random.default_rng(4)
    V = rng.normal(size=(d, 200)) * 1e6
    V -= np.outer(line, line @ V)  # orthogonal to the line, up to rounding...
    V += np.outer(line, rng.normal(size=200) * 1e-3)  # ...plus a little along it
    computed = gram.quadratic(V)
    exact = np.sum((retained @ V.astype(np.longdouble)) ** 2, axis=0).astype(np.float64)
    allowance = gram_rounding(n, d) * np.sum(V**2, axis=0)
    assert np.all(np.abs(computed - exact) <= allowance)
    assert np.any(computed < exact)  # the allowance is needed


def test_a_restored_head_keeps_the_gram_rows_it_was_trained_on() -> None:
    """The allowance depends on the rows summed into the Gram matrix at the last training from
    scratch; a head restored into one built on more rows charges what the original charges."""
    X, y = rank_one_rows(300, 4, 3, np.random.default_rng(5))
    config = HeadConfig(lam=1e-8, sigma=1e3, epsilon=1e9, retrain="cold")
    original = CertifiedHead(LocalHeadData(X, y, 3), config, rng=np.random.default_rng(0))
    original.remove(list(range(50)))
    original.retrain()  # a cold retrain: the Gram matrix is summed over 250 rows
    restored = CertifiedHead(LocalHeadData(X, y, 3), config, rng=np.random.default_rng(0))
    restored.data.load_state_dict(original.data.state_dict())
    restored.load_state_dict(original.state_dict())
    for ids in ([60], [61, 62], [70]):
        a, b = original.remove(ids), restored.remove(ids)
        assert (a.residual_tight, a.residual_data) == (b.residual_tight, b.residual_data)
