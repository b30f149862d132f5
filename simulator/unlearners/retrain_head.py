"""``retrain_head``: the linear head retrained from scratch on the retained rows.

The exact baseline of the federated streaming run (``unlearnsim run``, method ``retrain_head``):
the extractor and the RFF map are trained once on every training row, as for ``cr`` (uniform
weights), and after every removal the certified head is retrained from scratch on the retained
rows with the same loss perturbation ``b`` (:meth:`~simulator.head.CertifiedHead.remove` with
``retrain=True``), so the head depends only on the retained rows; the extractor does not
(``retrain`` retrains it too).
"""

from __future__ import annotations

from typing import ClassVar

from simulator.unlearners.base import FloatArray, NoConfig
from simulator.unlearners.headbased import CertifiedHeadUnlearner, SampleWeights


class RetrainHead(CertifiedHeadUnlearner[NoConfig]):
    """Head retrained from scratch per removal on frozen RFF features, uniform weights."""

    name: ClassVar[str] = "retrain_head"
    guarantee: ClassVar[str] = "exact for the head (extractor trained on all rows)"
    options_type: ClassVar[type[NoConfig]] = NoConfig

    def _sample_weights(self, Z: FloatArray, seed: int) -> SampleWeights:
        return SampleWeights(None, None, {})
