"""``cr``: certified removal of the linear head, uniform sample weights.

Guo, Goldstein, Hannun and van der Maaten, "Certified Data Removal from Machine Learning
Models", ICML 2020: a loss-perturbed L2-regularised logistic head, one Newton step on the
retained data per removal, the gradient residual charged against ``eps' = sigma * epsilon / c``
and a retrain from scratch when it would be exceeded (``docs/certified-head.md``). Here the head
sits on the same frozen extractor + RFF features as DecoRemoval, so the two differ only in the
decorrelation weights.
"""

from __future__ import annotations

from typing import ClassVar

from simulator.unlearners.base import FloatArray, NoConfig
from simulator.unlearners.headbased import CertifiedHeadUnlearner, SampleWeights


class CertifiedRemoval(CertifiedHeadUnlearner[NoConfig]):
    """Certified removal (Guo et al. 2020) on frozen RFF features, no decorrelation."""

    name: ClassVar[str] = "cr"
    guarantee: ClassVar[str] = "(eps, delta)-certified head; extractor not certified"
    options_type: ClassVar[type[NoConfig]] = NoConfig

    def _sample_weights(self, Z: FloatArray, seed: int) -> SampleWeights:
        return SampleWeights(None, None, {})
