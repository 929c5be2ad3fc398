"""The report's interactive section, "Explore" (issue 29): the sweep's runs as data for a plot drawn in the browser.

Public API:

- ``section(sweep, runs, histograms, roles, axes, run_href) -> str``: the HTML of the section: a
  ``<noscript>`` note (the PNG figures above stay the page's plots without JavaScript), the data as JSON in a
  ``<script type="application/json">`` block, and the plotter (``explorer.js`` beside this module, inlined: the
  page keeps opening offline, with nothing fetched).
- ``data(...) -> dict``: that JSON: per run its index, id, parameters (labels, and numbers where every value of
  the parameter is a quantity of one kind), status, validity and reasons, every numeric metric, the link to its
  artifacts and its latency percentiles (from the stored HDR histograms, receivers merged); per metric its title,
  unit and whether a log scale suits it; the swept parameters and the report's roles as the first choice.

What the page does with it (explorer.js): a plot of any metric against any swept parameter, one line per value
of another (lines join the means over repeats, a marker per run), log or linear y; hover a marker: its run id,
parameters, verdict and value, click it to keep that box and follow the link to its artifacts; drag across the
plot to zoom into an x range, double-click to zoom out; click a legend entry to hide or show its series. Below it,
the latency percentiles of every run on log scales (the tail to the right), with the same hover and legend.
No plotting library: a few hundred lines of plain JavaScript drawing SVG.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from roughnet.report import fmt, shaping


__all__ = ["section", "data", "PERCENTILES"]

#: The percentiles of each run's latency distribution the page plots (in percent).
PERCENTILES = (1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0)

SCRIPT = Path(__file__).with_name("explorer.js")

#: The unit of a metric column, by its name (how the page formats a value; "" plain numbers).
_UNITS = (("_us", "us"), ("_bps", "bit/s"), ("_ratio", "fraction"), ("_fraction", "fraction"), ("_util", "fraction"),
          ("_s", "s"), ("bytes", "bytes"))


def _unit(column: str) -> str:
    if column in ("loss_ratio",):
        return "fraction"
    for suffix, unit in _UNITS:
        if column.endswith(suffix):
            return unit
    return ""


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _percentiles(hs: list[dict[str, Any]], run_id: Any) -> list[list[float]]:
    merged = shaping.merge_histograms(hs, run_id)
    if merged is None or merged.get_total_count() <= 0:
        return []
    return [[q, merged.get_value_at_percentile(q) / 1000.0] for q in PERCENTILES]  # ns -> us


def data(sweep: dict[str, Any], runs: list[dict[str, Any]], histograms: list[dict[str, Any]],
         roles: shaping.Roles, axes: dict[str, list[Any]], run_href: Callable[[dict[str, Any]], str | None]
         ) -> dict[str, Any]:
    """The section's JSON (see the module docstring)."""
    patterns = list(dict.fromkeys(r.get("pattern") for r in runs if r.get("pattern")))
    params = []
    for name, values in axes.items():
        ordered, numeric = fmt.order_values(values)
        params.append({"name": name, "values": [fmt.label(v) for v in ordered],
                       "numeric": numeric is not None})
    numeric_of = {p["name"]: fmt.order_values(axes[p["name"]])[1] for p in params}
    by_run: dict[str, list[dict[str, Any]]] = {}
    for h in histograms:
        if h.get("kind") in ("latency_intended", "rtt_intended"):
            by_run.setdefault(h["run_id"], []).append(h)
    columns: dict[str, None] = {}
    out_runs = []
    for r in runs:
        metrics = {k: n for k, v in (r.get("metrics") or {}).items()
                   if (n := _number(v)) is not None and not k.endswith("_pid")}  # a PID is no measurement
        columns.update(dict.fromkeys(metrics))
        p = r.get("params") or {}
        out_runs.append({
            "i": r.get("index"), "id": r.get("run_id"), "repeat": r.get("repeat") or 0,
            "p": {k: fmt.label(v) for k, v in p.items()},
            "x": {k: (numeric_of[k] or {}).get(v) if numeric_of.get(k) else None for k, v in p.items()},
            "status": r.get("status"), "validity": r.get("validity") or ("invalid" if r.get("status") != "ok"
                                                                          else "valid"),
            "reasons": list(r.get("validity_reasons") or [])[:5] + ([r["failure_reason"]] if r.get("failure_reason")
                                                                    else []),
            "m": metrics if r.get("status") == "ok" else {},
            "href": run_href(r),
            "pct": _percentiles(by_run.get(str(r.get("run_id")), []), r.get("run_id")) if r.get("status") == "ok" else [],
        })
    preferred = [c for c in shaping.metrics_for(patterns, sweep.get("report")) if c in columns]
    order = preferred + sorted(c for c in columns if c not in preferred)
    metrics_meta = [{"col": c, "title": fmt.metric_title(c, patterns) if c in fmt.METRIC_BY_NAME else c, "unit": _unit(c),
                     "log": c.startswith(("lat_", "rtt_")) or c.endswith("_us")} for c in order]
    return {
        "sweep": sweep.get("sweep_id"), "params": params, "metrics": metrics_meta, "runs": out_runs,
        "first": {"metric": order[0] if order else None, "x": roles.x, "lines": roles.lines},
        "rtt": bool(patterns) and set(patterns) <= set(fmt.RTT_PATTERNS),
    }


def section(sweep: dict[str, Any], runs: list[dict[str, Any]], histograms: list[dict[str, Any]],
            roles: shaping.Roles, axes: dict[str, list[Any]], run_href: Callable[[dict[str, Any]], str | None]
            ) -> str:
    """The "Explore" section's HTML, or "" without runs that carry metrics."""
    d = data(sweep, runs, histograms, roles, axes, run_href)
    if not d["metrics"]:
        return ""
    # no "<" at all in the block (JSON.parse reads \u003c back): a value cannot end the script or open a tag
    blob = json.dumps(d, separators=(",", ":"), default=str).replace("<", "\\u003c")
    script = SCRIPT.read_text(encoding="utf-8")
    return (
        '<h2 id="explore">Explore</h2>'
        '<noscript><p>This section draws interactive plots with JavaScript, which is off: the figures above show '
        'the same data.</p></noscript>'
        '<div id="rn-explore" class="rn-explore"></div>'
        f'<script type="application/json" id="rn-data">{blob}</script>'
        f"<script>\n{script}\n</script>"
    )


