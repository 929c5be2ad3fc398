"""Turning stored runs into what the report draws: axes roles, series, panels, tables.

Owns the data shaping of the report and nothing visual: which swept key is the
x axis, which one makes lines and which one panels (``[report]`` hints or the
first three varying keys), the metric list, the points of each line (sorted
numerically by the parsed swept value), latency CDFs decoded from the stored
HDR histograms, ramp series, and the rows of the run table / CLI summary.
``plots`` draws these structures; ``html`` lays them out.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from roughnet.report import fmt

log = logging.getLogger(__name__)

VALIDITY_MARK = {"valid": "✓", "suspect": "⚠", "invalid": "✗"}


@dataclass
class Point:
    x: Any  # the swept value as written ("5%")
    x_num: float | None  # its numeric position if the axis is numeric
    y: float  # stored units (µs, bit/s, fraction...)
    validity: str  # valid | suspect | invalid
    run_index: int
    run_id: str


@dataclass
class Line:
    label: str  # "payload=1 KiB", or "" when there is no line axis
    points: list[Point] = field(default_factory=list)
    index: int = 0  # position of its value on the line axis (the same colour in every panel)
    # x -> (estimate, lo, hi) over the repeats of that point, and the flagged x values (``points.attach_intervals``)
    intervals: dict[Any, tuple[float, float, float]] = field(default_factory=dict)
    flagged: set[Any] = field(default_factory=set)


@dataclass
class Panel:
    title: str  # "protocol=tcp", or "" when there is no panel axis
    lines: list[Line] = field(default_factory=list)


@dataclass
class Roles:
    x: str | None
    lines: str | None
    panels: list[str]  # third axis, plus any further varying axes folded into panels


@dataclass
class MetricPlot:
    column: str
    title: str
    x_axis: str | None
    x_numeric: bool
    x_order: list[Any]  # every x value in display order
    panels: list[Panel]
    grid_cols: int | None = None  # panels per row when they form a grid (two panel keys)


@dataclass
class Curve:
    label: str
    index: int  # the same label has the same index (colour) in every panel
    values_us: list[float]  # latency at each step (µs)
    fractions: list[float]  # cumulative fraction 0..1 at each step
    count: int
    validity: str


@dataclass
class CurvePanel:
    title: str
    curves: list[Curve] = field(default_factory=list)


# ------------------------------------------------------------------ axes


def _hint(report: dict[str, Any] | None, key: str) -> Any:
    return (report or {}).get(key) or None


def axis_values(axes: dict[str, list[Any]], runs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Values of each swept key: the declared axis, extended by values seen in runs."""
    out: dict[str, list[Any]] = {k: list(v) for k, v in (axes or {}).items()}
    for r in runs:
        for k, v in (r.get("params") or {}).items():
            vals = out.setdefault(k, [])
            if v not in vals:
                vals.append(v)
    return out


def choose_roles(axes: dict[str, list[Any]], report: dict[str, Any] | None = None) -> Roles:
    """x / lines / panels from the ``[report]`` hints, else the varying keys in file order.

    Keys with a single value never take a role unless a hint names them;
    varying keys beyond the third are folded into the panels.
    """
    varying = [k for k, v in axes.items() if len(v) > 1]
    hints: dict[str, str | None] = {}
    for name in ("x", "lines", "panels"):
        h = _hint(report, name)
        if h is not None and h not in axes:
            log.warning("[report] %s = %r is not a swept key; ignored", name, h)
            h = None
        if h is not None and h in hints.values():
            h = None
        hints[name] = h
    free = [k for k in varying if k not in hints.values()]

    def role(name: str) -> str | None:
        if hints[name] is not None:
            return hints[name]
        return free.pop(0) if free else None

    x = role("x")
    lines = role("lines")
    panel = role("panels")
    panels = ([panel] if panel else []) + free
    return Roles(x=x, lines=lines, panels=panels)


def _key_label(keys: list[str], params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={fmt.label(params.get(k))}" for k in keys)


def _ordered(values: Iterable[Any]) -> list[Any]:
    return fmt.order_values(values)[0]


def metrics_for(patterns: Iterable[str], report: dict[str, Any] | None) -> list[str]:
    """Stored columns to plot: the ``[report] metrics`` hint, else by pattern."""
    hinted = _hint(report, "metrics")
    out: list[str] = []
    if hinted:
        for name in hinted:
            col = fmt.metric_column(name)
            if col is None:
                log.warning("[report] metric %r is unknown; ignored", name)
            elif col not in out:
                out.append(col)
        if out:
            return out
    for p in patterns:
        for col in fmt.DEFAULT_METRICS.get(p, ()):
            if col not in out:
                out.append(col)
    return out


# ------------------------------------------------------------------ series


def metric_plot(
    runs: list[dict[str, Any]], column: str, roles: Roles, axes: dict[str, list[Any]]
) -> MetricPlot:
    """Panels of lines of points of one metric; runs without a value are left out.

    Panels, lines and points are ordered numerically by the parsed swept value
    when every value of that key parses to one kind of quantity, else in file order.
    """
    x_order, x_nums = fmt.order_values(axes.get(roles.x, []) if roles.x else [])
    panel_keys = _panel_keys(runs, roles, axes)
    line_values = _ordered(axes.get(roles.lines, [])) if roles.lines else [None]
    panels: dict[tuple[Any, ...], Panel] = {
        pk: Panel(title=_key_label(roles.panels, dict(zip(roles.panels, pk, strict=True))))
        for pk in panel_keys
    }
    lines: dict[tuple[tuple[Any, ...], Any], Line] = {}
    for pk, panel in panels.items():
        for i, lv in enumerate(line_values):
            line = Line(label=f"{roles.lines}={fmt.label(lv)}" if roles.lines else "", index=i)
            lines[(pk, lv)] = line
            panel.lines.append(line)
    patterns = {r.get("pattern") for r in runs}
    for r in runs:
        if r.get("status") != "ok":
            continue
        y = (r.get("metrics") or {}).get(column)
        if y is None or (isinstance(y, float) and not math.isfinite(y)):
            continue
        params = r.get("params") or {}
        pk = tuple(params.get(k) for k in roles.panels)
        lv = params.get(roles.lines) if roles.lines else None
        line = lines.get((pk, lv))
        if line is None:
            continue
        xv = params.get(roles.x) if roles.x else None
        line.points.append(
            Point(
                x=xv,
                x_num=x_nums.get(xv) if x_nums else None,
                y=float(y),
                validity=r.get("validity") or "valid",
                run_index=r.get("index") or 0,
                run_id=r.get("run_id", ""),
            )
        )
    position = {v: i for i, v in enumerate(x_order)}
    for line in lines.values():
        line.points.sort(key=lambda p: (position.get(p.x, len(position)), p.run_index))
    out_panels = [p for p in panels.values() if any(line.points for line in p.lines)]
    for p in out_panels:
        p.lines = [line for line in p.lines if line.points]
    grid_cols = None
    if len(roles.panels) >= 2 and len(out_panels) == len(panel_keys):
        # a full grid: one column per value of the last panel key
        grid_cols = len({pk[-1] for pk in panel_keys})
    return MetricPlot(
        column=column,
        title=fmt.metric_title(column, patterns - {None}),
        x_axis=roles.x,
        x_numeric=x_nums is not None,
        x_order=x_order,
        panels=out_panels,
        grid_cols=grid_cols,
    )


def _panel_keys(runs: list[dict[str, Any]], roles: Roles, axes: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
    if not roles.panels:
        return [()]
    seen = []
    for r in runs:
        params = r.get("params") or {}
        key = tuple(params.get(k) for k in roles.panels)
        if key not in seen:
            seen.append(key)
    orders = [fmt.order_values(axes.get(k, [])) for k in roles.panels]

    def sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
        out = []
        for v, (order, _) in zip(key, orders, strict=True):
            out.append(order.index(v) if v in order else len(order))
        return tuple(out)

    return sorted(seen, key=sort_key)


def mean_by_x(line: Line) -> list[tuple[Any, float | None, float]]:
    """(x, x_num, mean y) per distinct x of a line (repeats averaged), in line order."""
    groups: dict[Any, list[Point]] = {}
    for p in line.points:
        groups.setdefault(p.x, []).append(p)
    return [(x, ps[0].x_num, sum(p.y for p in ps) / len(ps)) for x, ps in groups.items()]


# ------------------------------------------------------------------ histograms


def _decode(hdr: str):  # -> HdrHistogram
    from hdrh.histogram import HdrHistogram

    return HdrHistogram.decode(hdr)


#: The last few merges (``merge_histograms``), by their histograms' contents: the report merges a run's receivers
#: twice (the CDF panel and the explore section), 10,000 histograms at 100 cars.
_MERGED: dict[tuple[Any, ...], Any] = {}
_MERGED_KEEP = 8


def merge_histograms(hs: list[dict[str, Any]], run_id: Any = None):  # -> HdrHistogram | None
    """The stored histograms ``hs`` (one run's, receivers and kinds as chosen) added into one; an unreadable blob is
    logged and left out (a corrupt blob must not sink the report); None when none is readable. The result is
    shared with the next caller asking for the same histograms: read it, do not add to it."""
    key = (run_id, *((h.get("kind"), h.get("hdr")) for h in hs))
    if key in _MERGED:
        return _MERGED[key]
    merged = _merge(hs, run_id)
    if len(_MERGED) >= _MERGED_KEEP:
        _MERGED.pop(next(iter(_MERGED)))
    _MERGED[key] = merged
    return merged


def _merge(hs: list[dict[str, Any]], run_id: Any):
    merged = None
    for h in hs:
        try:
            decoded = _decode(h["hdr"])
        except Exception as e:  # noqa: BLE001
            log.warning("histogram of run %s (%s) unreadable: %s", run_id, h.get("kind"), e)
            continue
        if merged is None:
            merged = decoded
        else:
            merged.add(decoded)
    return merged


def cdf_points(histogram: Any) -> tuple[list[float], list[float]]:
    """(values in µs, cumulative fraction) at each recorded bucket of an HdrHistogram."""
    total = histogram.get_total_count()
    xs: list[float] = []
    ys: list[float] = []
    if total <= 0:
        return xs, ys
    for item in histogram.get_recorded_iterator():
        xs.append(item.value_iterated_to / 1000.0)
        ys.append(item.total_count_to_this_value / total)
    return xs, ys


def latency_cdfs(
    runs: list[dict[str, Any]], histograms: list[dict[str, Any]], roles: Roles
) -> list[CurvePanel]:
    """One panel per x-axis value, one curve per run (receivers merged).

    Uses ``latency_intended`` histograms (one-way, from the intended send
    time), or ``rtt_intended`` for ping/ramp runs.
    """
    by_run: dict[str, list[dict[str, Any]]] = {}
    for h in histograms:
        by_run.setdefault(h["run_id"], []).append(h)
    panels: dict[Any, CurvePanel] = {}
    x_order = _ordered((r.get("params") or {}).get(roles.x) for r in runs) if roles.x else [None]
    for xv in x_order:
        panels[xv] = CurvePanel(title=f"{roles.x}={fmt.label(xv)}" if roles.x else "")
    others = [k for k in [roles.lines, *roles.panels] if k]
    labels: dict[str, int] = {}
    for r in runs:
        hs = [h for h in by_run.get(r.get("run_id"), []) if h["kind"] in ("latency_intended", "rtt_intended")]
        if not hs:
            continue
        merged = merge_histograms(hs, r.get("run_id"))
        if merged is None:
            continue
        xs, ys = cdf_points(merged)
        if not xs:
            continue
        params = r.get("params") or {}
        label = _key_label(others, params) or f"run {r.get('index')}"
        index = labels.setdefault(label, len(labels))
        xv = params.get(roles.x) if roles.x else None
        panel = panels.setdefault(xv, CurvePanel(title=f"{roles.x}={fmt.label(xv)}" if roles.x else ""))
        panel.curves.append(
            Curve(label=label, index=index, values_us=xs, fractions=ys, count=merged.get_total_count(),
                  validity=r.get("validity") or "valid")
        )
    return [p for p in panels.values() if p.curves]


# ------------------------------------------------------------------ ramp


@dataclass
class RampSeries:
    label: str
    sizes: list[float]  # bytes
    rtts_us: list[float]
    validity: str


def ramp_panels(runs: list[dict[str, Any]], roles: Roles) -> list[tuple[str, list[RampSeries]]]:
    """Ramp runs: RTT against message size, one series per run.

    The plot's x axis is the message size, so the sweep's keys only group the runs: one panel
    per value of the panel keys (S4: one panel per send interval), else per value of the x key,
    else a single panel; series are labelled by the remaining keys (lines first)."""
    ramp_runs = [r for r in runs if r.get("pattern") == "ramp" and r.get("points")]
    if not ramp_runs:
        return []
    group = list(roles.panels) or ([roles.x] if roles.x else [])
    others = [k for k in [roles.lines, roles.x, *roles.panels] if k and k not in group]
    keys = _panel_keys(ramp_runs, Roles(x=None, lines=None, panels=group), _seen_axes(ramp_runs, group))
    out: list[tuple[str, list[RampSeries]]] = []
    for key in keys:
        series = []
        for r in ramp_runs:
            params = r.get("params") or {}
            if tuple(params.get(k) for k in group) != key:
                continue
            pts = sorted((float(s), float(t)) for s, t in r["points"])
            series.append(
                RampSeries(
                    label=_key_label(others, params) or f"run {r.get('index')}",
                    sizes=[p[0] for p in pts],
                    rtts_us=[p[1] for p in pts],
                    validity=r.get("validity") or "valid",
                )
            )
        if series:
            out.append((_key_label(group, dict(zip(group, key, strict=True))), series))
    return out


def _seen_axes(runs: list[dict[str, Any]], keys: list[str]) -> dict[str, list[Any]]:
    """Values of ``keys`` in ``runs``, for ordering (numerically when they parse)."""
    return {k: _ordered(dict.fromkeys((r.get("params") or {}).get(k) for r in runs)) for k in keys}


# ------------------------------------------------------------------ tables


#: Key columns of sync runs in the run table / CLI summary (instead of latency columns).
SYNC_TABLE_COLUMNS = ("bundles_from_to", "bundles_to_from", "goodput_bps", "goodput_fraction", "full_sync",
                      "time_to_full_sync_s")  # fmt: skip


def sync_directions(runs: Iterable[dict[str, Any]]) -> tuple[str, str]:
    """Names of the two directions of sync runs: ("ship→shore", "shore→ship") from the runs'
    ``from`` / ``to`` hosts when every sync run has the same, else ("from→to", "to→from")."""
    pairs = set()
    for r in runs:
        if r.get("pattern") != "sync":
            continue
        w = (r.get("run") or {}).get("workload") or {}
        rx = w.get("receivers") or []
        pairs.add((w.get("sender"), rx[0] if rx else None))
    if len(pairs) == 1:
        a, b = next(iter(pairs))
        if a and b:
            return f"{a}→{b}", f"{b}→{a}"
    return "from→to", "to→from"


def key_columns(patterns: Iterable[str], directions: tuple[str, str] | None = None) -> list[tuple[str, str]]:
    """(column, header) of the key metrics shown for every run, by the patterns present.

    ``directions`` names the two directions of sync runs (``sync_directions``)."""
    pats = [p for p in patterns if p]
    cols: list[str] = []
    for p in pats:
        for c in (SYNC_TABLE_COLUMNS if p == "sync" else fmt.DEFAULT_METRICS.get(p, ())):
            if c not in cols:
                cols.append(c)
    if any(p in ("stream", "ping", "ramp") for p in pats) and "loss_ratio" not in cols:
        cols.append("loss_ratio")
    if not cols:
        cols = ["lat_p50_us", "lat_p99_us", "loss_ratio", "throughput_bps"]
    headers = {
        "lat_p50_us": "p50",
        "lat_p99_us": "p99",
        "loss_ratio": "msg loss",
        "throughput_bps": "throughput",
        "bundles_from_to": f"bundles {(directions or ('from→to',))[0]}",
        "bundles_to_from": f"bundles {(directions or ('', 'to→from'))[1]}",
        "goodput_bps": "goodput",
        "goodput_fraction": "of capacity",
        "full_sync": "full sync",
        "time_to_full_sync_s": "time to sync",
    }
    rtt_only = set(pats) <= set(fmt.RTT_PATTERNS) and bool(pats)
    out = []
    for c in cols:
        h = headers.get(c, c)
        if c.startswith("lat_"):
            h = f"rtt {h}" if rtt_only else f"latency {h}"
        out.append((c, h))
    return out


def run_table(runs: list[dict[str, Any]], param_keys: list[str]) -> tuple[list[str], list[dict[str, str]]]:
    """Headers and string rows of the table of every run (report and CLI summary)."""
    keys = []
    fixed = {"#", "run", "repeat", "status", "validity", *param_keys}
    for col, header in key_columns(dict.fromkeys(r.get("pattern") for r in runs), sync_directions(runs)):
        while header in fixed:  # a swept key named like a metric header
            header += " (measured)"
        fixed.add(header)
        keys.append((col, header))
    repeats = any((r.get("repeat") or 0) > 0 for r in runs)
    headers = ["#", "run", *param_keys, *(["repeat"] if repeats else []), "status", "validity",
               *[h for _, h in keys]]
    rows = []
    for r in runs:
        params = r.get("params") or {}
        metrics = r.get("metrics") or {}
        validity = r.get("validity") or ("invalid" if r.get("status") != "ok" else "valid")
        row = {
            "#": str(r.get("index")),
            "run": str(r.get("run_id")),
            **{k: fmt.label(params.get(k, "")) for k in param_keys},
            **({"repeat": str(r.get("repeat") or 0)} if repeats else {}),
            "status": str(r.get("status")),
            "validity": f"{VALIDITY_MARK.get(validity, '?')} {validity}",
        }
        for col, header in keys:
            row[header] = fmt.value(col, metrics.get(col)) if r.get("status") == "ok" else "-"
        rows.append(row)
    return headers, rows
