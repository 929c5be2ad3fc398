"""The report's fan-out table: one row per subscriber of every run that had more than one.

Owns turning the stored per-receiver metrics (the ``receivers`` table, as
``Store.runs()`` returns them under ``receivers``) into table rows and the
HTML section around them, so a one-to-many run shows how each subscriber
fared rather than only the run's aggregate.  No I/O, no plotting.
"""

from __future__ import annotations

from typing import Any

from roughnet.report import fmt

#: (column header, metric key) in display order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("received", "received"),
    ("lost", "lost"),
    ("message loss", "loss_ratio"),
    ("duplicates", "duplicates"),
    ("reordered", "reordered"),
    ("latency p50", "lat_p50_us"),
    ("latency p99", "lat_p99_us"),
    ("latency max", "lat_max_us"),
    ("throughput", "throughput_bps"),
)


def table(runs: list[dict[str, Any]], param_keys: list[str]) -> tuple[list[str], list[dict[str, str]]]:
    """(headers, rows) for runs with two or more receivers; empty rows when there are none."""
    headers = ["#", *param_keys, "subscriber", *(c[0] for c in COLUMNS)]
    rows: list[dict[str, str]] = []
    for r in runs:
        receivers = r.get("receivers") or []
        if len(receivers) < 2:
            continue
        params = r.get("params") or {}
        for rec in receivers:
            m = rec.get("metrics") or {}
            row = {"#": str(r.get("index", "")), **{k: fmt.label(params.get(k, "")) for k in param_keys},
                   "subscriber": str(rec.get("host", ""))}
            row.update({head: fmt.value(key, m.get(key)) for head, key in COLUMNS})
            rows.append(row)
    return headers, rows


def section(runs: list[dict[str, Any]], param_keys: list[str]) -> str:
    """The HTML section (empty string when no run had more than one receiver)."""
    headers, rows = table(runs, param_keys)
    if not rows:
        return ""
    table_html = fmt.table_html(headers, rows, {c[0] for c in COLUMNS} | {"#"})
    note = ("<p>Each subscriber of a one-to-many run, as its own agent measured it (the run's row above "
            "sums the counts and shows the slowest subscriber's latency).</p>")
    return f"<h2>Fan-out: every subscriber</h2>{note}{table_html}"
