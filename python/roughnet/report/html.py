"""The self-contained HTML report of one sweep (plus the same plots as PNG files).

Owns page layout: header (scenario, sweep id, description, date, machine,
versions, engines, run counts), one figure per metric, the sync figures
(``sync``), latency CDFs, ramp plots, the interactive "Explore" section (``explore``: the runs as JSON and a
plotter inlined), a timeline section per run with a time series, events or several
workloads (``report.timeline``: plot, workloads, events, recovery), the user's processes (``report.processes``), with repeats the points table (intervals, flags: ``points``), the list
of failed and of suspect/invalid runs with reasons, the table of every run and the scenario file; ``points.json``
beside the PNGs.  Images are embedded as base64 data URIs
and CSS is inline, so index.html opens offline on its own; the PNGs are also
written beside it for use elsewhere.  Data comes from ``shaping``; pictures
from ``plots``.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import logging
import os
from pathlib import Path
from typing import Any

from roughnet.report import efficiency, explore, fanout, fmt, packets, payload, plots, points, shaping, sync
from roughnet.report import processes as processes_report
from roughnet.report import timeline as timeline_report
from roughnet.report import fleet

log = logging.getLogger(__name__)

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto;
       max-width: 1300px; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
.meta { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; font-size: 0.95em; }
.meta dt { color: #666; } .meta dd { margin: 0; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #666; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.suspect td { background: #fff8e1; } tr.invalid td, tr.failed td { background: #fdecea; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
.reasons { white-space: normal; color: #8a4b00; }
.spread { color: #777; font-size: 0.85em; }
.broken { color: #b00020; font-weight: bold; }
"""


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _date(iso: str | None) -> str:
    if not iso:
        return "-"
    try:
        return dt.datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return iso


def _versions(runs: list[dict[str, Any]]) -> str:
    seen: dict[str, list[str]] = {}
    for r in runs:
        for k, v in (r.get("versions") or {}).items():
            vals = seen.setdefault(k, [])
            if str(v) not in vals:
                vals.append(str(v))
    return ", ".join(f"{k} {' / '.join(v)}" for k, v in seen.items()) or "-"


def _distinct(runs: list[dict[str, Any]], key: str) -> str:
    vals: list[str] = []
    for r in runs:
        for v in str(r.get(key) or "").split(","):
            v = v.strip()
            if v and v not in vals:
                vals.append(v)
    return ", ".join(vals) or "-"


def _header(sweep: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    report = sweep.get("report") or {}
    title = report.get("title") or sweep.get("scenario") or sweep["sweep_id"]
    machine = sweep.get("machine") or {}
    mach = ", ".join(
        str(x)
        for x in (
            machine.get("hostname"),
            f"Linux {machine['kernel']}" if machine.get("kernel") else None,
            f"{machine['cpus']} CPUs" if machine.get("cpus") else None,
            machine.get("arch"),
        )
        if x
    ) or "-"
    ok = sum(1 for r in runs if r.get("status") == "ok")
    failed = sum(1 for r in runs if r.get("status") == "failed")
    suspect = sum(1 for r in runs if r.get("status") == "ok" and r.get("validity") == "suspect")
    invalid = sum(1 for r in runs if r.get("status") == "ok" and r.get("validity") == "invalid")
    planned = sweep.get("run_count")
    counts = f"{len(runs)} stored" + (f" of {planned} planned" if planned is not None else "")
    counts += f": {ok} ok, {failed} failed, {suspect} suspect, {invalid} invalid"
    axes = sweep.get("axes") or {}
    swept = "; ".join(f"{k} = {', '.join(fmt.label(v) for v in vals)}" for k, vals in axes.items()) or "no sweep (one run)"
    items = [
        ("scenario", sweep.get("scenario")),
        ("sweep id", sweep["sweep_id"]),
        ("source", sweep.get("source")),
        ("date", _date(sweep.get("created_at"))),
        ("swept", swept),
        ("runs", counts),
        ("patterns", _distinct(runs, "pattern")),
        ("protocols", _distinct(runs, "protocol")),
        ("link engines", _distinct(runs, "engine")),
        ("versions", _versions(runs)),
        ("machine", mach),
    ]
    meta = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
    desc = f"<p>{_e(sweep.get('description'))}</p>" if sweep.get("description") else ""
    return f"<h1>{_e(title)}</h1>{desc}<dl class=\"meta\">{meta}</dl>"


def _table(headers: list[str], rows: list[dict[str, str]], runs: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers) + "<th>reasons</th>"
    body = []
    numeric = {"#", *headers[headers.index("validity") + 1 :]}
    for row, run in zip(rows, runs, strict=True):
        cls = "failed" if run.get("status") != "ok" else (run.get("validity") or "valid")
        cells = "".join(
            f'<td class="num">{_e(row[h])}</td>' if h in numeric else f"<td>{_e(row[h])}</td>"
            for h in headers
        )
        reasons = list(run.get("validity_reasons") or [])
        if run.get("status") != "ok" and run.get("failure_reason"):
            reasons.insert(0, str(run["failure_reason"]))
        cells += f'<td class="reasons">{_e("; ".join(reasons))}</td>'
        body.append(f'<tr class="{_e(cls)}">{cells}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _problem_lists(runs: list[dict[str, Any]]) -> str:
    parts = []
    failed = [r for r in runs if r.get("status") != "ok"]
    if failed:
        items = []
        for r in failed:
            params = ", ".join(f"{k}={fmt.label(v)}" for k, v in (r.get("params") or {}).items())
            tail = f"<pre>{_e(r['stderr_tail'])}</pre>" if r.get("stderr_tail") else ""
            items.append(
                f"<li>run {_e(r.get('index'))} ({_e(r.get('run_id'))}) {_e(params)}: "
                f"<b>{_e(r.get('failure_reason') or 'no reason recorded')}</b>{tail}</li>"
            )
        parts.append(f"<h2>Failed runs ({len(failed)})</h2><ul>{''.join(items)}</ul>")
    flagged = [r for r in runs if r.get("status") == "ok" and (r.get("validity") or "valid") != "valid"]
    if flagged:
        items = []
        for r in flagged:
            params = ", ".join(f"{k}={fmt.label(v)}" for k, v in (r.get("params") or {}).items())
            mark = shaping.VALIDITY_MARK.get(r.get("validity"), "?")
            reasons = "; ".join(r.get("validity_reasons") or []) or "no reason recorded"
            items.append(
                f"<li>{mark} {_e(r.get('validity'))}: run {_e(r.get('index'))} ({_e(r.get('run_id'))}) "
                f"{_e(params)}: {_e(reasons)}</li>"
            )
        parts.append(
            f"<h2>Suspect and invalid runs ({len(flagged)})</h2>"
            "<p>Their numbers are drawn with hollow markers (dashed curves) and should not be trusted "
            f"as they are.</p><ul>{''.join(items)}</ul>"
        )
    return "".join(parts)


def render(
    sweep: dict[str, Any],
    runs: list[dict[str, Any]],
    histograms: list[dict[str, Any]],
    out_dir: Path,
    timelines: dict[str, dict[str, list[dict[str, Any]]]] | None = None,
    distance: list[dict[str, Any]] | None = None,
    run_dir: Any = None,
    extra: list[str] | None = None,
    processes: list[dict[str, Any]] | None = None,
    process_series: list[dict[str, Any]] | None = None,
) -> Path:
    """Write ``out_dir/index.html`` and the PNGs; returns the HTML path.

    ``extra``: HTML sections placed after the plots (the side by side of several backends: ``report.sidebyside``).

    ``timelines``: ``Store.timelines(sweep_id)`` (run id -> workloads, flows, series, events, recovery);
    ``distance``: ``Store.distance(sweep_id)`` and ``run_dir(run)`` its folder (``report.fleet``);
    ``processes``, ``process_series``: ``Store.processes`` / ``Store.process_series`` (``report.processes``:
    the "Processes" section, only when there are process rows)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_pngs(out_dir)
    axes = shaping.axis_values(sweep.get("axes") or {}, runs)
    report_hints = sweep.get("report") or {}
    roles = shaping.choose_roles(axes, report_hints)
    patterns = list(dict.fromkeys(r.get("pattern") for r in runs if r.get("pattern")))
    sections: list[str] = [_header(sweep, runs)]
    figures: list[str] = []
    point_stats = points.aggregate(runs, histograms, points.columns_for(runs, report_hints))  # repeats: intervals, flags
    repeated = points.has_repeats(point_stats)
    (out_dir / "points.json").write_text(
        json.dumps(points.to_json(sweep["sweep_id"], point_stats, points.DEFAULT_CONFIDENCE), indent=1,
                   default=str), encoding="utf-8")

    def figure(name: str, png: bytes, caption: str) -> None:
        (out_dir / f"{name}.png").write_bytes(png)
        figures.append(f"<figure>{_img(png, caption)}<figcaption>{_e(caption)}</figcaption></figure>")

    if roles.x is not None:
        for column in shaping.metrics_for(patterns, report_hints):
            mp = shaping.metric_plot(runs, column, roles, axes)
            if not mp.panels:
                log.info("no values of %s to plot", column)
                continue
            caption = f"{mp.title} against {roles.x}"
            if roles.lines:
                caption += f", one line per {roles.lines}"
            if roles.panels:
                caption += f", one panel per {', '.join(roles.panels)}"
            caption += " (lines join the means of repeats; markers are runs"
            if repeated:
                points.attach_intervals(mp, point_stats)
                caption += (f"; bars and bands: {100 * points.DEFAULT_CONFIDENCE:g} % interval over the repeats, "
                            "red rings: flagged points")
            caption += ")"
            figure(column, plots.metric_png(mp), caption)
    for name, png, caption in sync.figures(runs, roles, axes):  # pattern sync (SEEDS S3)
        figure(name, png, caption)
    cdfs = shaping.latency_cdfs(runs, histograms, roles)
    if cdfs:
        rtt = bool(patterns) and set(patterns) <= set(fmt.RTT_PATTERNS)
        figure("latency_cdf", plots.cdf_png(cdfs, rtt),
               ("Round-trip" if rtt else "One-way latency") + " CDF per run, from the stored HDR histograms")
    ramps = shaping.ramp_panels(runs, roles)
    if ramps:
        group = ", ".join(roles.panels) or roles.x
        figure("ramp", plots.ramp_png(ramps), "Round trip against message size (ramp runs)"
               + (f", one panel per {group}" if group and len(ramps) > 1 else ""))
    if figures:
        sections.append("<h2>Plots</h2>" + "".join(figures))
    elif runs and not timelines:
        sections.append("<p>No sweep axis to plot against; see the table below.</p>")
    if runs:  # the same runs, interactive (hover, zoom, any axis); the PNGs above are its fallback
        sections.append(explore.section(sweep, runs, histograms, roles, axes, _href(out_dir, run_dir)))
    sections.extend(extra or [])
    sections.append(timeline_report.section(runs, timelines or {}, list(axes), out_dir, _img))
    if processes:  # [[process]]: the user's own programs (table, TCP over time, app latency)
        sections.append(processes_report.section(runs, processes, process_series or [], timelines or {},
                                                 list(axes), out_dir, _img))
    if distance:  # hosts with positions (issue 16): delivery by distance, pairs over time, the fleet map
        sections.append(fleet.section(runs, distance, out_dir, _img, run_dir or (lambda r: None)))
    payload_html, payload_png = payload.section(axes, runs, roles.x)  # payload axis: best range, delay/drop table + plot
    if payload_html:
        figures.clear()
        if payload_png is not None:
            figure("payload", payload_png, "Average delay and actual drop rate against payload size")
        sections.append(payload_html + "".join(figures))
    sections.append(sync.section(runs))
    sections.append(efficiency.section(runs, list(axes)))  # SEEDS S1: throughput / link rate per setting
    param_keys = list(axes)
    sections.append(points.section(point_stats, param_keys, patterns))  # with repeats: intervals and flags per point
    sections.append(_problem_lists(runs))
    sections.append(packets.section(runs, param_keys))  # capture = true: packet analysis per run
    sections.append(fanout.section(runs, param_keys))  # one-to-many runs: every subscriber
    headers, rows = shaping.run_table(runs, param_keys)
    sections.append(f"<h2>Every run ({len(runs)})</h2>" + (_table(headers, rows, runs) if runs else "<p>No runs stored.</p>"))
    if len(runs) == 1 and runs[0].get("status") == "ok":
        sections.append(_single_run_metrics(runs[0]))
    if sweep.get("scenario_text"):
        sections.append(
            f"<h2>Scenario file</h2><details><summary>{_e(sweep.get('source'))}</summary>"
            f"<pre>{_e(sweep['scenario_text'])}</pre></details>"
        )
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    sections.append(f'<p style="color:#888;font-size:0.8em">generated by roughnet on {generated}</p>')
    title = (report_hints.get("title") or sweep.get("scenario") or sweep["sweep_id"])
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)} — roughnet report</title><style>{CSS}</style></head><body>"
        + "\n".join(sections)
        + "</body></html>\n"
    )
    path = out_dir / "index.html"
    tmp = out_dir / "index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


def _href(out_dir: Path, run_dir: Any):
    """A run's artifacts folder as a link relative to the report (None where the folder is not known)."""

    def href(run: dict[str, Any]) -> str | None:
        folder = run_dir(run) if run_dir is not None else None
        if folder is None:
            return None
        return Path(os.path.relpath(Path(folder), out_dir)).as_posix() + "/"

    return href


def _remove_stale_pngs(out_dir: Path) -> None:
    """PNGs an earlier report wrote here under the names we use (only those)."""
    from roughnet.results.schema import METRIC_NAMES

    for name in (*METRIC_NAMES, "latency_cdf", "ramp", "payload", *sync.PNG_NAMES):
        (out_dir / f"{name}.png").unlink(missing_ok=True)
    timeline_report.remove_stale_pngs(out_dir)
    processes_report.remove_stale_pngs(out_dir)
    fleet.remove_stale_pngs(out_dir)


def _single_run_metrics(run: dict[str, Any]) -> str:
    """All non-empty metrics of a lone run, with units."""
    from roughnet.results.schema import METRICS

    metrics = run.get("metrics") or {}
    rows = "".join(
        f"<tr><td>{_e(fmt.metric_title(m.name, [run.get('pattern') or '']))}</td>"
        f'<td class="num">{_e(fmt.value(m.name, metrics.get(m.name)))}</td></tr>'
        for m in METRICS
        if metrics.get(m.name) is not None
    )
    return f"<h2>Metrics</h2><table><tbody>{rows}</tbody></table>"


def overlay_page(title: str, sides: list[tuple[str, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], Path]],
                 out_dir: Path, png: bytes | None = None) -> Path:
    """``out_dir/index.html``: two (or more) sweeps in one "Explore" section, for `roughnet compare`.

    ``sides``: (label, sweep row, runs, histograms, results folder) per sweep. Every run gains the parameter
    ``sweep`` (its side's label and sweep id), the section's first series, so the sweeps are overlaid point by
    point; run ids are prefixed with the label (two folders can hold runs of the same id). ``png``: the
    comparison's figure, shown above (and the page's picture without JavaScript)."""
    runs: list[dict[str, Any]] = []
    hists: list[dict[str, Any]] = []
    folders: dict[str, Path] = {}
    for label, sweep, side_runs, side_hists, root in sides:
        name = f"{label}: {sweep['sweep_id']}"
        for r in side_runs:
            key = f"{label}:{r.get('run_id')}"
            runs.append({**r, "run_id": key, "params": {"sweep": name, **(r.get("params") or {})}})
            folders[key] = Path(root) / "runs" / str(sweep["sweep_id"]) / str(r.get("run_id"))
        hists.extend({**h, "run_id": f"{label}:{h.get('run_id')}"} for h in side_hists)
    axes = shaping.axis_values({}, runs)
    others = [k for k, v in axes.items() if k != "sweep" and len(v) > 1]
    roles = shaping.Roles(x=others[0] if others else "sweep", lines="sweep", panels=[])

    def href(run: dict[str, Any]) -> str | None:
        folder = folders.get(str(run.get("run_id")))
        if folder is None or not folder.is_dir():
            return None
        return Path(os.path.relpath(folder, out_dir)).as_posix() + "/"

    first = sides[0][1]
    body = explore.section({"sweep_id": " vs ".join(s[1]["sweep_id"] for s in sides), "report": first.get("report") or {}},
                   runs, hists, roles, axes, href)
    figure = ""
    if png is not None:
        figure = (f'<figure><img alt="{_e(title)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
                  f"<figcaption>{_e(title)}</figcaption></figure>")
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)} — roughnet compare</title><style>{CSS}</style></head><body>"
            f"<h1>{_e(title)}</h1>{figure}{body}</body></html>\n")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    tmp = out_dir / "index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path
