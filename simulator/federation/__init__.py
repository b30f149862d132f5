"""The federated protocol as plain objects: clients with shards, a server that sums them."""

from simulator.federation.client import FederatedClient, WeightingPlan, WeightReport
from simulator.federation.server import ClientChannel, FederatedHeadData, combine_deletions

__all__ = [
    "ClientChannel",
    "FederatedClient",
    "FederatedHeadData",
    "WeightReport",
    "WeightingPlan",
    "combine_deletions",
]
