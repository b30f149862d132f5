"""The federated protocol as plain objects: clients with shards, a server that sums them."""

from simulator.federation.aggregate import (
    ClientChannel,
    ClientFanout,
    FederatedHeadData,
    combine_deletions,
)
from simulator.federation.client import FederatedClient
from simulator.federation.snapshot import (
    ClientReport,
    ClientSnapshot,
    WeightingPlan,
    WeightReport,
)

__all__ = [
    "ClientChannel",
    "ClientFanout",
    "ClientReport",
    "ClientSnapshot",
    "FederatedClient",
    "FederatedHeadData",
    "WeightReport",
    "WeightingPlan",
    "combine_deletions",
]
