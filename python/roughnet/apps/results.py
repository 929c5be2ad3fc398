"""What a run's user processes become in its record: ``processes``, ``process_series`` and histograms.

One row per process (``results.schema.PROCESS_COLUMNS``): its times relative to t0, final state against
the expected one, CPU and peak memory, its TCP connections' totals as the kernel counted them
(``apps.sockdiag``: retransmissions, bytes, smoothed RTT) with each connection under ``extra``, and the
latency distribution of the numbers it offered (``apps.appmetrics``).  Series rows are long: one per
process, interval and named value, ``source`` "tcp" (the kernel's view of its sockets, per sample) or
"app" (its own numbers, per series interval).  An offered latency distribution also goes to the record's
``histograms`` (kind ``latency_actual``, host ``process:<name>``) in HdrHistogram form.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from . import appmetrics

log = logging.getLogger(__name__)

#: tcp series fields (apps.sockdiag.SocketSampler.series) kept as named values.
TCP_SERIES = ("connections", "rtt_us", "rttvar_us", "snd_cwnd", "retrans", "bytes_sent", "bytes_acked",
              "bytes_received", "delivery_rate_bps")


def _rel(sup, t_ns: int | None) -> float | None:
    return None if t_ns is None else round((t_ns - sup.t0_ns) / 1e9, 6)


def _app_numbers(sup, p) -> tuple[dict[str, Any] | None, list[dict[str, Any]], dict[str, Any]]:
    """(latency distribution or None, app series rows, notes) of process ``p``."""
    m = p.spec.metrics or {}
    notes: dict[str, Any] = {}
    dist = None
    rows: list[dict[str, Any]] = []
    t0_unix = time.time() - (time.monotonic_ns() - sup.t0_ns) / 1e9
    try:
        if "json_lines" in m:
            src = p.stdout_path if m["json_lines"] == "stdout" else p.workdir / m["json_lines"]
            if not src.exists():
                notes["app_error"] = f"no file {m['json_lines']} in its working folder"
                return None, rows, notes
            jl = appmetrics.read_json_lines(src)
            notes["app_lines"] = len(jl.rows)
            notes["app_ignored_lines"] = jl.ignored
            key = m.get("latency")
            if key:
                dist = appmetrics.distribution(appmetrics.latency_from_json(jl, key, m.get("unit", "ms")))
            for r in appmetrics.series(jl.rows, t0_unix, sup.interval_s, key, m.get("unit", "ms")):
                rows.append(_app_row(p.name, r))
        elif "samples" in m:
            src = p.workdir / m["samples"]
            if not src.exists():
                notes["app_error"] = f"no file {m['samples']} in its working folder"
                return None, rows, notes
            s = appmetrics.read_samples(src, m.get("unit", "ms"))
            notes["app_malformed_lines"] = s.malformed
            dist = appmetrics.distribution(s.values_ns)
        elif "prometheus" in m:
            scraper = sup.scrapers.get(p.name)
            if scraper is not None:
                scrapes = scraper.scrapes()
                notes["app_scrapes"] = len(scrapes)
                errors = scraper.errors()
                if errors:
                    notes["app_scrape_errors"] = errors[:5]
                for t, samples in scrapes:
                    for smp in samples:
                        if smp.get("type") in ("counter", "gauge", "untyped"):
                            rows.append({"process": p.name, "source": "app", "name": _metric_name(smp),
                                         "t_s": round(t - t0_unix, 6), "interval_s": sup.interval_s,
                                         "value": smp.get("value")})
                if scrapes:
                    hists = appmetrics.prometheus_histograms(scrapes[-1][1])
                    if hists:
                        name, h = next(iter(sorted(hists.items())))
                        dist = appmetrics.histogram_distribution(h["buckets"], 1e9)
                        notes["app_histogram"] = name
    except (OSError, ValueError) as e:
        notes["app_error"] = str(e)
    return dist, rows, notes


def _metric_name(smp: dict[str, Any]) -> str:
    labels = smp.get("labels") or {}
    if not labels:
        return str(smp.get("name"))
    return f"{smp.get('name')}{{{','.join(f'{k}={v}' for k, v in sorted(labels.items()))}}}"


def _app_row(process: str, r: dict[str, Any]) -> dict[str, Any]:
    extra = {k: v for k, v in r.items() if k not in ("t_s", "interval_s", "name", "mean")}
    return {"process": process, "source": "app", "name": r.get("name"), "t_s": r.get("t_s"),
            "interval_s": r.get("interval_s"), "value": r.get("mean"), **extra}


def _plain(addr: str) -> str:
    return addr.removeprefix("::ffff:")


def name_conversations(rows: list[dict[str, Any]], analysis_file) -> None:
    """With ``capture = true``: each process connection's packets as the capture saw them (per captured
    interface and direction: packets, data segments and bytes, retransmissions, duplicate ACKs), under the
    row's ``captured`` key, so a conversation of the capture names the process it belonged to."""
    import json

    try:
        files = json.loads(analysis_file.read_text()).get("files", [])
    except (OSError, ValueError):
        return
    for row in rows:
        out = []
        for c in row.get("connections") or []:
            ends = {(_plain(c["src"]), c["sport"], _plain(c["dst"]), c["dport"]),
                    (_plain(c["dst"]), c["dport"], _plain(c["src"]), c["sport"])}
            for f in files:
                for d in f.get("tcp") or []:
                    if (d.get("src"), d.get("sport"), d.get("dst"), d.get("dport")) in ends:
                        out.append({"conversation": f"{d['src']}:{d['sport']} -> {d['dst']}:{d['dport']}",
                                    "link": f.get("link"), "captured_at": f.get("host"),
                                    **{k: d.get(k) for k in ("outbound", "packets", "data_segments", "data_bytes",
                                                             "retrans", "retrans_bytes", "dup_acks",
                                                             "zero_window")}})
        if out:
            row["captured"] = out


def collect(sup) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(processes, process_series, histograms) of a finished supervisor."""
    procs: list[dict[str, Any]] = []
    series: list[dict[str, Any]] = []
    hists: list[dict[str, Any]] = []
    for p in sup.procs:
        sampler = sup.samplers.get(p.spec.host)
        totals = sampler.totals(p.name) if sampler is not None else {}
        conns = sampler.connections(p.name) if sampler is not None else []
        if sampler is not None:
            for row in sampler.series(p.name):
                t_s = _rel(sup, row.get("t_ns"))
                for key in TCP_SERIES:
                    if row.get(key) is not None:
                        series.append({"process": p.name, "source": "tcp", "name": key, "t_s": t_s,
                                       "interval_s": sup.interval_s, "value": row[key]})
        dist, app_rows, notes = _app_numbers(sup, p)
        series.extend(app_rows)
        if dist and dist.get("count") and dist.get("hdr"):
            hists.append({"host": f"process:{p.name}", "kind": "latency_actual", "hdr": dist["hdr"],
                          "count": dist["count"]})
        reason = p.judge()
        row: dict[str, Any] = {
            "name": p.name,
            "host": p.spec.host,
            "kind": "image" if p.spec.in_container else "command",
            "run_as": f"{p.user.name} ({p.user.uid}:{p.user.gid})",
            "started_s": _rel(sup, p.started_ns),
            "ready_s": _rel(sup, p.ready_ns),
            "ended_s": _rel(sup, p.ended_ns),
            "final": p.final_state() if p.proc is not None else None,
            "expected": p.spec.expect or "default",
            "ok": reason is None,
            "reason": reason,
            "restarts": p.restarts,
            "cpu_s": p.cpu_s(),
            "rss_max_bytes": max(p.rss_max_bytes, p.sampler.snapshot()["rss_max_bytes"] if p.sampler else 0),
            "tcp_connections": totals.get("connections"),
            "tcp_retrans": totals.get("total_retrans"),
            "tcp_bytes_sent": totals.get("bytes_sent"),
            "tcp_bytes_acked": totals.get("bytes_acked"),
            "tcp_bytes_received": totals.get("bytes_received"),
            "tcp_rtt_us": totals.get("rtt_us_mean"),
            "app_count": dist.get("count") if dist else None,
            "lat_p50_us": dist.get("p50_us") if dist else None,
            "lat_p90_us": dist.get("p90_us") if dist else None,
            "lat_p99_us": dist.get("p99_us") if dist else None,
            "lat_max_us": dist.get("max_us") if dist else None,
            # what is not a column: under ``extra`` in the store
            "command": list(p.spec.command) if p.spec.command else None,
            "image": p.spec.image or p.spec.image_ref,
            "stop_sent": p.stop_sent,
            "killed": p.killed,
            "earlier_exits": p.exits or None,
            "tcp": totals or None,
            "connections": conns or None,
            "app": {k: v for k, v in dist.items() if k != "hdr"} if dist else None,
            **notes,
        }
        if sampler is None and getattr(sup, "sockets_note", None):
            row["tcp_note"] = sup.sockets_note
        if p.container is not None or p.spec.image:
            row["image_info"] = getattr(p, "image_info", None)
        procs.append(row)
    return procs, series, hists
