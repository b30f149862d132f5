"""How a run is presented: summary rows, verdict, plots, console output, run comparisons.

Everything that draws (matplotlib) or prints (rich) lives here, apart from the maths and the
deletion pipeline (:mod:`simulator.runner`), which produce plain event records.
"""
