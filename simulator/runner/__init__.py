"""The in-process runner: a scenario becomes a trained federation and a played deletion stream."""

from simulator.runner.run import RunResult, run_scenario
from simulator.runner.setup import Federation, build_federation

__all__ = ["Federation", "RunResult", "build_federation", "run_scenario"]
