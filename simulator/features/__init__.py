"""Head features: the random Fourier feature map and decorrelation sample weights.

See :mod:`simulator.features.rff` and :mod:`simulator.features.decorrelation`
(DecoRemoval section 3.2).
"""

from simulator.features.decorrelation import (
    DecorrelationConfig,
    DecorrelationWeights,
    FourierLift,
    WeightResult,
    WeightSpread,
    dependence,
    dependence_gradient,
    fit_weights,
    refit_weights,
    weight_spread,
)
from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth

__all__ = [
    "DecorrelationConfig",
    "DecorrelationWeights",
    "FourierLift",
    "RandomFourierFeatures",
    "WeightResult",
    "WeightSpread",
    "clip_to_unit_ball",
    "dependence",
    "dependence_gradient",
    "fit_weights",
    "median_bandwidth",
    "refit_weights",
    "weight_spread",
]
