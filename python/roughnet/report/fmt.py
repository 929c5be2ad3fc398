"""Numbers for people: parsing swept values for ordering, and display units of metrics.

Owns: ``axis_value`` (a swept value as written, e.g. "5%" or "10 KiB", to a
sortable number using ``roughnet.units``), ``order_values`` (numeric order when
every value of an axis parses to the same kind, file order otherwise), metric
name resolution (``[report] metrics`` names to stored columns) and display
scaling (µs/ms, bit/s..Gbit/s, %).  No plotting and no I/O here.
"""

from __future__ import annotations

import html
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from roughnet.results.schema import METRIC_BY_NAME

log = logging.getLogger(__name__)


def _parsers() -> list[tuple[str, Callable[[str], float]]]:
    """The unit parsers of ``roughnet.units`` that exist (guarded: written concurrently)."""
    try:
        from roughnet import units
    except ImportError:  # pragma: no cover - units is part of the package
        log.debug("roughnet.units not importable; swept values are ordered as written")
        return []
    out = []
    for kind, name in (
        ("fraction", "parse_fraction"),
        ("size", "parse_size_bytes"),
        ("rate", "parse_rate_bps"),
        ("duration", "parse_duration_ns"),
        ("msg_rate", "parse_msg_rate"),
        ("packets", "parse_packets"),
    ):
        fn = getattr(units, name, None)
        if fn is not None:
            out.append((kind, fn))
    return out


def axis_value(value: Any) -> tuple[str, float] | None:
    """(kind, number) of a swept value, or None when it is not a quantity.

    Bare numbers are kind ``number``; strings are tried with each unit parser.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return ("number", float(value))
    if not isinstance(value, str):
        return None
    for kind, parse in _parsers():
        try:
            parsed = parse(value)
        except (ValueError, TypeError, ArithmeticError):
            continue
        if parsed is None:
            continue
        return (kind, float(parsed))
    try:
        return ("number", float(value))
    except ValueError:
        return None


def order_values(values: Iterable[Any]) -> tuple[list[Any], dict[Any, float] | None]:
    """Distinct values in display order, and their numeric positions if numeric.

    Numeric when every value parses to a number of the same kind; then sorted
    by that number.  Otherwise the first-seen order is kept and the map is None.
    """
    distinct: list[Any] = []
    for v in values:
        if v not in distinct:
            distinct.append(v)
    parsed = [axis_value(v) for v in distinct]
    if distinct and all(p is not None for p in parsed) and len({p[0] for p in parsed}) == 1:  # type: ignore[index]
        nums = {v: p[1] for v, p in zip(distinct, parsed, strict=True)}  # type: ignore[index]
        return sorted(distinct, key=lambda v: nums[v]), nums
    return distinct, None


def label(value: Any) -> str:
    """A swept value as the user wrote it."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# --------------------------------------------------------------- metric names

#: ``[report] metrics`` names (spec.model.REPORT_METRICS) -> stored column.
REPORT_METRIC_COLUMNS: dict[str, str] = {
    "throughput": "throughput_bps",
    "loss": "loss_ratio",
    "lost": "lost",
    "duplicates": "duplicates",
    "reordered": "reordered",
    "link_drops": "link_drops",
    "tcp_retransmits": "tcp_retrans_segs",
    "cpu": "cpu_agents_s",
    "latency_actual_p50": "lat_actual_p50_us",
    "latency_actual_p99": "lat_actual_p99_us",
    # pattern sync (columns since results format 2)
    "goodput": "goodput_bps",
    "goodput_fraction": "goodput_fraction",
    "bundles_from_to": "bundles_from_to",
    "bundles_to_from": "bundles_to_from",
    "overhead": "overhead_ratio",
    "time_to_full_sync": "time_to_full_sync_s",
    # a sender's lag split and the hosts' UDP receive-buffer drops (columns since results format 3)
    "sender_held": "sched_held_fraction",
    "sender_late": "sched_own_late_fraction",
    "udp_rcvbuf_drops": "udp_rcvbuf_errors",
}
for _stat in ("min", "mean", "p50", "p90", "p99", "p999", "p9999", "p999999", "max"):
    REPORT_METRIC_COLUMNS[f"latency_{_stat}"] = f"lat_{_stat}_us"
    REPORT_METRIC_COLUMNS[f"rtt_{_stat}"] = f"lat_{_stat}_us"

#: Metrics plotted when the scenario gives no ``[report] metrics``, by pattern.
DEFAULT_METRICS: dict[str, tuple[str, ...]] = {
    "stream": ("lat_p50_us", "lat_p99_us", "loss_ratio", "throughput_bps"),
    "ping": ("lat_p50_us", "lat_p99_us"),
    "ramp": ("lat_p50_us", "lat_p99_us"),
    "bulk": ("throughput_bps",),
    "sync": (),  # drawn by the report's sync module (bundles per direction, goodput vs capacity, time to sync)
}
RTT_PATTERNS = ("ping", "ramp")


def metric_column(name: str) -> str | None:
    """Stored column of a report metric name (or a column name given directly)."""
    if name in METRIC_BY_NAME:
        return name
    return REPORT_METRIC_COLUMNS.get(name)


def metric_title(column: str, patterns: Iterable[str]) -> str:
    """"latency p99", or "round trip p99" when every run measured round trips."""
    text = METRIC_BY_NAME[column].label
    pats = set(patterns)
    if column.startswith("lat_") and pats and pats <= set(RTT_PATTERNS):
        text = text.replace("latency", "round trip")
    elif column.startswith("lat_") and pats & set(RTT_PATTERNS):
        text = text.replace("latency", "latency/RTT")
    return text


# --------------------------------------------------------------- display units


@dataclass(frozen=True)
class Scale:
    unit: str  # shown after numbers / on axes
    factor: float  # display = stored * factor


_RATE_STEPS = ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s"), (1.0, "bit/s"))
_SIZE_STEPS = ((1024.0**3, "GiB"), (1024.0**2, "MiB"), (1024.0, "KiB"), (1.0, "B"))


def scale_for(column: str, values: Iterable[float | None]) -> Scale:
    """A display scale that suits the largest of ``values`` for this metric."""
    unit = METRIC_BY_NAME[column].unit if column in METRIC_BY_NAME else ""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    top = max(finite, default=0.0)
    if unit == "us":
        return Scale("ms", 1e-3) if top >= 10_000 else Scale("µs", 1.0)
    if unit == "bit/s":
        for step, name in _RATE_STEPS:
            if top >= step:
                return Scale(name, 1 / step)
        return Scale("bit/s", 1.0)
    if unit == "bytes":
        for step, name in _SIZE_STEPS:
            if top >= step:
                return Scale(name, 1 / step)
        return Scale("B", 1.0)
    if unit == "fraction":
        return Scale("%", 100.0)
    if unit == "s":
        return Scale("s", 1.0)
    if unit == "ratio":
        return Scale("×", 1.0)
    return Scale("", 1.0)


def number(v: float) -> str:
    """3 significant digits, no exponent for ordinary magnitudes."""
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 0.01:
        return f"{v:.2f}"
    return f"{v:.2g}"


def value(column: str, v: float | None) -> str:
    """One metric value with its own unit ("812 µs", "1.20 ms", "9.47 Mbit/s", "5.0 %")."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    meta = METRIC_BY_NAME.get(column)
    if meta is not None and meta.sql_type == "BOOLEAN":
        return "yes" if v else "no"
    if meta is not None and meta.sql_type == "BIGINT":
        return f"{int(v):,}"
    s = scale_for(column, [v])
    if s.unit == "µs" and abs(v) >= 1000:
        s = Scale("ms", 1e-3)
    text = number(v * s.factor)
    if not s.unit:
        return text
    return f"{text} {s.unit}"


def table_html(headers: list[str], rows: list[dict[str, Any]], numeric: Iterable[str] = ()) -> str:
    """An HTML table of ``rows`` (dicts keyed by header), escaped; cells of ``numeric`` columns right-aligned."""
    num = set(numeric)

    def e(s: Any) -> str:
        return html.escape(str(s), quote=True)

    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{e(row[h])}</td>' if h in num else f"<td>{e(row[h])}</td>"
                         for h in headers) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
