"""The side-by-side report of one sweep on two backends (``roughnet run --backend namespace,ns3``).

Owns the look of ``sidebyside.png`` (one panel per metric, the points as rows, each backend's value as
its own marker with its interval, so emulated and simulated results sit in one plot) and of
``index.html`` (that picture and one table per metric: point, each backend's value, the difference), and
of the same as a ``section`` of each backend's normal report.
The numbers are ``roughnet.analysis.compare``'s (a Comparison of backend B against backend A); this module
only draws and writes text.  Same Agg-only drawing as ``plots``.
"""

from __future__ import annotations

import html
from typing import Any


from roughnet.report import plots
from roughnet.report.compare_plot import point_panels
from roughnet.report.points import _scale, interval_text

#: Marker and colour of backend A (the first named) and B.
STYLE = (("o", "#2c7fb8"), ("s", "#d95f0e"))
PANEL_W = 3.6  # inches per metric
ROW_H = 0.36  # inches per point


def _labels(comparison: Any) -> list[str]:
    return [", ".join(f"{k}={v}" for k, v in p.params.items()) or "(all runs)" for p in comparison.points]


def _metric(point: Any, column: str) -> Any:
    return next(m for m in point.metrics if m.column == column)


def values_png(comparison: Any, titles: dict[str, str], names: tuple[str, str]) -> bytes:
    """Both backends' values per point and metric (``names``: backend A's and B's)."""
    cols = comparison.columns
    labels = _labels(comparison)
    fig, axs, ys = point_panels(labels, len(cols), PANEL_W, ROW_H)
    for ax, column in zip(axs, cols, strict=True):
        per_point = [_metric(p, column) for p in comparison.points]
        values = [e.value for m in per_point for e in (m.a, m.b) if e is not None]
        scale = _scale(column, max(values, key=abs)) if values else None
        for side, (marker, colour) in enumerate(STYLE):
            offset = 0.12 if side == 0 else -0.12
            for y, m in zip(ys, per_point, strict=True):
                e = m.a if side == 0 else m.b
                if e is None or scale is None:
                    continue
                if e.lo is not None and e.hi is not None:
                    ax.plot([e.lo * scale.factor, e.hi * scale.factor], [y + offset] * 2, color=colour, linewidth=1.5)
                ax.plot([e.value * scale.factor], [y + offset], marker=marker, color=colour, linestyle="none",
                        markersize=6, label=names[side] if y == ys[0] else None)
        if values and min(values) >= 0:
            ax.set_xlim(left=0)  # from zero, so that a small difference looks small
        unit = f" ({scale.unit})" if scale is not None and scale.unit else ""
        ax.set_title(titles.get(column, column), fontsize=10)
        ax.set_xlabel(column + unit, fontsize=8)
        ax.grid(True, axis="x", alpha=0.3)
    axs[0].set_yticks(ys, labels, fontsize=8)
    axs[0].set_ylim(-0.7, len(labels) - 0.3)
    handles, texts = axs[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, texts, loc="outside lower center", ncols=2, fontsize=8)
    fig.suptitle(f"{comparison.a.sweep_id}: {names[0]} and {names[1]}", fontsize=11)
    return plots._png(fig)


def index_html(comparison: Any, titles: dict[str, str], names: tuple[str, str], png: str) -> str:
    """The page: the picture, then per metric a table of point, A's value, B's value and B against A."""
    e = html.escape
    a, b = (e(x) for x in names)
    head = [f"<!doctype html><meta charset='utf-8'><title>{e(comparison.a.sweep_id)}: {a} and {b}</title>",
            f"<h1>{e(comparison.a.sweep_id)}: {a} and {b}</h1>"]
    return "\n".join(head + _body(comparison, titles, names, f"<img src='{e(png)}' alt='each metric on both backends'>",
                                   "h2")) + "\n"


def section(comparison: Any, titles: dict[str, str], names: tuple[str, str], png: bytes) -> str:
    """The same picture (embedded) and tables as a section of a backend's normal report (``build_report``'s
    ``extra``), so a sweep run on several backends shows them together in its own report too."""
    import base64

    data = base64.b64encode(png).decode("ascii")
    img = f"<img alt='each metric on both backends' src='data:image/png;base64,{data}'>"
    a, b = (html.escape(x) for x in names)
    return "\n".join([f"<h2>Side by side: {a} and {b}</h2>"] + _body(comparison, titles, names, img, "h3"))


def _body(comparison: Any, titles: dict[str, str], names: tuple[str, str], img: str, h: str) -> list[str]:
    from roughnet.analysis.compare import change_text, params_text

    e = html.escape
    a, b = (e(x) for x in names)
    parts = [f"<p>{a}: {e(comparison.a.results)} ({len(comparison.a.runs)} runs); {b}: {e(comparison.b.results)} "
             f"({len(comparison.b.runs)} runs). Difference: {b} against {a}, "
             f"{100 * comparison.confidence:g} % intervals where there are repeats.</p>", img]
    for column in comparison.columns:
        parts.append(f"<{h}>{e(titles.get(column, column))}</{h}>")
        parts.append(f"<table><tr><th>point</th><th>{a}</th><th>{b}</th><th>{b} vs {a}</th></tr>")
        for p in comparison.points:
            m = _metric(p, column)
            parts.append(f"<tr><td>{e(params_text(p.params))}</td><td>{e(interval_text(column, m.a))}</td>"
                         f"<td>{e(interval_text(column, m.b))}</td><td>{e(change_text(m))}</td></tr>")
        parts.append("</table>")
    return parts
