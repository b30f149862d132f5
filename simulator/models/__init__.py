"""Feature extractors and their federated training (the ``x -> h`` half of the model).

See ``notes/method.md`` section 1: the extractor is trained (here with FedAvg and a
temporary linear layer), then frozen; only the linear head on its RFF-mapped
features is removed from with a certificate.
"""

from simulator.models.backbones import (
    Backbone,
    BackboneConfig,
    BackboneKind,
    ExtractorWithHead,
    IdentityBackbone,
    InputKind,
    LSTMBackbone,
    MLPBackbone,
    TransformerBackbone,
    build_backbone,
    build_network,
)
from simulator.models.device import DeviceSetting, draw_seed, resolve_device, seeded_rng
from simulator.models.fedavg import (
    FedAvgResult,
    LocalEpochs,
    LocalUpdate,
    StateArrays,
    client_generator,
    extract_features,
    fedavg,
    load_arrays,
    local_train,
    state_to_arrays,
    train_federated,
)

__all__ = [
    "Backbone",
    "BackboneConfig",
    "BackboneKind",
    "DeviceSetting",
    "ExtractorWithHead",
    "FedAvgResult",
    "IdentityBackbone",
    "InputKind",
    "LSTMBackbone",
    "LocalEpochs",
    "LocalUpdate",
    "MLPBackbone",
    "StateArrays",
    "TransformerBackbone",
    "build_backbone",
    "build_network",
    "client_generator",
    "draw_seed",
    "extract_features",
    "fedavg",
    "load_arrays",
    "local_train",
    "resolve_device",
    "seeded_rng",
    "state_to_arrays",
    "train_federated",
]
