"""The report's link-efficiency tables (SEEDS S1): how much of the link's rate TCP and UDP got.

Owns picking the runs that fit (TCP or UDP, bulk or stream, ok, over one rate-limited link),
efficiency = throughput / link rate, and the two tables shaped like the original ns-3 scripts'
output: TCP (bytes received, throughput) and UDP (Tx bytes, Tx rate, packets received, Rx
rate, plus loss), each row one setting, with the link's rate and delay beside its label.
Throughput is application bytes received (``throughput_bps``), so headers keep efficiency
below 1 even on a perfect link (UDP: payload / (payload + 42 B) per frame).  No I/O, no
plotting; ``html`` places the section.
"""

from __future__ import annotations

import html
from typing import Any

from roughnet.report import fmt
from roughnet.report.shaping import VALIDITY_MARK

PROTOCOLS = ("tcp", "udp")
PATTERNS = ("bulk", "stream")
TCP_COLUMNS = ("bytes received", "throughput", "efficiency")
UDP_COLUMNS = ("Tx packets", "Tx bytes", "Tx rate", "packets received", "Rx rate", "loss", "efficiency")


def link_rate_delay(run: dict[str, Any]) -> tuple[float, int] | None:
    """(rate in bit/s, one-way delay in ns) of the run's single link, sender to receiver; None
    when the run has not exactly one link or that link has no rate."""
    links = (run.get("run") or {}).get("links") or []
    if len(links) != 1:
        return None
    fwd = links[0].get("forward") or {}
    rate = fwd.get("rate_bps")
    if not rate:
        return None
    return float(rate), int(fwd.get("delay_ns") or 0)


def efficiency(run: dict[str, Any]) -> float | None:
    """Throughput / link rate of one run (None when either is unknown)."""
    ld = link_rate_delay(run)
    tp = (run.get("metrics") or {}).get("throughput_bps")
    if ld is None or tp is None:
        return None
    return float(tp) / ld[0]


def _fits(run: dict[str, Any]) -> bool:
    return (run.get("status") == "ok" and run.get("protocol") in PROTOCOLS and run.get("pattern") in PATTERNS
            and link_rate_delay(run) is not None)  # fmt: skip


def _varying(runs: list[dict[str, Any]], param_keys: list[str]) -> list[str]:
    keys = []
    for k in param_keys:
        if k == "protocol":
            continue
        if len({str((r.get("params") or {}).get(k)) for r in runs}) > 1:
            keys.append(k)
    return keys


def _tx(run: dict[str, Any]) -> tuple[int | None, int | None, float | None]:
    """(packets sent, bytes sent, Tx rate in bit/s over the sending time) of a UDP run."""
    m = run.get("metrics") or {}
    w = (run.get("run") or {}).get("workload") or {}
    sent, size, dur_ns = m.get("sent"), w.get("payload_bytes"), w.get("duration_ns")
    if sent is None or not size:
        return sent, None, None
    tx_bytes = int(sent) * int(size)
    return int(sent), tx_bytes, (tx_bytes * 8 / (dur_ns / 1e9) if dur_ns else None)


def tables(runs: list[dict[str, Any]], param_keys: list[str]) -> dict[str, tuple[list[str], list[dict[str, str]]]]:
    """protocol -> (headers, rows of strings) for the TCP and UDP runs that fit; empty when none do.

    Rows keep the run order (the sweep's order: link first in S1)."""
    out: dict[str, tuple[list[str], list[dict[str, str]]]] = {}
    for proto in PROTOCOLS:
        sel = [r for r in runs if _fits(r) and r.get("protocol") == proto]
        if not sel:
            continue
        keys = _varying(sel, param_keys)
        cols = TCP_COLUMNS if proto == "tcp" else UDP_COLUMNS
        headers = ["#", *keys, "link rate", "delay", *cols, "validity"]
        rows = []
        for r in sel:
            params = r.get("params") or {}
            m = r.get("metrics") or {}
            rate, delay_ns = link_rate_delay(r) or (0.0, 0)
            eff = efficiency(r)
            row = {"#": str(r.get("index")), **{k: fmt.label(params.get(k, "")) for k in keys},
                   "link rate": fmt.value("throughput_bps", rate), "delay": _delay(delay_ns)}  # fmt: skip
            if proto == "tcp":
                row["bytes received"] = _count(m.get("bytes"))
                row["throughput"] = fmt.value("throughput_bps", m.get("throughput_bps"))
            else:
                sent, tx_bytes, tx_rate = _tx(r)
                row["Tx packets"] = _count(sent)
                row["Tx bytes"] = _count(tx_bytes)
                row["Tx rate"] = fmt.value("throughput_bps", tx_rate)
                row["packets received"] = _count(m.get("received"))
                row["Rx rate"] = fmt.value("throughput_bps", m.get("throughput_bps"))
                row["loss"] = fmt.value("loss_ratio", m.get("loss_ratio"))
            row["efficiency"] = "-" if eff is None else f"{eff:.3f}"
            validity = r.get("validity") or "valid"
            row["validity"] = f"{VALIDITY_MARK.get(validity, '?')} {validity}"
            rows.append(row)
        out[proto] = (headers, rows)
    return out


def _count(n: Any) -> str:
    return "-" if n is None else f"{int(n):,}"


def _delay(ns: int) -> str:
    if ns >= 1_000_000:
        return f"{ns / 1e6:g} ms"
    if ns >= 1_000:
        return f"{ns / 1e3:g} µs"
    return f"{ns} ns"


def section(runs: list[dict[str, Any]], param_keys: list[str]) -> str:
    """HTML of the efficiency tables, or "" when no run fits or the link rate is not swept
    (one link setting says nothing about efficiency against the link)."""
    fit = [r for r in runs if _fits(r)]
    if len({link_rate_delay(r) for r in fit}) < 2:
        return ""
    parts = ["<h2>Link efficiency (throughput / link rate)</h2>",
             "<p>One row per run, as the original's tables: efficiency is application bytes received per "
             "second over the link's nominal rate, so protocol headers keep it below 1 on a perfect link.</p>"]
    names = {"tcp": "TCP (bulk send)", "udp": "UDP (packets at a fixed interval, or as fast as possible: bulk)"}
    for proto, (headers, rows) in tables(runs, param_keys).items():
        parts.append(f"<h3>{html.escape(names[proto])}</h3>{fmt.table_html(headers, rows)}")
    return "".join(parts)
