"""Unlearning methods behind one protocol, selected by name (``method.md`` section 4).

=============== ============================================================================
``retrain``     extractor, RFF map and head retrained from scratch on the retained rows
``cr``          certified removal of the linear head (Guo et al., ICML 2020)
``decoremoval`` RFF + decorrelation weights + certified removal (DecoRemoval)
``retrain_head`` frozen extractor + RFF, head retrained from scratch per removal
``decoremoval_extractor`` the same, with decorrelation weights also in the extractor's training
``sisa``        shards x slices with checkpoints (Bourtoule et al., IEEE S&P 2021)
``dpsgd``       DP-SGD training with opacus, removal a no-op (Abadi et al., CCS 2016)
``ssd``         selective synaptic dampening (Foster et al., AAAI 2024)
``cu``          certified unlearning for DNNs, LiSSA Newton step + noise (Zhang et al., ICML 2024)
=============== ============================================================================

``create_unlearner("sisa", settings, slices=2)`` builds one; every method implements
:class:`Unlearner` and is checked by one contract test.
"""

from typing import Any

from simulator.unlearners.base import (
    BaseUnlearner,
    FitReport,
    ModelConfig,
    RemovalOutcome,
    TrainingSet,
    Unlearner,
    check_removal,
)
from simulator.unlearners.cr import CertifiedRemoval
from simulator.unlearners.cu import CertifiedUnlearning, CuConfig
from simulator.unlearners.decoremoval import DecoRemoval, DecoRemovalConfig, DecoRemovalExtractor
from simulator.unlearners.dpsgd import DpSgd, DpsgdConfig
from simulator.unlearners.registry import (
    create_unlearner,
    register_unlearner,
    registered_unlearners,
    unlearner_class,
    unregister_unlearner,
)
from simulator.unlearners.retrain import Retrain, RetrainConfig
from simulator.unlearners.retrain_head import RetrainHead
from simulator.unlearners.sisa import Sisa, SisaConfig
from simulator.unlearners.ssd import Ssd, SsdConfig

#: The built-in methods, in the order of the paper's tables (registered in
#: :mod:`simulator.methods`, loaded from there on first use), then ``retrain_head``.
BUILTIN: tuple[type[BaseUnlearner[Any]], ...] = (
    Retrain,
    CertifiedRemoval,
    Sisa,
    DpSgd,
    Ssd,
    CertifiedUnlearning,
    DecoRemoval,
    DecoRemovalExtractor,
    RetrainHead,
)

__all__ = [
    "BUILTIN",
    "BaseUnlearner",
    "CertifiedRemoval",
    "CertifiedUnlearning",
    "CuConfig",
    "DecoRemoval",
    "DecoRemovalConfig",
    "DecoRemovalExtractor",
    "DpSgd",
    "DpsgdConfig",
    "FitReport",
    "ModelConfig",
    "RemovalOutcome",
    "Retrain",
    "RetrainConfig",
    "RetrainHead",
    "Sisa",
    "SisaConfig",
    "Ssd",
    "SsdConfig",
    "TrainingSet",
    "Unlearner",
    "check_removal",
    "create_unlearner",
    "register_unlearner",
    "registered_unlearners",
    "unlearner_class",
    "unregister_unlearner",
]
