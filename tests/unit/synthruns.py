"""Synthetic stored sweeps with repeats, for the points and compare tests.

Owns building run records shaped like the runner's (stream pattern: latency
sampled and recorded into a real HdrHistogram, every latency metric read back from
it; loss drawn per message; throughput from the messages received) whose true
values are known, and storing them through the real ``Store`` API.  Imported as
``from synthruns import ...`` (tests/unit is on the path, like specutil).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from roughnet.results import Store

MESSAGES = 1000
PAYLOAD_BYTES = 1024
DURATION_S = 2.0


@dataclass
class PointSpec:
    """A point's truth: median one-way latency (µs), loss probability, per-run multiplicative noise."""

    params: dict[str, Any]
    median_us: float
    loss: float = 0.01
    run_sigma: float = 0.05  # spread of a run's level around the point's (lognormal sigma)
    msg_sigma: float = 0.25  # spread of messages inside a run
    levels: list[float] | None = None  # per repeat: multiply the run's latency (bistable points)
    repeats: int | None = None  # runs of this point (default: the sweep's)


@dataclass
class SweepSpec:
    scenario: str
    sweep_id: str
    axes: dict[str, list[Any]]
    points: list[PointSpec]
    repeats: int = 5
    seed: int = 1
    versions: dict[str, str] = field(default_factory=lambda: {"roughnet": "0.1.0", "agent": "0.1.0",
                                                                "kernel": "6.1.0"})  # fmt: skip


class _Sweep:
    """What ``Store.begin_sweep`` reads of a ``runspec.Sweep``."""

    def __init__(self, spec: SweepSpec, runs: int) -> None:
        self.scenario, self.sweep_id = spec.scenario, spec.sweep_id
        self.source, self.description = f"scenarios/{spec.scenario}.toml", "synthetic"
        self.axes, self.report, self.runs = spec.axes, {}, tuple(range(runs))


def _hist(samples_ns: np.ndarray) -> tuple[str, dict[str, float], int]:
    h = HdrHistogram(1000, 3_600_000_000_000, 3)
    for v in samples_ns:
        h.record_value(max(1000, int(v)))
    us = 1000.0
    st = {f"lat_{k}_us": h.get_value_at_percentile(q) / us
          for k, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9), ("p9999", 99.99),
                       ("p999999", 99.9999))}  # fmt: skip
    st |= {"lat_min_us": h.get_min_value() / us, "lat_mean_us": h.get_mean_value() / us,
           "lat_std_us": h.get_stddev() / us, "lat_max_us": h.get_max_value() / us}  # fmt: skip
    return h.encode().decode("ascii"), st, h.get_total_count()


def records(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every run record of the sweep, repeats interleaved like the planner does."""
    rng = np.random.default_rng(spec.seed)
    out = []
    most = max(p.repeats or spec.repeats for p in spec.points)
    for rep in range(most):
        for p in spec.points:
            if rep >= (p.repeats or spec.repeats):
                continue
            level = p.median_us * math.exp(rng.normal(0.0, p.run_sigma))
            if p.levels is not None:
                level *= p.levels[rep]
            lost = int(rng.binomial(MESSAGES, p.loss))
            received = MESSAGES - lost
            samples = level * 1000.0 * np.exp(rng.normal(0.0, p.msg_sigma, received))
            hdr, st, count = _hist(samples)
            run_id = hashlib.sha256(repr((spec.sweep_id, sorted(p.params.items()), rep)).encode()).hexdigest()[:12]
            metrics = {"sent": MESSAGES, "received": received, "lost": lost, "duplicates": 0, "reordered": 0,
                       "loss_ratio": lost / MESSAGES, "bytes": received * PAYLOAD_BYTES,
                       "throughput_bps": received * PAYLOAD_BYTES * 8 / DURATION_S, **st}  # fmt: skip
            out.append({
                "sweep_id": spec.sweep_id, "run_id": run_id, "index": len(out), "scenario": spec.scenario,
                "params": dict(p.params), "repeat": rep, "seed": spec.seed + rep, "status": "ok",
                "failure_reason": None, "stderr_tail": None, "started_at": "2026-11-24T10:00:00+00:00",
                "duration_s": DURATION_S + 0.5, "engine": "wire", "versions": dict(spec.versions),
                "pattern": "stream", "protocol": str(p.params.get("protocol", "udp")), "run": {},
                "validity": "valid", "validity_reasons": [], "points": None, "link_counters": {},
                "tcp_counters": {}, "metrics": metrics,
                "receivers": [{"host": "b", "metrics": {"received": received, "lost": lost}}],
                "histograms": [{"host": "b", "kind": "latency_intended", "hdr": hdr, "count": count}],
            })  # fmt: skip
    return out


def store_sweep(store: Store, spec: SweepSpec) -> list[dict[str, Any]]:
    """Write the sweep through the real Store API; returns its records."""
    recs = records(spec)
    store.begin_sweep(_Sweep(spec, len(recs)))
    for rec in recs:
        store.record_run(rec)
    return recs
