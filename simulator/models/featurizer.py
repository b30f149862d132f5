"""The frozen map from raw inputs to head features: extractor, random Fourier features, clipping.

``x --extractor--> h --RFF (fixed)--> z --clip to ||z|| <= 1--> head`` (``method.md`` section
1; DecoRemoval Sec. 3.2). The runner trains the extractor with FedAvg
(:mod:`simulator.runner.featurize`), the comparison's head-based methods train it centrally
(:mod:`simulator.unlearners.features`); both then freeze it here with an RFF map drawn on its
features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from numpy.typing import NDArray

from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth
from simulator.models.backbones import ExtractorWithHead
from simulator.models.fedavg import extract_features

if TYPE_CHECKING:
    from simulator.models.dp_fedavg import DpFedAvgResult

FloatArray = NDArray[np.float64]


@dataclass
class Featurizer:
    """A trained, frozen extractor and RFF map: raw inputs to head features of norm <= 1.

    Attributes
    ----------
    model : ExtractorWithHead
        The trained extractor (its linear layer is not used here).
    rff : RandomFourierFeatures
        The fixed random Fourier feature map drawn on the extractor's features.
    device : torch.device
        Where the extractor runs.
    round_losses : tuple of float
        The example-weighted mean client loss of each FedAvg round (empty when the extractor
        was not trained federatedly).
    seconds : float
        Seconds the extractor's federated training took (0 when not recorded).
    privacy : DpFedAvgResult or None
        The DP-FedAvg training's accountants and ``delta`` when the extractor was trained with
        DP-SGD (the comparison under ``extractor_data: dp``); None otherwise.
    """

    model: ExtractorWithHead
    rff: RandomFourierFeatures
    device: torch.device
    round_losses: tuple[float, ...] = ()
    seconds: float = 0.0
    privacy: DpFedAvgResult | None = None

    def __call__(self, x: NDArray[Any]) -> FloatArray:
        """Head features ``z = clip(rff(extractor(x)))`` of every row of ``x``.

        The clip divides the map's fresh output in place: the call holds the extractor's
        features and one ``(n, m)`` array, not three.
        """
        h = extract_features(self.model, x, device=self.device)
        return clip_to_unit_ball(self.rff.transform(h), in_place=True)


def freeze_featurizer(
    model: ExtractorWithHead,
    pool: NDArray[Any],
    *,
    dim: int,
    bandwidth: float | None,
    rng: np.random.Generator,
    device: torch.device,
) -> Featurizer:
    """Draw the RFF map on the extractor's features of ``pool`` and freeze both.

    Parameters
    ----------
    model : ExtractorWithHead
        The trained extractor.
    pool : ndarray
        The inputs the extractor was trained on.
    dim : int
        Number of random Fourier features.
    bandwidth : float or None
        The RBF bandwidth ``sigma``; None computes the median heuristic on ``pool``'s features
        (drawing its subsample from ``rng`` before the map).
    rng : numpy.random.Generator
        The generator of the median heuristic's subsample and of the RFF map.
    device : torch.device
        Where the extractor runs.

    Returns
    -------
    Featurizer
        ``x -> clip(rff(extractor(x)))``.
    """
    h = extract_features(model, pool, device=device)
    if bandwidth is None:
        bandwidth = median_bandwidth(h, rng=rng)
    rff = RandomFourierFeatures.draw(h.shape[1], dim, bandwidth=bandwidth, rng=rng)
    return Featurizer(model, rff, device)
