"""The result lines a simulated agent prints: the same fields as roughnet-agent's (docs/agent-protocol.md).

Owns the translation from raw counts (what ``sim`` read back from ns-3's Applications, as plain
numbers) to result objects, and the latency objects with their HdrHistogram, made as the agent
makes them (crates/agent/src/hist.rs): the contract histogram (1000 ns to 1 h, 3 digits) serialised
in ``hdr``, the summary figures from a copy at 1 ns resolution.  Nothing here imports ns-3, so it is
tested with plain numbers.

A simulated agent uses no CPU of its own (the whole simulation runs in roughnet's process), so
results carry no ``cpu``; a simulated sender leaves exactly at its intended times, so its schedule
lags are zero by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hdrh.histogram import HdrHistogram

#: The agent's histogram bounds and precision (crates/agent/src/hist.rs).
LOWEST_NS = 1_000
HIGHEST_NS = 3_600_000_000_000
SIGFIG = 3
QUANTILES = ((0.50, "p50_us"), (0.90, "p90_us"), (0.99, "p99_us"), (0.999, "p999_us"), (0.9999, "p9999_us"),
             (0.999999, "p999999_us"))


def _us(ns: float) -> float:
    return round(ns) / 1000.0


def latency_object(values_ns: Sequence[int]) -> dict[str, Any]:
    """A latency object (``count``, ``min_us`` ... ``max_us``, ``hdr``) of one-way latencies in ns."""
    h = HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGFIG)
    fine = HdrHistogram(1, HIGHEST_NS, SIGFIG)
    clamped = 0
    for v in values_ns:
        v = max(0, int(v))
        if v > HIGHEST_NS:
            clamped += 1
            v = HIGHEST_NS
        h.record_value(v)
        fine.record_value(v)
    out: dict[str, Any] = {"count": len(values_ns)}
    if not values_ns:
        for k in ("min_us", "mean_us", "std_us", *(k for _, k in QUANTILES), "max_us"):
            out[k] = None
    else:
        out["min_us"] = _us(fine.get_min_value())
        out["mean_us"] = _us(fine.get_mean_value())
        out["std_us"] = _us(fine.get_stddev())
        for q, k in QUANTILES:
            out[k] = _us(fine.get_value_at_percentile(q * 100.0))
        out["max_us"] = _us(fine.get_max_value())
    if clamped:
        out["clamped"] = clamped
    out["hdr"] = h.encode().decode("ascii")
    return out


def _span(first_ns: int, last_ns: int) -> float:
    return (last_ns - first_ns) / 1e9 if first_ns >= 0 and last_ns >= first_ns else 0.0


def _rate(nbytes: int, duration_s: float) -> float | None:
    return round(nbytes * 8 / duration_s, 3) if duration_s > 0 else None


def _base(role: str, pattern: str, protocol: str, end_reason: str) -> dict[str, Any]:
    return {"v": 1, "type": "result", "role": role, "pattern": pattern, "protocol": protocol,
            "end_reason": end_reason}


def stream_receiver(r: dict[str, Any], pattern: str = "stream") -> dict[str, Any]:
    """``r``: expected (-1 unknown), received, duplicates, reordered, warmup_received, bytes, bad,
    highest (-1 none), first_ns, last_ns, end_reason, complete, lat_intended, lat_actual (ns)."""
    expected = r["expected"] if r["expected"] >= 0 else None
    lost = expected - r["received"] if expected is not None else max(0, r["highest"] + 1 - r["received"])
    duration = _span(r["first_ns"], r["last_ns"])
    return _base("receiver", pattern, "udp", r["end_reason"]) | {
        "expected": expected, "received": r["received"], "lost": max(0, lost), "duplicates": r["duplicates"],
        "reordered": r["reordered"], "warmup_received": r["warmup_received"], "bytes": r["bytes"],
        "duration_s": duration, "throughput_bps": _rate(r["bytes"], duration), "complete": bool(r["complete"]),
        "latency_intended": latency_object(r["lat_intended"]), "latency_actual": latency_object(r["lat_actual"]),
        "bad_messages": r["bad"],
    }


_NO_LAG = {"behind_max_us": 0.0, "behind_p99_us": 0.0, "late_fraction": 0.0, "own_behind_max_us": 0.0,
           "own_late_fraction": 0.0, "held_fraction": 0.0, "held_s": 0.0}


def stream_sender(r: dict[str, Any], peers: int, pattern: str = "stream") -> dict[str, Any]:
    """``r``: sent, warmup_sent, bytes, send_errors, first_ns, last_ns, finished (all sent before the timeout)."""
    duration = _span(r["first_ns"], r["last_ns"])
    return _base("sender", pattern, "udp", "complete" if r["finished"] else "timeout") | {
        "sent": r["sent"], "warmup_sent": r["warmup_sent"], "peers": peers, "bytes": r["bytes"],
        "duration_s": duration, "throughput_bps": _rate(r["bytes"], duration), "send_errors": r["send_errors"],
        "schedule": dict(_NO_LAG),
    }


def bulk_receiver(r: dict[str, Any]) -> dict[str, Any]:
    """``r``: bytes, first_ns, last_ns, end_reason, complete."""
    duration = _span(r["first_ns"], r["last_ns"])
    return _base("receiver", "bulk", "tcp", r["end_reason"]) | {
        "bytes": r["bytes"], "duration_s": duration, "throughput_bps": _rate(r["bytes"], duration),
        "complete": bool(r["complete"]),
    }


def bulk_sender(r: dict[str, Any], peers: int) -> dict[str, Any]:
    """``r``: sent (writes), bytes, send_errors, first_ns, last_ns, closed (done writing before the timeout)."""
    duration = _span(r["first_ns"], r["last_ns"])
    return _base("sender", "bulk", "tcp", "complete" if r["closed"] else "timeout") | {
        "sent": r["sent"], "peers": peers, "bytes": r["bytes"], "duration_s": duration,
        "throughput_bps": _rate(r["bytes"], duration), "send_errors": r["send_errors"],
    }
