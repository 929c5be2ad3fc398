#!/usr/bin/env python3
"""Summarise several bench/backends/run.py --json files: one row per run and back end (medians over its
rounds), then the range of each figure over the runs. Figures as in docs/wire.md's back-end table.

Usage: python3 bench/backends/summarize.py run1.json run2.json ...
"""

from __future__ import annotations

import json
import statistics
import sys


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rows(path: str) -> tuple[dict, dict]:
    d = json.load(open(path))
    res = d["results"]
    out = {}
    plain_best = min((r["p50_us"] for r in res.get("plain", [])), default=None)
    afp_bps = med([r["bps"] for r in res.get("afpacket", [])])
    plain_path = med([r["path_s_per_gb"] for r in res.get("plain", [])])
    for b, rs in res.items():
        if not rs:
            continue
        segs = sum(r["tcp"]["b.TcpInSegs"] or 0 for r in rs)
        fixed = [r["fixed"] for r in rs if r.get("fixed")]
        udp = [r["udp"] for r in rs if r.get("udp")]
        best = min(r["p50_us"] for r in rs)
        out[b] = {
            "gbps": med([r["bps"] for r in rs]) / 1e9,
            "vs_afpacket": med([r["bps"] for r in rs]) / afp_bps if afp_bps else None,
            "path_s_gb": med([r["path_s_per_gb"] for r in rs]),
            "path_minus_plain": med([r["path_s_per_gb"] for r in rs]) - plain_path if plain_path else None,
            "relay_s_gb": med([r["relay_s_per_gb"] for r in rs]) if b != "plain" else None,
            "fixed_relay_s_gb": med([f["relay_s_per_gb"] for f in fixed]) if fixed and b != "plain" else None,
            "udp_us_frame": med([u["relay_us_per_frame"] for u in udp]) if udp and b != "plain" else None,
            "rtt_best_p50": best,
            "rtt_added_best": best - plain_best if plain_best is not None else None,
            "rtt_p99_med": med([r["p99_us"] for r in rs]),
            "slow_rounds": sum(1 for r in rs if r["p50_us"] > 40),
            "rounds": len(rs),
            "ofo_10k": 1e4 * sum(r["tcp"]["b.TcpExtTCPOFOQueue"] or 0 for r in rs) / segs if segs else None,
            "rtx": sum(r["tcp"]["a.TcpRetransSegs"] or 0 for r in rs),
            "rtx_dsacked": sum(r["tcp"]["a.TcpExtTCPDSACKRecv"] or 0 for r in rs),
            "link_drops": sum(r["link_drops"] for r in rs),
        }
    return d["meta"], out


def fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def main() -> int:
    allrows: dict[str, dict[str, list]] = {}
    for path in sys.argv[1:]:
        meta, out = rows(path)
        print(f"== {path}: load {meta['load_start']} -> {meta.get('load_end')}, SCHED_FIFO {meta.get('realtime', 0)}")
        for b, v in out.items():
            print(f"  {b:9s} " + "  ".join(f"{k}={fmt(x)}" for k, x in v.items()))
            for k, x in v.items():
                allrows.setdefault(b, {}).setdefault(k, []).append(x)
    print("== ranges over the runs")
    for b, ks in allrows.items():
        parts = []
        for k, xs in ks.items():
            xs = [x for x in xs if x is not None]
            if not xs:
                continue
            parts.append(f"{k}={fmt(min(xs))}..{fmt(max(xs))}" if k not in ("slow_rounds", "rounds", "rtx",
                                                                          "rtx_dsacked", "link_drops")
                         else f"{k}={sum(xs)}")
        print(f"  {b:9s} " + "  ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
