"""Drawing the shaped report data as PNG images (matplotlib, Agg, no pyplot state).

Owns the look of the plots: small multiples (one panel per value of the panel
key), one line per value of the line key, hollow markers for suspect/invalid
runs, intervals over repeats (bars and bands) and red rings around flagged points
where ``points.attach_intervals`` put them, display units (µs/ms, Mbit/s, %), log axes
when values span more than two decades.  Input comes from ``shaping``; output is PNG bytes.  Uses
``matplotlib.figure.Figure`` with the Agg canvas directly so that nothing
global (backends, pyplot figures) is touched.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from roughnet.report import fmt
from roughnet.report.shaping import CurvePanel, MetricPlot, RampSeries, mean_by_x

PANEL_W, PANEL_H = 4.2, 3.2  # inches
MAX_COLS = 3
DPI = 100
MARKERS = "osD^v<>ph*"


def _grid(n: int, cols: int | None = None) -> tuple[int, int]:
    """Rows and columns for n panels: 1-3 in a row, 4 as 2x2, more in rows of 3."""
    if cols is None or not 1 <= cols <= MAX_COLS + 1:
        cols = n if n <= MAX_COLS else (2 if n == 4 else MAX_COLS)
    cols = max(1, min(cols, n))
    return math.ceil(n / cols), cols


def _figure(n_panels: int, cols: int | None = None, extra_h: float = 0.0) -> tuple[Figure, list[Any]]:
    rows, cols = _grid(n_panels, cols)
    fig = Figure(figsize=(PANEL_W * cols, PANEL_H * rows + extra_h), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axs = fig.subplots(rows, cols, squeeze=False, sharey=True)
    flat = [ax for row in axs for ax in row]
    for ax in flat[n_panels:]:
        ax.set_visible(False)
    return fig, flat[:n_panels]


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _spans_decades(values: Sequence[float]) -> bool:
    pos = [v for v in values if v > 0]
    return bool(pos) and len(pos) == len(values) and max(pos) / min(pos) >= 100


def metric_png(plot: MetricPlot, refs: Sequence[tuple[float, str]] = ()) -> bytes:
    """Metric against the x key; one line per line value; one panel per panel value.

    ``refs``: (y in stored units, label) reference lines drawn dashed across every panel
    (e.g. the channel capacity under goodput)."""
    all_y = [p.y for panel in plot.panels for line in panel.lines for p in line.points]
    scale = fmt.scale_for(plot.column, [*all_y, *(y for y, _ in refs)])
    fig, axes = _figure(len(plot.panels), plot.grid_cols)
    x_index = {v: i for i, v in enumerate(plot.x_order)}
    x_nums = [p.x_num for panel in plot.panels for line in panel.lines for p in line.points if p.x_num is not None]
    log_x = plot.x_numeric and _spans_decades(x_nums)
    hollow_any = False
    flagged_any = False
    handles: dict[str, Line2D] = {}
    for ax, panel in zip(axes, plot.panels, strict=True):
        for line in panel.lines:
            marker = MARKERS[line.index % len(MARKERS)]
            color = f"C{line.index % 10}"
            if line.label and line.label not in handles:
                handles[line.label] = Line2D([], [], color=color, marker=marker, label=line.label)

            def xpos(x: Any, x_num: float | None) -> float:
                if plot.x_numeric and x_num is not None:
                    return x_num
                return float(x_index.get(x, 0))

            means = mean_by_x(line)
            ax.plot(
                [xpos(x, n) for x, n, _ in means],
                [y * scale.factor for _, _, y in means],
                color=color, marker=None, linewidth=1.4,
            )
            _draw_intervals(ax, line, means, xpos, scale.factor, color)
            flagged_any |= bool(line.flagged)
            for p in line.points:
                hollow = p.validity != "valid"
                hollow_any |= hollow
                ax.plot(
                    [xpos(p.x, p.x_num)], [p.y * scale.factor], linestyle="none", marker=marker,
                    markersize=6, color=color, markerfacecolor="none" if hollow else color,
                )
        if plot.x_axis is not None:
            if plot.x_numeric:
                nums = fmt.order_values(plot.x_order)[1] or {}
                positions = [nums[v] for v in plot.x_order]
            else:
                positions = [float(i) for i in range(len(plot.x_order))]
            if log_x:
                ax.set_xscale("log")
                ax.minorticks_off()
            labels = [fmt.label(v) for v in plot.x_order]
            ax.set_xticks(positions, labels)
            if not plot.x_numeric and sum(len(t) + 2 for t in labels) > 40:  # names that would overlap: slanted
                ax.tick_params(axis="x", labelrotation=35, labelsize=8)
                for t in ax.get_xticklabels():
                    t.set_horizontalalignment("right")
            ax.set_xlabel(plot.x_axis)
        else:
            ax.set_xticks([])
        if panel.title:  # long titles (several panel keys) in a smaller font, so neighbours do not overlap
            ax.set_title(panel.title, fontsize=10 if len(panel.title) <= 45 else 8)
        ax.grid(True, alpha=0.3)
        for i, (y, label) in enumerate(refs):
            ax.axhline(y * scale.factor, color="0.35", linestyle=("--", ":", "-.")[i % 3], linewidth=1.1)
            handles.setdefault(label, Line2D([], [], color="0.35", linestyle=("--", ":", "-.")[i % 3], label=label))
    if handles:
        ordered = sorted(handles.values(), key=lambda h: list(handles).index(h.get_label()))
        ncols = min(4, len(ordered), 2 * _grid(len(axes), plot.grid_cols)[1])  # a lone panel: 2 a row
        fig.legend(handles=ordered, loc="outside lower center", ncols=ncols, fontsize=9)
    ys = [y * scale.factor for y in [*all_y, *(y for y, _ in refs)]]
    if _spans_decades(ys):
        for ax in axes:
            ax.set_yscale("log")
    elif ys and min(ys) >= 0:
        for ax in axes:
            ax.set_ylim(bottom=0)
    axes[0].set_ylabel(f"{plot.title} ({scale.unit})" if scale.unit else plot.title)
    notes = [n for n, on in (("hollow markers: suspect/invalid runs", hollow_any),
                             ("red rings: flagged points", flagged_any)) if on]
    note = f"  ({'; '.join(notes)})" if notes else ""
    if len(notes) > 1 and len(axes) < 3:  # two notes do not fit beside the title of one or two panels
        note = "\n(hollow: suspect/invalid runs; red rings: flagged)"
    fig.suptitle(f"{plot.title}{note}", fontsize=11)
    return _png(fig)


def _draw_intervals(ax: Any, line: Any, means: list[tuple[Any, float | None, float]], xpos: Any, factor: float,
                    color: str) -> None:
    """A point's interval over its repeats as a bar with caps, a band between neighbouring x values
    of the line, and a red ring around the mean of a flagged point (``points.attach_intervals``)."""
    band = [(xpos(x, n), *line.intervals[x]) for x, n, _ in means if x in line.intervals]
    for x, _, lo, hi in band:
        ax.plot([x, x], [lo * factor, hi * factor], color=color, linewidth=1.2, alpha=0.8,
                marker="_", markersize=8, markeredgewidth=1.2)
    if len(band) > 1:
        band.sort()
        ax.fill_between([b[0] for b in band], [b[2] * factor for b in band], [b[3] * factor for b in band],
                        color=color, alpha=0.12, linewidth=0)
    for x, n, y in means:
        if x in line.flagged:
            ax.plot([xpos(x, n)], [y * factor], linestyle="none", marker="o", markersize=13,
                    markerfacecolor="none", markeredgecolor="red", markeredgewidth=1.4)


def cdf_png(panels: list[CurvePanel], rtt: bool) -> bytes:
    """Latency CDFs (x log scale in µs/ms), one curve per run."""
    top = max((max(c.values_us) for p in panels for c in p.curves), default=1.0)
    to_ms = top >= 10_000
    factor, unit = (1e-3, "ms") if to_ms else (1.0, "µs")
    n_labels = len({c.label for p in panels for c in p.curves})
    legend_rows = math.ceil(n_labels / _grid(len(panels))[1])
    fig, axes = _figure(len(panels), extra_h=0.2 * legend_rows)
    for ax, panel in zip(axes, panels, strict=True):
        for c in panel.curves:
            ax.step(
                [v * factor for v in c.values_us], c.fractions, where="post",
                color=f"C{c.index % 10}", linestyle="-" if c.validity == "valid" else "--",
                linewidth=1.2, label=c.label,
            )
        ax.set_xscale("log")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        if panel.title:
            ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(f"{'round trip' if rtt else 'one-way latency'} ({unit})")
    handles: dict[str, Line2D] = {}
    for panel in panels:
        for c in panel.curves:
            handles.setdefault(c.label, Line2D([], [], color=f"C{c.index % 10}", label=c.label))
    ordered = sorted(handles.values(), key=lambda h: next(
        c.index for p in panels for c in p.curves if c.label == h.get_label()))
    cols = _grid(len(panels))[1]
    fig.legend(handles=ordered, loc="outside lower center", ncols=max(1, min(cols, len(ordered))), fontsize=8)
    axes[0].set_ylabel("fraction of messages")
    fig.suptitle(
        ("round-trip" if rtt else "one-way latency") + " CDF (from the intended send time; dashed: suspect/invalid)",
        fontsize=11,
    )
    return _png(fig)


def ramp_png(panels: list[tuple[str, list[RampSeries]]]) -> bytes:
    """Ramp: round trip against message size, one panel per group (``shaping.ramp_panels``)."""
    return _png(ramp_figure(panels))


def ramp_figure(panels: list[tuple[str, list[RampSeries]]]) -> Figure:
    """The figure of ``ramp_png``: one visible axes per panel, one line per series."""
    top_rtt = max((max(s.rtts_us) for _, ss in panels for s in ss if s.rtts_us), default=1.0)
    factor, unit = (1e-3, "ms") if top_rtt >= 10_000 else (1.0, "µs")
    top_size = max((max(s.sizes) for _, ss in panels for s in ss if s.sizes), default=1.0)
    sscale = fmt.scale_for("bytes", [top_size])
    fig, axes = _figure(len(panels))
    colour: dict[str, int] = {}
    for ax, (title, series) in zip(axes, panels, strict=True):
        for s in series:
            i = colour.setdefault(s.label, len(colour))
            ax.plot(
                [v * sscale.factor for v in s.sizes], [v * factor for v in s.rtts_us],
                color=f"C{i % 10}", linestyle="-" if s.validity == "valid" else "--",
                marker=".", markersize=3, linewidth=0.8, label=s.label,
            )
        ax.grid(True, alpha=0.3)
        ax.set_xlabel(f"message size ({sscale.unit})")
        if title:
            ax.set_title(title, fontsize=10)
        if len(series) > 1:
            ax.legend(fontsize=8)
    if _spans_decades([v for _, ss in panels for s in ss for v in s.rtts_us]):
        for ax in axes:  # a few retransmission spikes would flatten the growth with size
            ax.set_yscale("log")
    axes[0].set_ylabel(f"round trip ({unit})")
    note = "  (dashed: suspect/invalid runs)" if any(s.validity != "valid" for _, ss in panels for s in ss) else ""
    fig.suptitle(f"round trip against message size (ramp){note}", fontsize=11)
    return fig
