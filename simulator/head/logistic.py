"""One-vs-rest L2-regularised logistic loss: values, gradients, Hessians and shard statistics.

A K-class task has K one-vs-rest columns, a binary task one column (:func:`head_columns`).
Per column k with labels ``y_ik in {-1, +1}`` and sample weights ``a_i``, the perturbed
training objective of Guo et al. (ICML 2020, eq. 1) with DecoRemoval's sample weights is

    L_b(w_k; D) = sum_i a_i l(w_k . x_i, y_ik) + (lam * n / 2) ||w_k||^2 + b_k . w_k,
    l(s, y) = log(1 + exp(-y s))

(``method.md`` section 3). Its gradient and Hessian are

    grad = sum_i a_i (-y_ik sigmoid(-y_ik s_ik)) x_i + lam n w_k + b_k
    H    = sum_i a_i p_ik (1 - p_ik) x_i x_i^T + lam n I,      p_ik = sigmoid(y_ik s_ik).

Only the data terms (the sums over i) depend on the data; they are the *sufficient statistics*
that clients send to the server (``design.md``, "The head in a federation"). Sums over disjoint
shards equal the full-data value, which is what makes federated Newton iterations exact.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from simulator.errors import InputError
from simulator.head.backend import Array, Backend, backend_of

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def head_columns(num_classes: int) -> int:
    """Columns of the head for ``num_classes`` classes: 1 for a binary task, else K.

    A binary task is one logistic regression (labels -1/+1 for classes 0/1), not two
    one-vs-rest heads that would each be charged (``method.md`` section 1).
    """
    if num_classes < 2:
        raise InputError(f"a classifier needs at least 2 classes, got {num_classes}")
    return 1 if num_classes == 2 else num_classes


def signed_labels(y: IntArray, num_classes: int) -> FloatArray:
    """Labels in {-1, +1}, shape (n, :func:`head_columns`).

    K > 2: one-vs-rest, ``Y[i, k] = +1`` if ``y_i == k`` else ``-1``. K = 2: one column,
    ``+1`` for class 1 and ``-1`` for class 0.
    """
    if y.ndim != 1:
        raise InputError(f"labels must be 1-D, got shape {y.shape}")
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise InputError(f"labels must lie in [0, {num_classes}), got [{y.min()}, {y.max()}]")
    if head_columns(num_classes) == 1:
        return np.where(y == 1, 1.0, -1.0)[:, None]
    out = -np.ones((y.shape[0], num_classes), dtype=np.float64)
    out[np.arange(y.shape[0]), y] = 1.0
    return out


def predict_classes(scores: FloatArray) -> IntArray:
    """Class of each row from decision scores ``X @ W`` (n, columns): argmax, or ``s > 0``."""
    s = np.asarray(scores)
    if s.ndim != 2:
        raise InputError(f"scores must be (n, columns), got shape {s.shape}")
    if s.shape[1] == 1:
        return np.asarray(s[:, 0] > 0.0, dtype=np.int64)
    return np.asarray(np.argmax(s, axis=1), dtype=np.int64)


def class_labels(Y: FloatArray) -> IntArray:
    """Inverse of :func:`signed_labels`: class indices from signed labels (n, columns)."""
    return predict_classes(Y)


def sigmoid(t: Array) -> Array:
    """Numerically stable logistic function (numpy or torch, :mod:`simulator.head.backend`)."""
    return backend_of(t).sigmoid(t)


@dataclass(frozen=True)
class StatisticsRequest:
    """Which sufficient statistics of the rows to compute, and at which head.

    The one question every :class:`~simulator.head.data.RowSource` answers (a shard, a client,
    the federation's sum, a Flower message). Only the data terms of the objective (module
    docstring, Guo et al. ICML 2020 eq. 1) are asked for; the regulariser and ``b`` are added
    by whoever holds the head.

    Attributes
    ----------
    W : (d, K) head at which the loss sums and the gradient sums ``sum_i a_i l'_ik y_ik x_i``
        are evaluated: the data term of ``grad`` (module docstring), the Newton step's right
        hand side.
    hessian : also the per-class Hessian sums ``sum_i a_i p_ik (1 - p_ik) x_i x_i^T``: the
        data term of ``H`` (module docstring), the matrix of the Newton step.
    gram : also the unweighted ``X^T X`` of the retained rows, whose top eigenvalue gives
        ``||X'||_2`` in the data-dependent bound (:mod:`simulator.head.certificate`, first
        formula; Guo et al. Corollary 1).
    hessian_at : take the Hessian at this head instead of ``W``: the removal keeps its
        aggregate Hessian at a reference head ``w_ref`` (``H_ref`` of
        :mod:`simulator.head.certificate`); None for ``W`` itself.
    columns : only these columns of the head (classes), in this order: the answer's loss,
        gradient and Hessians have ``len(columns)`` columns (a rebuild of the classes whose
        reference point moved, ``CertifiedHead``); None for all of them. Every term is a sum
        per column, so the answer is those columns of the full one.
    """

    W: Array
    hessian: bool = False
    gram: bool = False
    hessian_at: Array | None = None
    columns: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.columns is None:
            return
        k = int(self.W.shape[1])
        cols = tuple(int(c) for c in self.columns)
        if not cols or len(set(cols)) != len(cols) or not all(0 <= c < k for c in cols):
            raise InputError(f"columns {list(self.columns)} are not distinct columns of 0..{k - 1}")
        object.__setattr__(self, "columns", cols)

    def column_count(self) -> int:
        """Columns of the answer: ``len(columns)``, or all of ``W``'s."""
        return int(self.W.shape[1]) if self.columns is None else len(self.columns)

    def moved_to(self, bk: Backend) -> StatisticsRequest:
        """The same request with its heads as arrays of ``bk`` (what the clients compute with)."""
        at = None if self.hessian_at is None else bk.asarray(self.hessian_at)
        return replace(self, W=bk.asarray(self.W), hessian_at=at)


@dataclass(frozen=True)
class ShardStatistics:
    """Data terms of the objective of one shard at a given head ``W`` (d x K).

    Attributes
    ----------
    loss : (K,) weighted loss sums ``sum_i a_i l_ik``.
    gradient : (d, K) weighted gradient sums ``sum_i a_i l'_ik y_ik x_i``.
    hessian : (K, d, d) weighted Hessian sums, or None when not requested.
    gram : (d, d) unweighted ``X^T X`` of the rows, or None when not requested.
    count : number of rows.
    """

    loss: FloatArray
    gradient: FloatArray
    hessian: FloatArray | None
    gram: FloatArray | None
    count: int

    def __add__(self, other: ShardStatistics) -> ShardStatistics:
        return ShardStatistics(
            loss=self.loss + other.loss,
            gradient=self.gradient + other.gradient,
            hessian=_add_optional(self.hessian, other.hessian),
            gram=_add_optional(self.gram, other.gram),
            count=self.count + other.count,
        )

    @staticmethod
    def zeros(d: int, k: int, *, hessian: bool, gram: bool) -> ShardStatistics:
        """The statistics of an empty shard (the neutral element of ``+``)."""
        return ShardStatistics(
            loss=np.zeros(k),
            gradient=np.zeros((d, k)),
            hessian=np.zeros((k, d, d)) if hessian else None,
            gram=np.zeros((d, d)) if gram else None,
            count=0,
        )

    def moved_to(self, bk: Backend) -> ShardStatistics:
        """The same statistics as arrays of ``bk`` (a no-op where they were computed)."""
        return ShardStatistics(
            loss=bk.asarray(self.loss),
            gradient=bk.asarray(self.gradient),
            hessian=None if self.hessian is None else bk.asarray(self.hessian),
            gram=None if self.gram is None else bk.asarray(self.gram),
            count=self.count,
        )


def _add_optional(a: FloatArray | None, b: FloatArray | None) -> FloatArray | None:
    if a is None or b is None:
        if a is not None or b is not None:
            raise InputError("cannot add statistics with and without the same optional terms")
        return None
    return a + b


def shard_statistics(
    X: FloatArray, Y: FloatArray, a: FloatArray, request: StatisticsRequest
) -> ShardStatistics:
    """Sufficient statistics of rows ``X`` (n x d) with signed labels ``Y`` (n x K).

    Parameters
    ----------
    X, Y, a : rows, one-vs-rest labels in {-1, +1}, per-sample weights (n,).
    request : the head to evaluate at and the optional terms (:class:`StatisticsRequest`).

    The statistics are computed with the array library of ``X`` (numpy, or torch on its
    device; :mod:`simulator.head.backend`) and returned in it.
    """
    bk = backend_of(X)  # computed where the rows live; W, Y, a are moved there (no-op if same)
    W, Y, a = bk.asarray(request.W), bk.asarray(Y), bk.asarray(a)
    n, d = X.shape
    k = W.shape[1]
    if Y.shape != (n, k) or a.shape != (n,) or W.shape[0] != d:
        raise InputError(f"shape mismatch: X {X.shape}, Y {Y.shape}, a {a.shape}, W {W.shape}")
    if request.columns is not None:  # those columns' terms alone (each is a sum per column)
        cols = list(request.columns)
        W, Y = W[:, cols], Y[:, cols]
        at = None if request.hessian_at is None else bk.asarray(request.hessian_at)[:, cols]
        request = replace(request, W=W, hessian_at=at, columns=None)
    if not request.hessian and isinstance(X, np.ndarray) and n > 2 * ROW_BLOCK:
        loss, grad = _loss_gradient_by_blocks(X, Y, a, W)
        g = bk.transposed_product(X, X) if request.gram else None
        return ShardStatistics(loss=loss, gradient=grad, hessian=None, gram=g, count=n)
    margins = Y * (X @ W)
    # l = log(1 + exp(-m)); dl/ds = -y sigmoid(-m)
    loss = a @ bk.softplus(-margins)
    coeff = -(Y * bk.sigmoid(-margins)) * a[:, None]
    grad = bk.transposed_product(X, coeff)
    hess = None
    if request.hessian:
        at = request.hessian_at
        m_ref = margins if at is None else Y * (X @ bk.asarray(at))
        p = bk.sigmoid(m_ref)
        curv = a[:, None] * p * (1.0 - p)
        if bk.any(a < 0):  # weight *changes* may be negative: general products
            hess = bk.zeros((k, d, d))
            for c in range(k):
                hess[c] = bk.transposed_product(X, X * curv[:, c, None])
        else:  # one pass over the rows, symmetric rank-k updates (backend.weighted_grams)
            hess = bk.weighted_grams(X, curv)
    g = bk.transposed_product(X, X) if request.gram else None
    return ShardStatistics(loss=loss, gradient=grad, hessian=hess, gram=g, count=n)


#: Rows per block of the fused loss-and-gradient pass (:func:`_loss_gradient_by_blocks`).
ROW_BLOCK = 256


def _loss_gradient_by_blocks(
    X: FloatArray, Y: FloatArray, a: FloatArray, W: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``sum_i a_i l(y_i x_i.w)`` and ``sum_i a_i l'(.) y_i x_i`` per class, block by block.

    The same sums as :func:`shard_statistics`'s two products (``X W`` then ``X^T C``), taken
    over blocks of :data:`ROW_BLOCK` rows so that each block of ``X`` (2 MB at d = 1,024) is
    read from memory once and again from the cache: the pass is bound by reading ``X``, and
    this took 0.21 s instead of 0.28 s for 60,000 rows at d = 1,024, K = 10 on one core.
    """
    n, d = X.shape
    loss = np.zeros(W.shape[1])
    grad = np.zeros((d, W.shape[1]))
    for start in range(0, n, ROW_BLOCK):
        block = slice(start, start + ROW_BLOCK)
        rows, labels, weights = X[block], Y[block], a[block]
        margins = labels * (rows @ W)
        loss += weights @ np.logaddexp(0.0, -margins)
        grad += rows.T @ (-(labels * sigmoid(-margins)) * weights[:, None])
    return loss, grad


def objective_gradient(
    stats: ShardStatistics, W: FloatArray, b: FloatArray, *, lam: float
) -> FloatArray:
    """Full gradient ``grad L_b`` (d x K) from the aggregated data statistics (eq. above)."""
    return stats.gradient + lam * stats.count * W + b


def objective_value(
    stats: ShardStatistics, W: FloatArray, b: FloatArray, *, lam: float
) -> FloatArray:
    """Per-class objective values ``L_b(w_k)`` (K,)."""
    value: FloatArray = stats.loss + 0.5 * lam * stats.count * (W * W).sum(0) + (b * W).sum(0)
    return value


def objective_hessian(stats: ShardStatistics, *, lam: float) -> FloatArray:
    """Per-class Hessians (K, d, d) of the objective: data terms + ``lam n I``."""
    if stats.hessian is None:
        raise InputError("statistics were computed without Hessians")
    d = stats.hessian.shape[1]
    eye = backend_of(stats.hessian).eye(d)
    out: FloatArray = stats.hessian + lam * stats.count * eye[None, :, :]
    return out
