"""RTI Perftest-style summary lines (``roughnet report --format perftest``).

Owns the text layout only.  It follows RTI Perftest's CSV output format (the
default since Perftest 3.1; documented in rticommunity/rtiperftest,
srcDoc/designDocuments/280-ouput-format.md): a title line, a header line of
comma-separated column names, and value lines where every value is
right-aligned to the width of its header cell, e.g.::

    One-way Latency Summary:
    Length (Bytes), Ave (us), Std (us), Min (us), Max (us), 50% (us), 90% (us), 99% (us), 99.99% (us), 99.9999% (us), CPU %
               100,       98,    129.3,       45,      544,       55,       88,      544,         544,           544, 26.64

    Throughput Summary:
    Length (Bytes), Total Samples, Ave Samples/s,    Ave Mbps, Lost Samples, Lost Samples (%), CPU %
               100,       9772745,       1954063,      1563.3,            0,             0.00, 20.34

so the notebooks that parse Perftest output (SEEDS S2) read these lines too.
Per run, a line ``Run <index> (<run id>): k=v ...`` precedes its blocks.
Stream runs print a one-way latency summary (from the intended send time) and a
throughput summary per receiver; ping/ramp runs a round-trip latency summary
(labelled as such: Perftest itself prints RTT/2 as one-way, we do not);
bulk runs a throughput summary.  CPU % is the agents' CPU time over the run's
duration (all agents of the run for latency lines; for throughput lines the
receiver's own when its metrics carry ``cpu_agents_s``, else all agents').
"""

from __future__ import annotations

from typing import Any

LATENCY_HEADER = (
    "Length (Bytes)",
    " Ave (us)",
    " Std (us)",
    " Min (us)",
    " Max (us)",
    " 50% (us)",
    " 90% (us)",
    " 99% (us)",
    " 99.99% (us)",
    " 99.9999% (us)",
    " CPU %",
)
THROUGHPUT_HEADER = (
    "Length (Bytes)",
    " Total Samples",
    " Ave Samples/s",
    "    Ave Mbps",
    " Lost Samples",
    " Lost Samples (%)",
    " CPU %",
)
LATENCY_METRICS = (
    "lat_mean_us",
    "lat_std_us",
    "lat_min_us",
    "lat_max_us",
    "lat_p50_us",
    "lat_p90_us",
    "lat_p99_us",
    "lat_p9999_us",
    "lat_p999999_us",
)


def _cells(header: tuple[str, ...], values: list[str]) -> str:
    return ",".join(v.rjust(len(h)) for h, v in zip(header, values, strict=True))


def _int(v: float | None) -> str:
    return "-" if v is None else f"{round(v):d}"


def _fixed(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _cpu_percent(cpu_s: float | None, duration_s: float | None) -> float | None:
    if cpu_s is None or not duration_s or duration_s <= 0:
        return None
    return 100.0 * cpu_s / duration_s


def latency_line(length: int, metrics: dict[str, Any], duration_s: float | None) -> str:
    m = [metrics.get(k) for k in LATENCY_METRICS]
    values = [
        str(length),
        _int(m[0]),
        _fixed(m[1], 1),
        *[_int(v) for v in m[2:]],
        _fixed(_cpu_percent(metrics.get("cpu_agents_s"), duration_s), 2),
    ]
    return _cells(LATENCY_HEADER, values)


def throughput_line(length: int, metrics: dict[str, Any], duration_s: float | None) -> str:
    received = metrics.get("received")
    lost = metrics.get("lost")
    bps = metrics.get("throughput_bps")
    nbytes = metrics.get("bytes")
    # the receiver's own measuring time: bytes*8/throughput (first to last arrival)
    active_s = nbytes * 8 / bps if nbytes and bps else duration_s
    rate = received / active_s if received is not None and active_s else None
    lost_pct = (100.0 * lost / (received + lost)) if received is not None and lost is not None and received + lost else 0.0
    values = [
        str(length),
        _int(received),
        _int(rate),
        _fixed(bps / 1e6 if bps is not None else None, 1),
        _int(lost if lost is not None else 0),
        _fixed(lost_pct, 2),
        _fixed(_cpu_percent(metrics.get("cpu_agents_s"), duration_s), 2),
    ]
    return _cells(THROUGHPUT_HEADER, values)


def _length(run: dict[str, Any]) -> int:
    wl = (run.get("run") or {}).get("workload") or {}
    return int(wl.get("payload_bytes") or 0)


def lines_for_runs(runs: list[dict[str, Any]]) -> list[str]:
    """Perftest-style blocks for each run in order (blank line between runs)."""
    out: list[str] = []
    for r in runs:
        params = " ".join(f"{k}={v}" for k, v in (r.get("params") or {}).items())
        title = f"Run {r.get('index')} ({r.get('run_id')})" + (f": {params}" if params else "")
        if out:
            out.append("")
        if r.get("status") != "ok":
            out.append(f"{title}: failed: {r.get('failure_reason') or 'no reason recorded'}")
            continue
        validity = r.get("validity") or "valid"
        if validity != "valid":
            reasons = "; ".join(r.get("validity_reasons") or [])
            title += f" [{validity.upper()}: {reasons}]"
        out.append(title)
        pattern = r.get("pattern")
        metrics = r.get("metrics") or {}
        length = _length(r)
        duration = r.get("duration_s")
        if pattern in ("stream", "ping", "ramp") and metrics.get("lat_p50_us") is not None:
            out.append("One-way Latency Summary:" if pattern == "stream" else "Round-trip Latency Summary:")
            out.append(",".join(LATENCY_HEADER))
            out.append(latency_line(length, metrics, duration))
        if pattern in ("stream", "bulk"):
            receivers = r.get("receivers") or []
            out.append("Throughput Summary:")
            out.append(",".join(THROUGHPUT_HEADER))
            if receivers:
                for rec in receivers:
                    rm = dict(rec.get("metrics") or {})
                    if rm.get("cpu_agents_s") is None:  # receiver did not report its own
                        rm["cpu_agents_s"] = metrics.get("cpu_agents_s")
                    out.append(throughput_line(length, rm, duration))
            else:
                out.append(throughput_line(length, metrics, duration))
    return out
