"""The report's sync section (pattern sync, SEEDS S3): bundles per direction, goodput, time to sync.

Owns, for sweeps with sync runs, the three figures against the swept axes
(the report's x / lines / panels roles, as every metric plot):

- ``sync_bundles``: bundles delivered in each direction (one panel per
  direction, named by the runs' ``from`` / ``to`` hosts);
- ``sync_goodput``: goodput with the channel capacity as a dashed reference
  line when every run had the same capacity, else goodput as a fraction of
  each run's capacity with 100 % as the reference;
- ``sync_time``: time to full sync (runs that did not reach it have no
  point), with the sync window as a reference when every run had the same;

and the list of runs that did not reach full sync.  Data comes from the runs'
metric columns (results format 2) and each run's resolved workload; pictures
from ``plots.metric_png``.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any

from roughnet.report import fmt, plots, shaping

PNG_NAMES = ("sync_bundles", "sync_goodput", "sync_time")


def applies(runs: list[dict[str, Any]]) -> bool:
    return any(r.get("pattern") == "sync" for r in runs)


def _sync_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if r.get("pattern") == "sync"]


def _same(values: list[Any]) -> Any:
    """The one value shared by every item (None when they differ or there is none)."""
    distinct = {v for v in values if v is not None}
    return next(iter(distinct)) if len(distinct) == 1 and None not in values else None


def _window_s(run: dict[str, Any]) -> float | None:
    ns = ((run.get("run") or {}).get("workload") or {}).get("duration_ns")
    return ns / 1e9 if isinstance(ns, (int, float)) and ns > 0 else None


def _caption(text: str, roles: shaping.Roles) -> str:
    text += f" against {roles.x}"
    if roles.lines:
        text += f", one line per {roles.lines}"
    if roles.panels:
        text += f", one panel per {', '.join(roles.panels)}"
    return text + " (lines join the means of repeats; markers are runs)"


def bundles_plot(runs: list[dict[str, Any]], roles: shaping.Roles, axes: dict[str, list[Any]]
                 ) -> shaping.MetricPlot | None:
    """Bundles delivered per direction: the panels of both directions in one plot."""
    runs = _sync_runs(runs)
    names = shaping.sync_directions(runs)
    parts = [shaping.metric_plot(runs, col, roles, axes) for col in ("bundles_from_to", "bundles_to_from")]
    panels = []
    for name, part in zip(names, parts, strict=True):
        for p in part.panels:
            panels.append(dataclasses.replace(p, title=f"{name}" + (f", {p.title}" if p.title else "")))
    if not panels:
        return None
    per_direction = max(len(part.panels) for part in parts)
    return dataclasses.replace(
        parts[0], title="bundles delivered", panels=panels,
        grid_cols=per_direction if 1 < per_direction <= plots.MAX_COLS + 1 else (2 if per_direction == 1 else None),
    )


def goodput_plot(runs: list[dict[str, Any]], roles: shaping.Roles, axes: dict[str, list[Any]]
                 ) -> tuple[shaping.MetricPlot, list[tuple[float, str]]] | None:
    """Goodput with the capacity line, or goodput / capacity with 100 % when capacities differ."""
    runs = [r for r in _sync_runs(runs) if r.get("status") == "ok"]
    capacity = _same([(r.get("metrics") or {}).get("channel_capacity_bps") for r in runs])
    if capacity:
        mp = shaping.metric_plot(runs, "goodput_bps", roles, axes)
        refs = [(float(capacity), f"channel capacity ({fmt.value('channel_capacity_bps', capacity)})")]
    else:
        mp = shaping.metric_plot(runs, "goodput_fraction", roles, axes)
        refs = [(1.0, "channel capacity (100 %)")]
    return (mp, refs) if mp.panels else None


def time_plot(runs: list[dict[str, Any]], roles: shaping.Roles, axes: dict[str, list[Any]]
              ) -> tuple[shaping.MetricPlot, list[tuple[float, str]]] | None:
    runs = [r for r in _sync_runs(runs) if r.get("status") == "ok"]
    mp = shaping.metric_plot(runs, "time_to_full_sync_s", roles, axes)
    if not mp.panels:
        return None
    window = _same([_window_s(r) for r in runs])
    refs = [(window, f"sync window ({fmt.number(window)} s)")] if window else []
    return mp, refs


def figures(runs: list[dict[str, Any]], roles: shaping.Roles, axes: dict[str, list[Any]]
            ) -> list[tuple[str, bytes, str]]:
    """(PNG name, PNG, caption) of each sync figure that has data; none without an x axis."""
    if roles.x is None or not applies(runs):
        return []
    out = []
    bp = bundles_plot(runs, roles, axes)
    if bp is not None:
        a, b = shaping.sync_directions(runs)
        out.append(("sync_bundles", plots.metric_png(bp),
                    _caption(f"Bundles delivered in each direction ({a}, {b})", roles)))
    gp = goodput_plot(runs, roles, axes)
    if gp is not None:
        mp, refs = gp
        what = ("Goodput (new bundle bytes delivered, both directions) with the channel capacity dashed"
                if mp.column == "goodput_bps" else
                "Goodput as a fraction of each run's channel capacity (capacities differ between runs)")
        out.append(("sync_goodput", plots.metric_png(mp, refs), _caption(what, roles)))
    tp = time_plot(runs, roles, axes)
    if tp is not None:
        mp, refs = tp
        out.append(("sync_time", plots.metric_png(mp, refs),
                    _caption("Time to full sync (runs without full sync have no marker)", roles)))
    return out


def section(runs: list[dict[str, Any]]) -> str:
    """HTML: how many sync runs reached full sync, and what the others delivered."""
    runs = [r for r in _sync_runs(runs) if r.get("status") == "ok"]
    if not runs:
        return ""
    e = lambda s: html.escape(str(s), quote=True)  # noqa: E731
    a, b = shaping.sync_directions(runs)
    missed = [r for r in runs if not (r.get("metrics") or {}).get("full_sync")]
    text = f"<h2>Bundle sync</h2><p>{len(runs) - len(missed)} of {len(runs)} sync run(s) reached full sync.</p>"
    if missed:
        items = []
        for r in missed:
            m = r.get("metrics") or {}
            params = ", ".join(f"{k}={fmt.label(v)}" for k, v in (r.get("params") or {}).items())
            ends = sorted({str((s.get("metrics") or {}).get("end_reason")) for s in r.get("receivers") or []
                           if (s.get("metrics") or {}).get("end_reason")})
            items.append(
                f"<li>run {e(r.get('index'))} ({e(r.get('run_id'))}) {e(params)}: "
                f"{e(fmt.value('bundles_from_to', m.get('bundles_from_to')))} bundles {e(a)}, "
                f"{e(fmt.value('bundles_to_from', m.get('bundles_to_from')))} {e(b)}, goodput "
                f"{e(fmt.value('goodput_bps', m.get('goodput_bps')))}"
                + (f"; ended by {e(', '.join(ends))}" if ends else "") + "</li>"
            )
        text += f"<p>Runs without full sync:</p><ul>{''.join(items)}</ul>"
    return text
