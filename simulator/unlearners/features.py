"""The head-based methods' model split: extractor -> RFF -> clip -> linear head.

``x --extractor--> h --RFF (fixed)--> z --clip ||z|| <= 1--> head`` (``method.md`` section 1;
DecoRemoval Sec. 3.2). The comparison trains the extractor centrally on the rows it is given,
with the shared :class:`~simulator.unlearners.base.ModelConfig`; for ``cr`` and
``decoremoval`` those are all training rows, so deleted samples did shape the extractor: their
certificate covers the head only, and the results say so. A training set with an
``extractor_pool`` (``extractor_data: public``) has the extractor fitted on the pool alone.
Under ``extractor_data: dp`` (``ModelConfig.extractor_dp``) the extractor is trained by the
streaming path's DP-FedAvg (:func:`simulator.models.dp_fedavg.train_dp_federated`) over the
clients (the training set's ``groups``) with fresh accountants, and the RFF bandwidth is taken
on rows no client holds (``TrainingSet.bandwidth_pool``).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from simulator.errors import ConfigError, InputError
from simulator.metrics.scores import class_probabilities
from simulator.models import ExtractorWithHead
from simulator.models.dp_fedavg import DpFedAvgResult, train_dp_federated
from simulator.models.featurizer import Featurizer, freeze_featurizer
from simulator.seeds import child_rng, child_seed, child_torch
from simulator.unlearners.base import FloatArray, IntArray, ModelConfig, TrainingSet
from simulator.unlearners.networks import build_network, device_of, train_network

#: Plainly trained featurizers of each live training set, by (seed, settings, rows):
#: ``cr`` and ``decoremoval`` train the very same extractor and RFF map (same rows, settings
#: and seed), so the second one reuses the first's instead of training it again. The
#: featurizer is frozen after training and never modified, so sharing it changes no result;
#: only the second method's ``fit_seconds`` no longer include the extractor's training.
_FEATURIZERS: weakref.WeakKeyDictionary[
    TrainingSet, dict[tuple[int, ModelConfig, str], Featurizer]
] = weakref.WeakKeyDictionary()
#: The rows' digest of the cached featurizer fitted on every row of a training set.
_ALL_ROWS: weakref.WeakKeyDictionary[TrainingSet, str] = weakref.WeakKeyDictionary()

#: Per-epoch weights of the extractor's training loss, given the network being trained.
EpochWeights = Callable[[ExtractorWithHead, int], FloatArray | None]


def train_featurizer(
    train: TrainingSet,
    rows: IntArray,
    settings: ModelConfig,
    seed: int,
    *,
    epoch_weights: EpochWeights | None = None,
) -> Featurizer:
    """Train the extractor on ``rows`` and draw the RFF map, both from ``seed``'s children.

    The median bandwidth heuristic (when ``settings.rff_bandwidth`` is None) is computed on the
    extractor features of ``rows`` (under ``settings.extractor_dp``, of the training set's
    ``bandwidth_pool`` when it has one; the extractor then trains by DP-FedAvg,
    :func:`train_dp_extractor`). ``epoch_weights(model, epoch)`` re-weights each epoch's
    training loss (DecoRemoval's extractor mode); None trains with the plain mean loss.

    With an ``extractor_pool`` (``extractor_data: public``) the extractor and the bandwidth
    are fitted on the pool's rows instead, whatever ``rows`` are: the featurizer then reads
    no client row, and one trained on the pool serves every later call (a retrain included).
    """
    pool = train.extractor_pool
    if pool is not None:
        return train_featurizer(
            pool, np.arange(pool.n, dtype=np.int64), settings, seed, epoch_weights=epoch_weights
        )
    key = (seed, settings, hashlib.sha256(np.ascontiguousarray(rows).tobytes()).hexdigest())
    if epoch_weights is None:
        known = _FEATURIZERS.get(train, {}).get(key)
        if known is not None:
            return known
    model = build_network(settings, train, child_torch(seed, "extractor", "init"))
    privacy: DpFedAvgResult | None = None
    bandwidth_rows = train.x[rows]
    if settings.extractor_dp is not None:
        if epoch_weights is not None:
            raise ConfigError(
                "extractor_data dp: DP-SGD trains the extractor with the plain loss; a "
                "re-weighted extractor (decoremoval mode extractor) is not covered",
                "model.extractor_data",
            )
        privacy = train_dp_extractor(model, train, rows, settings, seed)
        if train.bandwidth_pool is not None:
            bandwidth_rows = train.bandwidth_pool
    else:
        _train_central(model, train, rows, settings, seed, epoch_weights)
    bandwidth = settings.rff_bandwidth
    if bandwidth is None and len(bandwidth_rows) < 2:
        bandwidth = 1.0  # no pair of rows to take a median distance of
    featurizer = freeze_featurizer(
        model,
        bandwidth_rows,
        dim=settings.rff_dim,
        bandwidth=bandwidth,
        rng=child_rng(seed, "rff"),
        device=device_of(settings),
    )
    featurizer = replace(featurizer, privacy=privacy)
    model.eval()
    if epoch_weights is None:
        _remember(train, rows, key, featurizer)
    return featurizer


def _train_central(
    model: ExtractorWithHead,
    train: TrainingSet,
    rows: IntArray,
    settings: ModelConfig,
    seed: int,
    epoch_weights: EpochWeights | None,
) -> None:
    """Central training of ``model`` on ``rows`` (re-weighted per epoch if asked)."""
    reweigh = None
    if epoch_weights is not None:
        hook = epoch_weights

        def reweigh(epoch: int) -> FloatArray | None:
            return hook(model, epoch)

    train_network(
        model,
        train,
        rows,
        settings,
        generator=child_torch(seed, "extractor", "train"),
        reweigh=reweigh,
    )


def _remember(
    train: TrainingSet,
    rows: IntArray,
    key: tuple[int, ModelConfig, str],
    featurizer: Featurizer,
) -> None:
    """Cache ``featurizer``: per training set the one fitted on every row and the latest other.

    The one on every row is kept through the retrain baseline's removals, so the next method's
    fit reuses it.
    """
    full = rows.size == train.n and bool(np.all(rows == np.arange(train.n)))
    cached = _FEATURIZERS.setdefault(train, {})
    for old in [k for k in cached if full or k[2] != _ALL_ROWS.get(train)]:
        del cached[old]
    cached[key] = featurizer
    if full:
        _ALL_ROWS[train] = key[2]


def train_dp_extractor(
    model: ExtractorWithHead,
    train: TrainingSet,
    rows: IntArray,
    settings: ModelConfig,
    seed: int,
) -> DpFedAvgResult:
    """DP-FedAvg of ``model`` in place on ``rows``, one client per group, fresh accountants.

    The clients are the training set's ``groups`` (the federation's; a set without groups is
    one client); each holds its rows among ``rows``. The streaming path's mechanism and
    accounting (:func:`simulator.models.dp_fedavg.train_dp_federated`), with every generator a
    child of ``seed`` (same seed and rows, same extractor and epsilon).

    Raises
    ------
    InputError
        ``settings.extractor_dp`` is not set, or ``rows`` is empty.
    """
    config = settings.extractor_dp
    if config is None:
        raise InputError("train_dp_extractor needs ModelConfig.extractor_dp")
    if rows.size == 0:
        raise InputError("cannot train an extractor on zero rows")
    groups = train.groups[rows] if train.groups is not None else np.zeros(rows.size, np.int64)
    clients = [rows[groups == c] for c in range(int(groups.max()) + 1)]
    return train_dp_federated(
        model,
        [(train.x[c], train.y[c]) for c in clients],
        config=config,
        batch_size=settings.batch_size,
        lr=settings.lr,
        seed=child_seed(seed, "extractor", "dp"),
        device=device_of(settings),
    )


#: The note of every head-based method under ``extractor_data: dp``.
DP_EXTRACTOR_NOTE = (
    "extractor trained by DP-FedAvg (DP-SGD on every client, one RDP accountant per client "
    "over all rounds) and the RFF bandwidth taken on rows no client holds: the certificate "
    "covers the whole model, the head's (epsilon, delta) plus the extractor's accounted "
    "per-row epsilon (fits.json: extractor)"
)


def privacy_info(featurizer: Featurizer) -> dict[str, float]:
    """The DP extractor's accounted ``extractor_epsilon`` and ``extractor_delta`` ({} if none)."""
    p = featurizer.privacy
    if p is None:
        return {}
    return {"extractor_epsilon": p.epsilon, "extractor_delta": p.delta}


def head_proba(Z: FloatArray, W: FloatArray) -> FloatArray:
    """Normalised one-vs-rest sigmoids of the head's scores ``Z @ W`` (``metrics.scores``)."""
    return class_probabilities(np.asarray(Z @ W))
