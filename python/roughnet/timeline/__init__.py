"""Run timelines from the agents' traces: per-interval series, recovery per fault, the timeline plot.

docs/timelines.md is the contract.  ``traces`` reads the stream agents' binary trace files into
numpy arrays; ``series`` turns one flow's (sender, receiver) traces into per-interval rows and a
summary, and sums flows into one series per workload; ``recovery`` pairs the run's events into
fault windows and measures, per fault and flow, the outage the application saw, the time back to
the pre-fault rate, what was lost, duplicated, reordered or delivered late, and whether the
protocol kept its promise; ``plot`` draws the series with the events.  Everything here is pure
(arrays and dicts in, rows and a PNG out): no store, no runner, no clock.
"""

from __future__ import annotations
