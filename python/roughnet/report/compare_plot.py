"""The picture of a comparison (``roughnet.analysis.compare``): B against A per point, one panel per metric.

Owns the look of ``compare.png``: a row of panels (one per metric) sharing the
points as rows; in each, the change of B against A as a marker with its interval
(ratio B/A on a log axis, or the difference in percentage points for proportions),
a solid line at "no change", a dashed one at the regression threshold, colours by
verdict (red worse, green better, grey no detectable difference, blue for metrics
without a direction), hollow markers without an interval (too few runs).  Same
Agg-only drawing as ``plots``; output is PNG bytes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from roughnet.report import plots

if TYPE_CHECKING:
    from roughnet.analysis.compare import Comparison, MetricComparison

COLOURS = {"worse": "#c0392b", "better": "#1e8449", "no detectable difference": "0.45", "higher": "#2c7fb8",
           "lower": "#2c7fb8", "too few runs": "0.6"}  # fmt: skip
PANEL_W = 3.4  # inches per metric
ROW_H = 0.32  # inches per point


def point_panels(labels: list[str], ncols: int, panel_w: float, row_h: float):
    """A figure of ``ncols`` panels side by side sharing one row per point (``labels``, first on top):
    (figure, axes, the y of each point)."""
    label_w = min(4.5, 0.5 + 0.065 * max((len(s) for s in labels), default=10))
    fig = Figure(figsize=(label_w + panel_w * ncols, 1.6 + row_h * len(labels)), dpi=plots.DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axs = fig.subplots(1, ncols, squeeze=False, sharey=True)[0]
    return fig, axs, list(range(len(labels)))[::-1]


def _kind(metrics: list[MetricComparison]) -> str:
    kinds = [m.kind for m in metrics if m.change is not None] or [m.kind for m in metrics]
    return max(set(kinds), key=kinds.count)


def compare_png(comparison: Comparison, titles: dict[str, str]) -> bytes:
    """``titles``: metric column -> its name for people ("latency p99")."""
    cols = comparison.columns
    labels = [", ".join(f"{k}={v}" for k, v in p.params.items()) or "(all runs)" for p in comparison.points]
    fig, axs, ys = point_panels(labels, len(cols), PANEL_W, ROW_H)
    for ax, column in zip(axs, cols, strict=True):
        per_point = [next(m for m in p.metrics if m.column == column) for p in comparison.points]
        kind = _kind(per_point)
        ratio = kind == "ratio"
        scale = 100.0 if kind == "points" else 1.0
        neutral = 1.0 if ratio else 0.0
        left_out = 0
        for y, m in zip(ys, per_point, strict=True):
            colour = COLOURS.get(m.verdict, "0.45")
            if m.change is None or m.kind != kind:
                left_out += m.kind != kind and m.change is not None
                if m.change is None and ratio and m.a is not None and m.b is not None and m.a.value > 0:
                    ax.plot([m.b.value / m.a.value], [y], marker="o", markersize=6, markerfacecolor="none",
                            color=colour, linestyle="none")
                continue
            c = m.change
            ax.plot([c.lo * scale, c.hi * scale], [y, y], color=colour, linewidth=2.0, solid_capstyle="butt")
            ax.plot([c.value * scale], [y], marker="D" if m.regression else "o", markersize=7 if m.regression else 6,
                    color=colour, linestyle="none")
        ax.axvline(neutral, color="0.2", linewidth=1.0)
        thr = _threshold(comparison, column, kind)
        if thr is not None:
            ax.axvline(thr * scale, color="#c0392b", linestyle="--", linewidth=1.0)
        if ratio:
            _ratio_axis(ax)
        unit = "B / A" if ratio else ("B - A (percentage points)" if kind == "points" else "B - A")
        ax.set_xlabel(unit + (f"  ({left_out} not drawn: see the table)" if left_out else ""))
        better = next((m.better for m in per_point), None)
        arrow = {"lower": "  (lower is better)", "higher": "  (higher is better)"}.get(better or "", "")
        ax.set_title(titles.get(column, column) + arrow, fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
    axs[0].set_yticks(ys, labels, fontsize=8)
    axs[0].set_ylim(-0.7, len(labels) - 0.3)
    handles = [Line2D([], [], color=COLOURS[v], marker="o", linewidth=2, label=v)
               for v in ("worse", "better", "no detectable difference")]
    handles.append(Line2D([], [], color="#c0392b", marker="D", linestyle="none", label="regression (beyond threshold)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=8)
    conf = f"{100 * comparison.confidence:g} %"
    fig.suptitle(f"B ({_side(comparison.b)}) against A ({_side(comparison.a)}), {conf} intervals", fontsize=11)
    return plots._png(fig)


#: Ratio ticks to choose from (B/A), as written under the axis ("×0.9", "×2").
_RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 5.0, 10.0, 20.0, 50.0,
                100.0)  # fmt: skip


def _ratio_axis(ax) -> None:
    """Log axis symmetric around ×1 (at least ×0.8 to ×1.25), a few round ratios as ticks, no minor labels."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    span = 1.1 * max(abs(math.log10(lo)), abs(math.log10(hi)), math.log10(1.25))
    ax.set_xlim(10**-span, 10**span)
    gap = span / 3.0  # about seven ticks across, none closer than that (in decades)
    ticks = [1.0]
    for side in (sorted(t for t in _RATIO_TICKS if t > 1.0), sorted((t for t in _RATIO_TICKS if t < 1.0), reverse=True)):
        last = 0.0
        for t in side:
            d = abs(math.log10(t))
            if d <= span and d - last >= gap:
                ticks.append(t)
                last = d
    ax.xaxis.set_major_locator(FixedLocator(sorted(ticks)))
    ax.xaxis.set_major_formatter(lambda v, _: f"×{v:g}")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _side(side) -> str:
    where = ", ".join(f"{k}={v}" for k, v in side.where.items())
    return side.sweep_id + (f" where {where}" if where else "")


def _threshold(comparison: Comparison, column: str, kind: str) -> float | None:
    from roughnet.analysis.compare import BETTER

    better = BETTER.get(column)
    if better is None:
        return None
    sign = 1.0 if better == "lower" else -1.0
    if kind == "ratio":
        return 1.0 + sign * comparison.fail_pct / 100.0 if comparison.fail_pct > 0 else None
    if kind == "points":
        return sign * comparison.fail_pp / 100.0 if comparison.fail_pp > 0 else None
    return None
