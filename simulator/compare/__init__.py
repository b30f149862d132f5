"""The comparison harness: every unlearning method on the same data, seeds and deletion stream.

``build_workload(scenario, seed)`` derives one seed's data, splits and removal schedule;
``run_comparison`` fits and unlearns every method on it and measures them at the same removal
counts; ``write_comparison`` writes the paper-style tables (Markdown, CSV) and PNG plots.
``unlearnsim compare run SCENARIO --methods a,b,c --seeds 3`` is the command line.
"""

from simulator.compare.harness import (
    Comparison,
    FitRecord,
    Measurement,
    attach_retrain,
    membership_auc,
    run_comparison,
    run_method,
)
from simulator.compare.report import write_comparison
from simulator.compare.table import Stat, Summary, markdown, summarize, summary_csv
from simulator.compare.workload import (
    EvalSplit,
    Workload,
    build_workload,
    cut_at_checkpoints,
    expand_requests,
    settings_from_scenario,
)

__all__ = [
    "Comparison",
    "EvalSplit",
    "FitRecord",
    "Measurement",
    "Stat",
    "Summary",
    "Workload",
    "attach_retrain",
    "build_workload",
    "cut_at_checkpoints",
    "expand_requests",
    "markdown",
    "membership_auc",
    "run_comparison",
    "run_method",
    "settings_from_scenario",
    "summarize",
    "summary_csv",
    "write_comparison",
]
