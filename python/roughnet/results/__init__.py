"""Results: the DuckDB store of sweeps, runs, receivers and histograms, plus artifacts.

Public API: ``Store`` (open/create a results folder, record runs, read, resolve,
export) and ``FORMAT_VERSION``.  See docs/results-format.md for the layout.
"""

from roughnet.results.schema import FORMAT_VERSION, METRIC_NAMES, METRICS
from roughnet.results.store import Store

__all__ = ["FORMAT_VERSION", "METRICS", "METRIC_NAMES", "Store"]
