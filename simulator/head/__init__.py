"""DecoRemoval's certified linear head: maths, solver, training and certified removal."""

from simulator.head.certificate import (
    certificate_constant,
    epsilon_spent,
    residual_budget,
)
from simulator.head.certified import CertifiedHead
from simulator.head.config import (
    ACCOUNTING_MODES,
    Accounting,
    HeadConfig,
    Release,
    RemovalReport,
)
from simulator.head.data import DeletionStatistics, HeadData, LocalHeadData
from simulator.head.logistic import (
    ShardStatistics,
    StatisticsRequest,
    head_columns,
    predict_classes,
    shard_statistics,
    signed_labels,
)
from simulator.head.solver import HessianSolver
from simulator.head.training import TrainResult, train_head, train_head_from_zero

__all__ = [
    "ACCOUNTING_MODES",
    "Accounting",
    "CertifiedHead",
    "DeletionStatistics",
    "HeadConfig",
    "HeadData",
    "HessianSolver",
    "LocalHeadData",
    "Release",
    "RemovalReport",
    "ShardStatistics",
    "StatisticsRequest",
    "TrainResult",
    "certificate_constant",
    "epsilon_spent",
    "head_columns",
    "predict_classes",
    "residual_budget",
    "shard_statistics",
    "signed_labels",
    "train_head",
    "train_head_from_zero",
]
