"""Head features: the random Fourier feature map and decorrelation sample weights.

See :mod:`simulator.features.rff`, :mod:`simulator.features.dependence` and
:mod:`simulator.features.decorrelation` (DecoRemoval section 3.2).
"""

from simulator.features.decorrelation import (
    OBJECTIVES,
    DecorrelationConfig,
    FourierLift,
    Objective,
    WeightResult,
    WeightSpread,
    class_mass,
    fit_weights,
    weight_spread,
)
from simulator.features.rff import RandomFourierFeatures, clip_to_unit_ball, median_bandwidth

__all__ = [
    "OBJECTIVES",
    "DecorrelationConfig",
    "FourierLift",
    "Objective",
    "RandomFourierFeatures",
    "WeightResult",
    "WeightSpread",
    "class_mass",
    "clip_to_unit_ball",
    "fit_weights",
    "median_bandwidth",
    "weight_spread",
]
