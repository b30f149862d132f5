"""The head-based methods' model split: extractor -> RFF -> clip -> linear head.

``x --extractor--> h --RFF (fixed)--> z --clip ||z|| <= 1--> head`` (``method.md`` section 1;
DecoRemoval Sec. 3.2). The comparison trains the extractor centrally on the rows it is given,
with the shared :class:`~simulator.unlearners.base.ModelConfig`; for ``cr`` and
``decoremoval`` those are all training rows, so deleted samples did shape the extractor: their
certificate covers the head only, and the results say so. A training set with an
``extractor_pool`` (``extractor_data: public``) has the extractor fitted on the pool alone.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable

import numpy as np

from simulator.metrics.scores import class_probabilities
from simulator.models import ExtractorWithHead
from simulator.models.featurizer import Featurizer, freeze_featurizer
from simulator.seeds import child_rng, child_torch
from simulator.unlearners.base import FloatArray, IntArray, ModelConfig, TrainingSet
from simulator.unlearners.networks import build_network, device_of, train_network

#: The last plainly trained featurizer of each live training set, by (seed, settings, rows):
#: ``cr`` and ``decoremoval`` train the very same extractor and RFF map (same rows, settings
#: and seed), so the second one reuses the first's instead of training it again. The
#: featurizer is frozen after training and never modified, so sharing it changes no result;
#: only the second method's ``fit_seconds`` no longer include the extractor's training.
_FEATURIZERS: weakref.WeakKeyDictionary[
    TrainingSet, dict[tuple[int, ModelConfig, str], Featurizer]
] = weakref.WeakKeyDictionary()

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
    extractor features of ``rows``. ``epoch_weights(model, epoch)`` re-weights each epoch's
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
    bandwidth = settings.rff_bandwidth
    if bandwidth is None and rows.size < 2:
        bandwidth = 1.0  # no pair of rows to take a median distance of
    featurizer = freeze_featurizer(
        model,
        train.x[rows],
        dim=settings.rff_dim,
        bandwidth=bandwidth,
        rng=child_rng(seed, "rff"),
        device=device_of(settings),
    )
    model.eval()
    if epoch_weights is None:
        _FEATURIZERS[train] = {key: featurizer}  # the latest one per training set
    return featurizer


def head_proba(Z: FloatArray, W: FloatArray) -> FloatArray:
    """Normalised one-vs-rest sigmoids of the head's scores ``Z @ W`` (``metrics.scores``)."""
    return class_probabilities(np.asarray(Z @ W))
