"""The report's timeline sections: runs with several workloads, events and time series (docs/timelines.md).

Owns turning a run's stored timeline rows (``Store.timelines``: workloads, flows, series, events,
recovery as the record has them) into, per run with a series: the timeline PNG
(``roughnet.timeline.plot.plot_timeline``, each workload's flows summed with
``timeline.series.workload_series``, events drawn), the events table, the recovery table (per fault
and flow; a broken promise in red and bold) and, when the run had more than one workload, the
per-workload table.  Also the CLI summary's rows: ``workload_rows`` (one per workload of runs with
more than one) and ``recovery_lines`` (one compact line per fault).  No store access here.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from roughnet.report import fmt, shaping

log = logging.getLogger(__name__)

#: The panels of the timeline PNG (names of ``timeline.plot.METRICS``).
PLOT_METRICS = ("throughput", "latency_p99", "loss")
PNG_PREFIX = "timeline-"

Rows = list[dict[str, Any]]


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _at(v: float | None) -> str:
    """A time after t0: "10.001 s"."""
    return "-" if v is None else f"{v:.3f} s"


def _dur(v: float | None, none: str = "-") -> str:
    """A duration: "5.31 s", "240 ms"."""
    if v is None:
        return none
    if abs(v) < 1:
        return f"{v * 1000:.3g} ms"
    return f"{v:.3g} s"


def _count(v: Any) -> str:
    return "-" if v is None else f"{int(v):,}"


def _flow(r: Mapping[str, Any]) -> str:
    return f"{r.get('workload')}: {r.get('sender')} → {r.get('receiver')}"


def _event_label(e: Mapping[str, Any] | None, index: Any) -> str:
    if e is None:
        return f"#{index}"
    return f"#{index} {e.get('action') or ''} {_target(e)}".replace("  ", " ").strip()


def _params(run: Mapping[str, Any], param_keys: Sequence[str]) -> str:
    params = run.get("params") or {}
    return ", ".join(f"{k}={fmt.label(params[k])}" for k in param_keys if k in params)


def _workload_order(tl: Mapping[str, Rows]) -> list[str]:
    names = [w["name"] for w in tl.get("workloads") or []]
    for r in tl.get("series") or []:
        if r["workload"] not in names:
            names.append(r["workload"])
    return names


def series_by_workload(tl: Mapping[str, Rows]) -> dict[str, list[dict[str, Any]]]:
    """Workload name -> its flows' series summed per interval (``timeline.series.workload_series``), in the
    order of the run's workloads."""
    from roughnet.timeline.series import workload_series

    flows: dict[str, dict[tuple[Any, Any], list[dict[str, Any]]]] = {}
    for r in tl.get("series") or []:
        flows.setdefault(r["workload"], {}).setdefault((r.get("sender"), r.get("receiver")), []).append(r)
    return {name: workload_series(flows[name]) for name in _workload_order(tl) if name in flows}


# ------------------------------------------------------------------ tables


def _cells_html(headers: Sequence[str], rows: Sequence[dict[str, Any]], numeric: set[str],
                row_class: Sequence[str] | None = None, raw: Sequence[Mapping[str, str]] | None = None) -> str:
    """A table; ``raw[i][h]`` is ready HTML for that cell (otherwise the row's text, escaped)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cells = []
        for h in headers:
            inner = raw[i][h] if raw is not None and h in raw[i] else _e(row[h])
            cells.append(f'<td class="num">{inner}</td>' if h in numeric else f"<td>{inner}</td>")
        cls = f' class="{_e(row_class[i])}"' if row_class is not None and row_class[i] else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _target(e: dict[str, Any]) -> str:
    """"service mosquitto", "link 0", "host sub", "agent w1@sub" (targets of links, hosts and agents name their kind)."""
    kind, target = str(e.get("kind") or ""), str(e.get("target") or "")
    return target if not kind or target.startswith(kind) else f"{kind} {target}".strip()


EVENT_HEADERS = ["#", "at", "action", "target", "detail", "took effect at", "error"]


def event_rows(events: Rows) -> Rows:
    """One row per event: planned time, action, target (kind and name), what was done, when it had taken
    effect (with how long after its planned time it began, when late), error."""
    rows = []
    for e in events:
        began, at = e.get("started_s"), e.get("at_s")
        took = _at(e.get("took_effect_s"))
        if began is not None and at is not None and began - at >= 0.05:
            took += f" (began {began - at:.2f} s late)"
        if e.get("started_s") is None and e.get("took_effect_s") is None:
            took = "not run"
        rows.append({"#": str(e.get("index")), "at": _at(at), "action": str(e.get("action") or ""),
                     "target": _target(e),
                     "detail": "" if e.get("detail") is None else str(e["detail"]),
                     "took effect at": took, "error": e.get("error") or ""})  # fmt: skip
    return rows


RECOVERY_HEADERS = ["fault", "flow", "fault window", "outage", "recover time", "lost", "duplicated", "reordered",
                    "backlog", "promise", "verdict", "evidence"]  # fmt: skip
RECOVERY_NUMERIC = {"outage", "recover time", "lost", "duplicated", "reordered", "backlog"}


def _recover(r: Mapping[str, Any]) -> str:
    if r.get("recover_s") is None:
        return "never" if r.get("pre_rate_msgs_s") is not None else "-"
    return _dur(r["recover_s"])


def recovery_rows(recovery: Rows, events: Rows) -> Rows:
    """One row per fault and flow (text cells; ``verdict`` is "✗ broken", "✓ kept" or "-")."""
    by_index = {e.get("index"): e for e in events}
    rows = []
    for r in recovery:
        verdict = r.get("verdict")
        rows.append({
            "fault": _event_label(by_index.get(r.get("event")), r.get("event")), "flow": _flow(r),
            "fault window": f"{_at(r.get('fault_start_s'))} – {_at(r.get('fault_end_s'))}",
            "outage": _dur(r.get("outage_s")), "recover time": _recover(r), "lost": _count(r.get("lost")),
            "duplicated": _count(r.get("duplicated")), "reordered": _count(r.get("reordered")),
            "backlog": _count(r.get("backlog")), "promise": r.get("promise") or "-",
            "verdict": {"broken": "✗ broken", "kept": "✓ kept"}.get(verdict, verdict or "-"),
            "evidence": r.get("evidence") or "",
        })  # fmt: skip
    return rows


def _workload_keys(workloads: Rows) -> list[tuple[str, str]]:
    return shaping.key_columns(dict.fromkeys(w.get("pattern") for w in workloads))


def workload_table(workloads: Rows) -> tuple[list[str], Rows]:
    """(headers, rows): name (background marked), protocol, senders -> receivers, start, key metrics by the
    workloads' patterns, validity (mark and word) and its reasons."""
    keys = _workload_keys(workloads)
    headers = ["workload", "protocol", "senders → receivers", "start", *(h for _, h in keys), "validity", "reasons"]
    rows = []
    for w in workloads:
        m = w.get("metrics") or {}
        validity = w.get("validity") or "valid"
        rows.append({
            "workload": str(w.get("name")) + (" (background)" if w.get("background") else ""),
            "protocol": f"{w.get('protocol') or '-'} {w.get('pattern') or ''}".strip(),
            "senders → receivers": f"{', '.join(w.get('senders') or [])} → {', '.join(w.get('receivers') or [])}",
            "start": _at(w.get("start_s")),
            **{h: fmt.value(c, m.get(c)) for c, h in keys},
            "validity": f"{shaping.VALIDITY_MARK.get(validity, '?')} {validity}",
            "reasons": "; ".join(w.get("validity_reasons") or []),
        })  # fmt: skip
    return headers, rows


# ------------------------------------------------------------------ HTML


def run_section(run: Mapping[str, Any], tl: Mapping[str, Rows], param_keys: Sequence[str], out_dir: Path,
                img: Callable[[bytes, str], str]) -> str:
    """The "Timeline" section of one run (plot, workloads, events, recovery)."""
    params = _params(run, param_keys)
    title = f"run {run.get('index')}" + (f" ({params})" if params else "")
    parts = [f"<h2>Timeline of {_e(title)}</h2>"]
    workloads = tl.get("workloads") or []
    per_wl = series_by_workload(tl)
    if per_wl:
        path = out_dir / f"{PNG_PREFIX}{run.get('run_id')}.png"
        try:
            from roughnet.timeline.plot import plot_timeline

            background = [w["name"] for w in workloads if w.get("background")]
            plot_timeline(per_wl, tl.get("events") or [], path, title=f"{title}: every workload over time",
                          metrics=PLOT_METRICS, background=background)
            caption = ("Per interval, each workload's flows summed (latency: the worst flow); vertical lines are "
                       "the events (dotted: failed), shaded: fault windows; dashed lines: background workloads")
            parts.append(f"<figure>{img(path.read_bytes(), caption)}<figcaption>{_e(caption)}</figcaption></figure>")
        except Exception as ex:  # noqa: BLE001 - a plot that cannot be drawn must not lose the tables
            log.warning("timeline plot of run %s failed: %s", run.get("run_id"), ex)
            parts.append(f"<p>The timeline plot could not be drawn: {_e(ex)}</p>")
    if len(workloads) > 1:
        headers, rows = workload_table(workloads)
        classes = [w.get("validity") if w.get("validity") in ("suspect", "invalid") else "" for w in workloads]
        numeric = {h for _, h in _workload_keys(workloads)}
        parts.append("<h3>Workloads</h3>" + _cells_html(headers, rows, numeric, classes))
    events = tl.get("events") or []
    if events:
        rows = event_rows(events)
        classes = ["invalid" if e.get("error") else "" for e in events]
        parts.append("<h3>Events</h3>" + _cells_html(EVENT_HEADERS, rows, {"#"}, classes))
    recovery = tl.get("recovery") or []
    if recovery:
        rows = recovery_rows(recovery, events)
        classes = ["invalid" if r.get("verdict") == "broken" else "" for r in recovery]
        raw = [{"verdict": f'<b class="broken">{_e(row["verdict"])}</b>'} if r.get("verdict") == "broken" else {}
               for r, row in zip(recovery, rows, strict=True)]  # fmt: skip
        note = ("<p>Per fault and flow: the silence the application saw (outage), the time after the fault's end "
                "until the pre-fault rate was back (recover time), what was lost, duplicated, reordered or held "
                "back and delivered after the fault (backlog), and whether the protocol kept what it promises "
                "with these settings.</p>")
        parts.append("<h3>Recovery</h3>" + note + _cells_html(RECOVERY_HEADERS, rows, RECOVERY_NUMERIC, classes, raw))
    return "".join(parts)


def section(runs: Rows, timelines: Mapping[str, Mapping[str, Rows]], param_keys: Sequence[str], out_dir: Path,
            img: Callable[[bytes, str], str]) -> str:
    """A "Timeline" section for every run with a series, or with events, recovery or several workloads ('' when
    none has)."""
    parts = []
    for run in runs:
        tl = timelines.get(run.get("run_id"))
        if not tl:
            continue
        if not (tl.get("series") or tl.get("events") or tl.get("recovery") or len(tl.get("workloads") or []) > 1):
            continue
        parts.append(run_section(run, tl, param_keys, out_dir, img))
    return "".join(parts)


def remove_stale_pngs(out_dir: Path) -> None:
    for p in out_dir.glob(f"{PNG_PREFIX}*.png"):
        p.unlink(missing_ok=True)


# ------------------------------------------------------------------ CLI summary


def workload_rows(runs: Rows, timelines: Mapping[str, Mapping[str, Rows]]) -> Rows:
    """Rows of the CLI's per-workload block: one per workload of every run with more than one workload; the same
    keys in every row: ``#``, ``workload``, ``protocol``, ``senders → receivers``, key metrics, ``validity``."""
    chosen = [(run, (timelines.get(run.get("run_id")) or {}).get("workloads") or []) for run in runs]
    chosen = [(run, wls) for run, wls in chosen if len(wls) > 1]
    keys = _workload_keys([w for _, wls in chosen for w in wls])
    rows = []
    for run, wls in chosen:
        for w in wls:
            m = w.get("metrics") or {}
            validity = w.get("validity") or "valid"
            rows.append({
                "#": str(run.get("index")),
                "workload": str(w.get("name")) + (" (bg)" if w.get("background") else ""),
                "protocol": str(w.get("protocol") or "-"),
                "senders → receivers": f"{','.join(w.get('senders') or [])} → {','.join(w.get('receivers') or [])}",
                **{h: fmt.value(c, m.get(c)) for c, h in keys},
                "validity": f"{shaping.VALIDITY_MARK.get(validity, '?')} {validity}",
            })  # fmt: skip
    return rows


def fault_summaries(recovery: Rows, events: Rows) -> list[dict[str, Any]]:
    """Per fault (recovery rows grouped by ``event``, in order of first appearance): the event, the window,
    how many flows, the worst outage and recover time, totals, promises and broken flows."""
    by_index = {e.get("index"): e for e in events}
    groups: dict[Any, Rows] = {}
    for r in recovery:
        groups.setdefault(r.get("event"), []).append(r)
    out = []
    for index, rows in groups.items():
        outages = [r["outage_s"] for r in rows if r.get("outage_s") is not None]
        recovers = [r["recover_s"] for r in rows if r.get("recover_s") is not None]
        never = sum(1 for r in rows if r.get("recover_s") is None and r.get("pre_rate_msgs_s") is not None)
        out.append({
            "event": index, "label": _event_label(by_index.get(index), index),
            "start_s": rows[0].get("fault_start_s"), "end_s": rows[0].get("fault_end_s"), "flows": len(rows),
            "outage_max_s": max(outages, default=None), "recover_max_s": max(recovers, default=None),
            "not_recovered": never,
            **{k: sum(int(r.get(k) or 0) for r in rows) for k in ("lost", "duplicated", "reordered", "backlog")},
            "promises": list(dict.fromkeys(r["promise"] for r in rows if r.get("promise"))),
            "broken": sum(1 for r in rows if r.get("verdict") == "broken"),
            "kept": sum(1 for r in rows if r.get("verdict") == "kept"),
        })  # fmt: skip
    return out


def recovery_lines(runs: Rows, timelines: Mapping[str, Mapping[str, Rows]]) -> list[tuple[str, bool]]:
    """One compact line per fault of every run: (text, broken).  ``run 0 #0 kill service mosquitto
    10.001–15.300 s, 2 flows: outage ≤ 5.31 s, back in ≤ 1 s, lost 0, dup 6, reord 0, backlog 1,000;
    MQTT QoS 1 kept``."""
    lines = []
    for run in runs:
        tl = timelines.get(run.get("run_id")) or {}
        for f in fault_summaries(tl.get("recovery") or [], tl.get("events") or []):
            window = f"{_at(f['start_s'])[:-2]}–{_at(f['end_s'])}"
            back = f"back in ≤ {_dur(f['recover_max_s'])}" if f["recover_max_s"] is not None else "not back"
            if f["not_recovered"]:
                back += f" ({f['not_recovered']} flow{'s' if f['not_recovered'] > 1 else ''} never)"
            text = (f"run {run.get('index')} {f['label']} {window}, {f['flows']} flow{'s' if f['flows'] > 1 else ''}: "
                    f"outage ≤ {_dur(f['outage_max_s'])}, {back}, lost {f['lost']:,}, dup {f['duplicated']:,}, "
                    f"reord {f['reordered']:,}, backlog {f['backlog']:,}")
            if f["promises"]:
                promise = " / ".join(f["promises"])
                if f["broken"]:
                    text += f"; {promise} BROKEN ({f['broken']} of {f['flows']} flows)"
                elif f["kept"]:
                    text += f"; {promise} kept"
                else:
                    text += f"; {promise} not judged"
            lines.append((text, f["broken"] > 0))
    return lines
