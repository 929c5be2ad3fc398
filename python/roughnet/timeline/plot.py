"""The timeline plot: per-interval metrics of every workload against time, with the run's events.

One panel per metric, stacked on a shared time axis (seconds after t0), one line per workload
(background workloads dashed), drawn as steps over their intervals so that an empty interval (an
outage) shows as a drop to zero and an interval without arrivals as a gap in latency.  Events are
vertical lines at the time they were begun (their planned time when they never ran; dotted when
they failed), labelled with action and target above the top panel; fault windows
(``recovery.fault_windows``) are shaded in every panel.
Conventions of ``report.plots``: ``matplotlib.figure.Figure`` with the Agg canvas (nothing global
touched), constrained layout, display units from ``report.fmt`` (µs/ms, bit/s..Gbit/s, %), a log
axis when values span more than two decades, the legend below the panels.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from roughnet.report import fmt
from roughnet.timeline.recovery import fault_windows

__all__ = ["METRICS", "PlotMetric", "plot_timeline", "timeline_figure"]

PANEL_W, PANEL_H = 9.0, 2.4  # inches: one wide panel per metric
DPI = 100


@dataclass(frozen=True)
class PlotMetric:
    """A panel: its label, the stored column whose display unit it takes, and how to read it from a row."""

    label: str
    column: str  # a ``results.schema`` metric name (display unit), or "" for a plain count
    unit: str  # the unit when ``column`` has none to give
    key: str  # the row key, or "loss" / "delivered_rate" for derived values


#: The metrics ``plot_timeline`` can draw, by name.
METRICS: dict[str, PlotMetric] = {
    "throughput": PlotMetric("throughput", "throughput_bps", "", "throughput_bps"),
    "delivered": PlotMetric("delivered", "", "msg/s", "delivered_rate"),
    "latency_p50": PlotMetric("latency p50", "lat_p50_us", "", "lat_p50_us"),
    "latency_p90": PlotMetric("latency p90", "lat_p90_us", "", "lat_p90_us"),
    "latency_p99": PlotMetric("latency p99", "lat_p99_us", "", "lat_p99_us"),
    "latency_max": PlotMetric("latency max", "lat_max_us", "", "lat_max_us"),
    "loss": PlotMetric("loss (by send time)", "loss_ratio", "", "loss"),
    "lost": PlotMetric("lost", "", "msgs", "lost"),
    "sent": PlotMetric("sent", "", "msgs", "sent"),
    "duplicates": PlotMetric("duplicates", "", "msgs", "duplicates"),
    "reordered": PlotMetric("reordered", "", "msgs", "reordered"),
}


def _value(row: Mapping[str, Any], key: str) -> float:
    """A row's value for ``key`` (NaN when it has none: drawn as a gap)."""
    if key == "loss":
        sent, lost = row.get("sent"), row.get("lost")
        return lost / sent if sent and lost is not None else math.nan
    if key == "delivered_rate":
        d, s = row.get("delivered"), row.get("interval_s")
        return d / s if d is not None and s else math.nan
    v = row.get(key)
    return math.nan if v is None else float(v)


def _event_time(e: Mapping[str, Any]) -> float | None:
    for k in ("started_s", "took_effect_s", "at_s"):
        if e.get(k) is not None:
            return float(e[k])
    return None


def _spans_decades(values: Iterable[float]) -> bool:
    vals = [v for v in values if not math.isnan(v)]
    pos = [v for v in vals if v > 0]
    return bool(pos) and len(pos) == len(vals) and max(pos) / min(pos) >= 100


def timeline_figure(series_by_workload: Mapping[str, Sequence[Mapping[str, Any]]],
                    events: Sequence[Mapping[str, Any]] = (), title: str | None = None,
                    metrics: Sequence[str] = ("throughput", "latency_p99", "loss"),
                    background: Collection[str] = (), run_end_s: float | None = None) -> Figure:
    """The figure of ``plot_timeline`` (for tests and callers that want it before it is saved).

    Artists carry ``gid``s: ``event-<index>`` for an event's line in every panel, ``fault-<index>``
    for a fault's shading, ``workload-<name>`` for a workload's line."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise ValueError(f"timeline plot: unknown metrics {unknown}; expected some of {', '.join(METRICS)}")
    ends = [float(r["t_s"]) + float(r["interval_s"]) for rows in series_by_workload.values() for r in rows]
    if run_end_s is None:
        run_end_s = max(ends, default=0.0)
    fig = Figure(figsize=(PANEL_W, PANEL_H * len(metrics) + 0.9), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(len(metrics), 1, sharex=True, squeeze=False)[:, 0])
    handles: list[Any] = []
    faults = fault_windows(events, run_end_s)
    for ax, name in zip(axes, metrics, strict=True):
        pm = METRICS[name]
        lines = []
        for i, (wl, rows) in enumerate(series_by_workload.items()):
            rows = sorted(rows, key=lambda r: r["t_s"])
            if not rows:
                continue
            xs = [float(r["t_s"]) for r in rows] + [float(rows[-1]["t_s"]) + float(rows[-1]["interval_s"])]
            ys = [_value(r, pm.key) for r in rows]
            lines.append((i, wl, xs, [*ys, ys[-1]]))
        scale = fmt.scale_for(pm.column, [y for *_, ys in lines for y in ys]) if pm.column else None
        factor = scale.factor if scale else 1.0
        for i, wl, xs, ys in lines:
            bg = wl in background
            ax.step(xs, [y * factor for y in ys], where="post", color=f"C{i % 10}", linestyle="--" if bg else "-",
                    linewidth=1.3, gid=f"workload-{wl}")  # fmt: skip
            if ax is axes[0]:
                handles.append(Line2D([], [], color=f"C{i % 10}", linestyle="--" if bg else "-",
                                      label=f"{wl} (background)" if bg else wl))  # fmt: skip
        all_y = [y * factor for *_, ys in lines for y in ys]
        if pm.key.startswith("lat") and _spans_decades(all_y):
            ax.set_yscale("log")
        elif any(not math.isnan(y) for y in all_y):
            ax.set_ylim(bottom=0)
        unit = scale.unit if scale and scale.unit else pm.unit
        ax.set_ylabel(f"{pm.label} ({unit})" if unit else pm.label, fontsize=9)
        ax.grid(True, alpha=0.3)
        for fault in faults:
            if fault["end_s"] is not None:
                ax.axvspan(fault["start_s"], fault["end_s"], color="0.5", alpha=0.15, linewidth=0,
                           gid=f"fault-{fault['event']}")  # fmt: skip
        for e in events:
            t = _event_time(e)
            if t is None:
                continue
            ax.axvline(t, color="0.25", linestyle=":" if e.get("error") else "-", linewidth=0.9,
                       gid=f"event-{e['index']}")  # fmt: skip
    top = axes[0]
    for e in events:
        t = _event_time(e)
        if t is None:
            continue
        note = "" if not e.get("error") else " (not run)" if e.get("started_s") is None else " (failed)"
        label = f"{e.get('action', '')} {e.get('target') or ''}".strip() + note
        top.annotate(label, xy=(t, 1.0), xycoords=("data", "axes fraction"), xytext=(2, 2),
                     textcoords="offset points", rotation=90, fontsize=7, va="bottom", ha="left",
                     gid=f"event-label-{e['index']}")  # fmt: skip
    axes[-1].set_xlabel("time after t0 (s)")
    axes[-1].set_xlim(0, max(run_end_s, 1e-9))
    if faults:
        handles.append(Patch(color="0.5", alpha=0.3, label="fault"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(5, len(handles)), fontsize=9)
    fig.suptitle(title or "timeline", fontsize=11)
    return fig


def plot_timeline(series_by_workload: Mapping[str, Sequence[Mapping[str, Any]]], events: Sequence[Mapping[str, Any]],
                  path: Path | str, title: str | None = None,
                  metrics: Sequence[str] = ("throughput", "latency_p99", "loss"), *,
                  background: Collection[str] = (), run_end_s: float | None = None) -> Path:
    """Draw the timeline (``timeline_figure``) as a PNG at ``path``; returns the path.

    ``series_by_workload``: workload name -> its rows (``series.workload_series`` or one flow's
    ``flow_series``), in the order the lines should take colours; ``background``: the names of
    background workloads (dashed); ``events``: the record's event rows; ``run_end_s``: the right
    end of the time axis and of faults nothing ended (default: the end of the last interval)."""
    fig = timeline_figure(series_by_workload, events, title, metrics, background, run_end_s)
    path = Path(path)
    fig.savefig(path, format="png")
    return path
