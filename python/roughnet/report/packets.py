"""The report's packet-analysis table: what the captures (``capture = true``) saw, one row per run.

Owns turning the ``pcap_*`` metrics of stored runs (written by ``roughnet.capture``;
the results store keeps them in ``metrics_extra``) into table rows and the
HTML section around them. Runs without captures are left out; a sweep
without any gives no section. No I/O, no plotting.
"""

from __future__ import annotations

from typing import Any

from roughnet.report import fmt

#: (column header, metric key, kind) in display order; kind "int", "ratio" (shown as %) or "float".
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("packets", "pcap_packets", "int"),
    ("TCP data segments", "pcap_tcp_segments", "int"),
    ("retransmissions", "pcap_tcp_retrans", "int"),
    ("retrans. share", "pcap_tcp_retrans_ratio", "ratio"),
    ("dup ACKs", "pcap_dup_acks", "int"),
    ("zero window", "pcap_zero_window", "int"),
    ("segments / message", "pcap_segments_per_message", "float"),
    ("UDP datagrams", "pcap_udp_datagrams", "int"),
    ("IP fragments", "pcap_ip_fragments", "int"),
    ("capture drops", "pcap_capture_drops", "int"),
    # Not from the capture: the agent's count of sends its previous send still blocked (docs/agent-protocol.md).
    ("sender held", "sched_held_fraction", "ratio"),
)


def _cell(kind: str, v: Any) -> str:
    if v is None:
        return "-"
    if kind == "int":
        return f"{int(v):,}"
    if kind == "ratio":
        return f"{fmt.number(float(v) * 100)} %"
    return fmt.number(float(v))


def captured(run: dict[str, Any]) -> bool:
    return (run.get("metrics") or {}).get("pcap_packets") is not None


def table(runs: list[dict[str, Any]], param_keys: list[str]) -> tuple[list[str], list[dict[str, str]]]:
    """(headers, rows) of the runs that carry capture metrics."""
    headers = ["#", *param_keys, *(c[0] for c in COLUMNS)]
    rows = []
    for r in runs:
        if not captured(r):
            continue
        m = r.get("metrics") or {}
        params = r.get("params") or {}
        row = {"#": str(r.get("index", "")), **{k: fmt.label(params.get(k, "")) for k in param_keys}}
        row.update({head: _cell(kind, m.get(key)) for head, key, kind in COLUMNS})
        rows.append(row)
    return headers, rows


def section(runs: list[dict[str, Any]], param_keys: list[str]) -> str:
    """The HTML section (empty string when no run was captured)."""
    headers, rows = table(runs, param_keys)
    if not rows:
        return ""
    table_html = fmt.table_html(headers, rows, {c[0] for c in COLUMNS} | {"#"})
    note = (
        "<p>From the packet captures (tcpdump on every host interface of each link with <code>capture = true</code>, "
        "headers only). Each packet is counted once, on the interface it left by, before the link could drop it. "
        "A retransmission is a TCP data segment whose sequence range had been sent before; a duplicate ACK repeats "
        "the previous ACK and window while data is outstanding; segments per message are the packets carrying "
        "data from the sending host divided by the messages it sent (warm-up included). Per-flow details: "
        "<code>capture-analysis.json</code> in each run's artifacts. <em>Sender held</em> is the agent's, not the "
        "capture's: the share of messages the sender could not hand over on time because its previous send was "
        "still blocked (a full socket send buffer or the protocol's flow control: the buffer overflow at the "
        "sender), <code>-</code> from agents that do not report it.</p>"
    )
    return (f"<h2>Packet analysis ({len(rows)} captured run(s))</h2>{note}"
            f"{table_html}")
