"""Split a training set over federated clients (IID, label skew, covariate skew, quantity skew).

Every kind returns one sorted index array per client; together they are disjoint and cover
each row exactly once, and every client has at least ``min_per_client`` rows.

* ``iid`` — a seeded permutation cut into near-equal parts.
* ``dirichlet`` — label skew: for every class, the class's rows are divided over clients in
  proportions drawn from ``Dirichlet(alpha · 1)`` (Hsu et al., 2019); small ``alpha`` gives
  clients dominated by few classes.  Draws are repeated (up to ``MAX_DIRICHLET_TRIES``) until
  every client meets ``min_per_client``.
* ``covariate`` — feature skew: rows sorted by their score on the first principal component of
  ``features`` and cut into contiguous groups, after a seeded fraction ``mix`` of positions
  has been shuffled (so neighbouring clients overlap a little).
* ``quantity`` — size skew: client sizes ``min_per_client + Dirichlet(alpha)`` share of the rest,
  rows assigned at random.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.data.selection import IntArray, largest_remainder
from simulator.errors import ConfigError, InputError
from simulator.scenario.data_spec import PartitionSpec

MAX_DIRICHLET_TRIES = 100


def partition(
    labels: NDArray[np.int64],
    spec: PartitionSpec,
    *,
    rng: np.random.Generator,
    features: NDArray[Any] | None = None,
    min_per_client: int = 1,
    mix: float = 0.1,
) -> list[IntArray]:
    """Assign the rows of a training set to ``spec.num_clients`` clients.

    Parameters
    ----------
    labels : NDArray[np.int64]
        Training labels, one per row (sample id = row index).
    spec : PartitionSpec
        The scenario's ``partition`` section: ``kind`` (see the module docstring),
        ``num_clients`` and ``alpha``, the Dirichlet concentration of ``dirichlet`` and
        ``quantity`` (smaller = more skewed).
    rng : numpy.random.Generator
        The only source of randomness.
    features : NDArray, optional
        Row features ``(n, d)``; required for ``covariate``.
    min_per_client : int
        Minimum rows per client.
    mix : float
        ``covariate`` only: fraction of sorted positions shuffled among themselves.

    Returns
    -------
    list of NDArray[np.int64]
        One sorted index array per client.

    Raises
    ------
    ConfigError
        Invalid settings, or no partition can give every client ``min_per_client`` rows.
    """
    y = np.asarray(labels)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise InputError(f"labels must be a 1-D integer array, got {y.dtype} {y.shape}")
    _check_sizes(len(y), spec.num_clients, min_per_client)
    split = _SplitRequest(y, spec.num_clients, spec.alpha, min_per_client, features, mix, rng)
    parts = _SCHEMES[spec.kind](split)
    small = [k for k, p in enumerate(parts) if len(p) < min_per_client]
    if small:
        raise ConfigError(
            f"clients {small} got fewer than min_per_client={min_per_client} rows with kind "
            f"{spec.kind!r}; use fewer clients or a lower min_per_client",
            "partition.min_per_client",
        )
    return [np.sort(p).astype(np.int64) for p in parts]


def _check_sizes(n: int, num_clients: int, min_per_client: int) -> None:
    """``min_per_client`` rows for each of ``num_clients`` clients fit in ``n`` rows."""
    if min_per_client < 0:
        raise ConfigError(f"must be >= 0, got {min_per_client}", "partition.min_per_client")
    if num_clients * min_per_client > n:
        raise ConfigError(
            f"{num_clients} clients x min_per_client={min_per_client} needs "
            f"{num_clients * min_per_client} rows but there are only {n}",
            "partition.num_clients",
        )


@dataclass(frozen=True)
class _SplitRequest:
    """What every partition scheme may use (each reads its own part)."""

    labels: NDArray[Any]
    num_clients: int
    alpha: float
    min_per_client: int
    features: NDArray[Any] | None
    mix: float
    rng: np.random.Generator

    @property
    def n(self) -> int:
        """Rows to assign."""
        return len(self.labels)

    def equal_sizes(self) -> NDArray[Any]:
        """Near-equal client sizes: ``n // k``, plus one for the first ``n % k`` clients."""
        k, n = self.num_clients, self.n
        return np.full(k, n // k) + (np.arange(k) < n % k)


def _iid(split: _SplitRequest) -> list[IntArray]:
    """A seeded permutation cut into near-equal parts."""
    return _cut(split.rng.permutation(split.n), split.equal_sizes())


def _quantity(split: _SplitRequest) -> list[IntArray]:
    """Sizes ``min_per_client`` plus a Dirichlet share of the rest; rows assigned at random."""
    share = split.rng.dirichlet(np.full(split.num_clients, split.alpha))
    rest = split.n - split.num_clients * split.min_per_client
    sizes = split.min_per_client + largest_remainder(share, rest)
    return _cut(split.rng.permutation(split.n), sizes)


def _cut(order: NDArray[Any], sizes: NDArray[Any]) -> list[IntArray]:
    """``order`` cut into consecutive parts of ``sizes``."""
    bounds = np.cumsum(sizes)[:-1]
    return [part.astype(np.int64) for part in np.split(order, bounds)]


def _dirichlet(split: _SplitRequest) -> list[IntArray]:
    """Label skew: each class divided over the clients in Dirichlet proportions."""
    y, num_clients, alpha, rng = split.labels, split.num_clients, split.alpha, split.rng
    min_per_client = split.min_per_client
    for _ in range(MAX_DIRICHLET_TRIES):
        buckets: list[list[IntArray]] = [[] for _ in range(num_clients)]
        for c in np.unique(y):
            rows = rng.permutation(np.flatnonzero(y == c))
            counts = largest_remainder(rng.dirichlet(np.full(num_clients, alpha)), len(rows))
            for k, part in enumerate(_cut(rows, counts)):
                buckets[k].append(part)
        parts = [np.concatenate(b) for b in buckets]
        if min(len(p) for p in parts) >= min_per_client:
            return parts
    raise ConfigError(
        f"Dirichlet label skew with alpha={alpha} left some of the {num_clients} clients with "
        f"fewer than min_per_client={min_per_client} rows in {MAX_DIRICHLET_TRIES} draws; "
        "raise alpha, lower min_per_client or use fewer clients",
        "partition.alpha",
    )


def first_principal_scores(features: NDArray[Any]) -> NDArray[np.float64]:
    """Scores of the rows on the first principal component (sign: largest loading positive)."""
    x = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    direction = vt[0] * np.sign(vt[0][np.argmax(np.abs(vt[0]))])
    return np.asarray(centred @ direction, dtype=np.float64)


def _covariate(split: _SplitRequest) -> list[IntArray]:
    """Feature skew: rows sorted by their first principal score, partly shuffled, then cut."""
    n, features, mix, rng = split.n, split.features, split.mix, split.rng
    if features is None:
        raise ConfigError("kind 'covariate' needs the training features", "partition.features")
    if len(features) != n:
        raise InputError(f"features have {len(features)} rows but labels have {n}")
    if not 0.0 <= mix <= 1.0:
        raise ConfigError(f"mix must lie in [0, 1], got {mix}", "partition.mix")
    order = np.argsort(first_principal_scores(features), kind="stable")
    moved = rng.choice(n, size=round(mix * n), replace=False)
    order[moved] = order[rng.permutation(moved)]
    return _cut(order, split.equal_sizes())


#: The partition schemes by ``partition.kind``.
_SCHEMES: dict[str, Callable[[_SplitRequest], list[IntArray]]] = {
    "iid": _iid,
    "dirichlet": _dirichlet,
    "covariate": _covariate,
    "quantity": _quantity,
}
