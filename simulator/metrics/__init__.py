"""Metric maths (pure): utility now; membership inference and drift build on it."""

from simulator.metrics.utility import accuracy, weighted_f1

__all__ = ["accuracy", "weighted_f1"]
