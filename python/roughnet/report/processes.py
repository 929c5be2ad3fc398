"""The report's "Processes" section: the user's own programs of ``[[process]]`` (docs/applications.md).

Owns turning the stored process rows (``Store.processes``: one per process of a run, the JSON columns
``final`` and ``expected`` as stored text or already parsed) and ``Store.process_series`` (per process,
interval and named value; ``source`` "tcp" or "app") into: the table of every process (host, kind,
expected and final state, ok or the mismatch with its reason, ready and end times, CPU, peak RSS, the
kernel's TCP totals, the latency the process offered), per run (the first ``MAX_RUN_PLOTS``) one PNG
with a panel per process with TCP series (RTT and retransmissions per interval, the run's events as
vertical lines), and, when processes offered a latency distribution and the sweep has an axis, their
p50/p99 against the first sweep axis.  Conventions of ``report.plots`` / ``timeline.plot``:
``matplotlib.figure.Figure`` with the Agg canvas (nothing global touched), constrained layout.
No store access here.
"""

from __future__ import annotations

import html
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from roughnet.report import fmt

log = logging.getLogger(__name__)

PNG_PREFIX = "processes-"
LATENCY_PNG = f"{PNG_PREFIX}latency.png"
#: Runs that get a TCP plot (the first ones with TCP series, in plan order).
MAX_RUN_PLOTS = 12
#: Up to this many runs share one table (with a run column); more get a table per run.
ONE_TABLE_RUNS = 6
PANEL_W, PANEL_H = 9.0, 2.4  # inches: one wide panel per process
DPI = 100

Rows = list[dict[str, Any]]
Img = Callable[[bytes, str], str]


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _json(v: Any) -> Any:
    """A JSON column's value: parsed when the store gave it as text (a bare word stays as it is)."""
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _at(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} s"


def _count(v: Any) -> str:
    return "-" if v is None else f"{int(v):,}"


def _bytes(v: Any) -> str:
    if v is None:
        return "-"
    v = float(v)
    for step, unit in ((1024.0**3, "GiB"), (1024.0**2, "MiB"), (1024.0, "KiB")):
        if abs(v) >= step:
            return f"{fmt.number(v / step)} {unit}"
    return f"{int(v):,} B"


def _us(v: Any) -> str:
    return fmt.value("lat_p50_us", None if v is None else float(v))


def state_text(state: Any) -> str:
    """``{"exit": 0}`` -> "exit 0", ``{"signal": "SIGINT"}`` -> "signal SIGINT", ``{"running": true}`` ->
    "running", "default" (exit 0, or its stop signal when it has a stop time) -> "default"; None -> "-"."""
    state = _json(state)
    if state is None:
        return "-"
    if state == "default":
        return "default"
    if isinstance(state, Mapping):
        parts = []
        for k, v in state.items():
            if k == "running":
                parts.append("running" if v else "not running")
            else:
                parts.append(f"{k} {v}")
        return ", ".join(parts) or "-"
    return str(state)


def _params(run: Mapping[str, Any] | None, param_keys: Sequence[str]) -> str:
    params = (run or {}).get("params") or {}
    return ", ".join(f"{k}={fmt.label(params[k])}" for k in param_keys if k in params)


def _run_title(run: Mapping[str, Any] | None, run_id: str, param_keys: Sequence[str]) -> str:
    if run is None:
        return f"run {run_id}"
    params = _params(run, param_keys)
    return f"run {run.get('index')}" + (f" ({params})" if params else "")


def _has_app(rows: Rows) -> bool:
    return any((r.get("app_count") or 0) > 0 for r in rows)


# ------------------------------------------------------------------ table


def table_headers(rows: Rows, with_run: bool) -> list[str]:
    headers = ["process", "host", "kind", "expected", "final", "ok", "ready at", "ended at", "CPU", "peak RSS",
               "TCP conns", "retrans", "bytes acked", "mean RTT"]
    if _has_app(rows):
        headers += ["app p50", "app p99"]
    return (["run"] if with_run else []) + headers


def table_rows(rows: Rows, runs_by_id: Mapping[str, Mapping[str, Any]], with_run: bool) -> Rows:
    """Text cells of the processes table, one per process row (keys: ``table_headers``)."""
    app = _has_app(rows)
    out = []
    for p in rows:
        final = state_text(p.get("final")) if _json(p.get("final")) is not None else "not started"
        if p.get("restarts"):
            final += f" (restarted {p['restarts']}×)"
        ok = p.get("ok")
        verdict = "-" if ok is None else "✓ ok" if ok else "✗ mismatch" + (f": {p['reason']}" if p.get("reason")
                                                                             else "")
        row = {
            "process": str(p.get("name")), "host": str(p.get("host") or "-"), "kind": str(p.get("kind") or "-"),
            "expected": state_text(p.get("expected")), "final": final, "ok": verdict,
            "ready at": _at(p.get("ready_s")), "ended at": _at(p.get("ended_s")),
            "CPU": "-" if p.get("cpu_s") is None else f"{float(p['cpu_s']):.2f} s",
            "peak RSS": _bytes(p.get("rss_max_bytes")), "TCP conns": _count(p.get("tcp_connections")),
            "retrans": _count(p.get("tcp_retrans")), "bytes acked": _bytes(p.get("tcp_bytes_acked")),
            "mean RTT": _us(p.get("tcp_rtt_us")),
        }  # fmt: skip
        if app:
            has = (p.get("app_count") or 0) > 0
            row["app p50"] = _us(p.get("lat_p50_us")) if has else "-"
            row["app p99"] = _us(p.get("lat_p99_us")) if has else "-"
        if with_run:
            run = runs_by_id.get(p.get("run_id"))
            row = {"run": str(run.get("index")) if run else str(p.get("run_id")), **row}
        out.append(row)
    return out


NUMERIC = {"run", "ready at", "ended at", "CPU", "peak RSS", "TCP conns", "retrans", "bytes acked", "mean RTT",
           "app p50", "app p99"}


def _table_html(rows: Rows, runs_by_id: Mapping[str, Mapping[str, Any]], with_run: bool) -> str:
    headers = table_headers(rows, with_run)
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for p, row in zip(rows, table_rows(rows, runs_by_id, with_run), strict=True):
        cells = []
        for h in headers:
            inner = _e(row[h])
            if h == "ok" and p.get("ok") is False:
                inner = f'<b class="broken">{inner}</b>'
            cells.append(f'<td class="num">{inner}</td>' if h in NUMERIC else f"<td>{inner}</td>")
        cls = ' class="invalid"' if p.get("ok") is False else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# ------------------------------------------------------------------ plots


def tcp_series(series: Rows) -> dict[str, dict[str, list[tuple[float, float, float]]]]:
    """process -> value name -> [(t_s, interval_s, value)] of the ``tcp`` rows, sorted by time (in the order the
    processes first appear)."""
    out: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    for r in series:
        if r.get("source") != "tcp" or r.get("t_s") is None or r.get("value") is None:
            continue
        out.setdefault(str(r.get("process")), {}).setdefault(str(r.get("name")), []).append(
            (float(r["t_s"]), float(r.get("interval_s") or 0.0), float(r["value"])))
    for names in out.values():
        for rows in names.values():
            rows.sort()
    return out


def _event_time(e: Mapping[str, Any]) -> float | None:
    for k in ("started_s", "took_effect_s", "at_s"):
        if e.get(k) is not None:
            return float(e[k])
    return None


def _event_label(e: Mapping[str, Any]) -> str:
    kind, target = str(e.get("kind") or ""), str(e.get("target") or "")
    target = target if not kind or target.startswith(kind) else f"{kind} {target}".strip()
    note = "" if not e.get("error") else " (not run)" if e.get("started_s") is None else " (failed)"
    return f"{e.get('action') or ''} {target}".strip() + note


def _targets(e: Mapping[str, Any], process: str) -> bool:
    return e.get("kind") == "process" and str(e.get("target") or "") in (process, f"process {process}")


def run_figure(per_process: Mapping[str, Mapping[str, list[tuple[float, float, float]]]],
               events: Sequence[Mapping[str, Any]] = (), title: str | None = None) -> Any:
    """One panel per process: RTT (ms, line, left axis) and retransmissions per interval (bars, right axis)
    over time; the run's events as vertical lines (red: the ones aimed at that panel's process), labelled
    above the top panel.  Artists carry ``gid``s ``rtt-<process>``, ``retrans-<process>``, ``event-<index>``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    names = list(per_process)
    fig = Figure(figsize=(PANEL_W, PANEL_H * len(names) + 0.9), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(len(names), 1, sharex=True, squeeze=False)[:, 0])
    ends = [t + i for vals in per_process.values() for rows in vals.values() for t, i, _ in rows]
    ends += [t for e in events if (t := _event_time(e)) is not None]
    x_end = max(ends, default=1.0)
    for ax, name in zip(axes, names, strict=True):
        vals = per_process[name]
        rtt = vals.get("rtt_us") or []
        if rtt:
            ax.plot([t for t, _, _ in rtt], [v / 1000 for _, _, v in rtt], color="C0", marker=".", markersize=3,
                    linewidth=1.3, gid=f"rtt-{name}")  # fmt: skip
            ax.set_ylim(bottom=0)
        ax.set_ylabel("RTT (ms)", fontsize=9, color="C0")
        ax.set_title(name, fontsize=9, loc="left")
        ax.grid(True, alpha=0.3)
        retrans = vals.get("retrans") or []
        ax2 = ax.twinx()
        if retrans:
            ax2.bar([t for t, _, _ in retrans], [v for _, _, v in retrans],
                    width=[i or 0.8 for _, i, _ in retrans], align="edge", color="C3", alpha=0.35,
                    gid=f"retrans-{name}")  # fmt: skip
        top = max((v for _, _, v in retrans), default=0.0)
        ax2.set_ylim(0, max(1.0, top * 1.15))
        ax2.set_ylabel("retrans / interval", fontsize=9, color="C3")
        ax.set_zorder(ax2.get_zorder() + 1)  # the RTT line over the bars
        ax.patch.set_visible(False)
        for e in events:
            t = _event_time(e)
            if t is None:
                continue
            color = "C3" if _targets(e, name) else "0.25"
            ax.axvline(t, color=color, linestyle=":" if e.get("error") else "-", linewidth=0.9,
                       gid=f"event-{e.get('index')}")  # fmt: skip
    for e in events:
        t = _event_time(e)
        if t is None:
            continue
        axes[0].annotate(_event_label(e), xy=(t, 1.0), xycoords=("data", "axes fraction"), xytext=(2, 2),
                         textcoords="offset points", rotation=90, fontsize=7, va="bottom", ha="left")  # fmt: skip
    axes[-1].set_xlabel("time after t0 (s)")
    axes[-1].set_xlim(0, max(x_end, 1e-9))
    handles = [Line2D([], [], color="C0", marker=".", label="mean RTT of its connections"),
               Patch(color="C3", alpha=0.35, label="retransmissions per interval")]
    if events:
        handles.append(Line2D([], [], color="0.25", label="event (red: on this process)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=9)
    fig.suptitle(title or "processes", fontsize=11)
    return fig


def latency_figure(rows: Rows, runs_by_id: Mapping[str, Mapping[str, Any]], axis: str) -> Any | None:
    """App latency p50 and p99 (two panels) of every process that offered one against the sweep axis ``axis``;
    one line per process name through the mean of its runs at each value, markers for the runs.  None when no
    run has a value of ``axis``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points: dict[str, list[tuple[Any, float | None, float | None]]] = {}
    for p in rows:
        run = runs_by_id.get(p.get("run_id"))
        params = (run or {}).get("params") or {}
        if (p.get("app_count") or 0) <= 0 or axis not in params:
            continue
        points.setdefault(str(p.get("name")), []).append((params[axis], p.get("lat_p50_us"), p.get("lat_p99_us")))
    if not points:
        return None
    order, nums = fmt.order_values(v for pts in points.values() for v, _, _ in pts)
    pos = (lambda v: nums[v]) if nums is not None else (lambda v: float(order.index(v)))  # noqa: E731
    all_y = [y for pts in points.values() for _, a, b in pts for y in (a, b) if y is not None]
    scale = fmt.scale_for("lat_p99_us", all_y)
    fig = Figure(figsize=(8.4, 3.4), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, squeeze=True, sharey=True)
    for k, (ax, stat) in enumerate(zip(axes, ("p50", "p99"), strict=True)):
        for i, (name, pts) in enumerate(points.items()):
            by_x: dict[Any, list[float]] = {}
            for v, a, b in pts:
                y = (a, b)[k]
                if y is not None and math.isfinite(float(y)):
                    by_x.setdefault(v, []).append(float(y) * scale.factor)
            xs = sorted(by_x, key=pos)
            color = f"C{i % 10}"
            ax.plot([pos(x) for x in xs], [sum(by_x[x]) / len(by_x[x]) for x in xs], color=color, linewidth=1.3,
                    label=name if k == 0 else None, gid=f"latency-{stat}-{name}")  # fmt: skip
            ax.plot([pos(x) for x in xs for _ in by_x[x]], [y for x in xs for y in by_x[x]], linestyle="none",
                    marker="o", markersize=4, color=color)  # fmt: skip
        ax.set_title(f"app latency {stat}", fontsize=10)
        ax.set_xlabel(axis)
        ax.grid(True, alpha=0.3)
        ax.set_xticks([pos(v) for v in order], [fmt.label(v) for v in order])  # the values as written
    axes[0].set_ylabel(f"latency ({scale.unit})" if scale.unit else "latency")
    axes[0].set_ylim(bottom=0)
    fig.legend(loc="outside lower center", ncols=min(5, len(points)), fontsize=9)
    return fig


def _save(fig: Any, path: Path) -> bytes:
    fig.savefig(path, format="png")
    return path.read_bytes()


# ------------------------------------------------------------------ HTML


def section(runs: Rows, processes: Rows, process_series: Rows, timelines: Mapping[str, Mapping[str, Rows]],
            param_keys: Sequence[str], out_dir: Path, img: Img) -> str:
    """The "Processes" section ('' when the sweep has no process rows)."""
    if not processes:
        return ""
    runs_by_id = {r.get("run_id"): r for r in runs}
    rank = {r.get("run_id"): i for i, r in enumerate(runs)}
    by_run: dict[str, Rows] = {}
    for p in processes:
        by_run.setdefault(p.get("run_id"), []).append(p)
    run_ids = sorted(by_run, key=lambda rid: (rank.get(rid, len(rank)), str(rid)))
    bad = sum(1 for p in processes if p.get("ok") is False)
    parts = ["<h2>Processes</h2>",
             f"<p>The scenario's own programs ([[process]]): {len(processes)} process runs in {len(run_ids)} "
             f"run{'s' if len(run_ids) != 1 else ''}"
             + (f", <b class=\"broken\">{bad} not in the expected final state</b>" if bad else ", all as expected")
             + ". TCP numbers are the kernel's (tcp_info of the process's sockets); app latency is what the "
               "process offered.</p>"]  # fmt: skip
    if len(run_ids) <= ONE_TABLE_RUNS:
        parts.append(_table_html([p for rid in run_ids for p in by_run[rid]], runs_by_id, len(run_ids) > 1))
    else:
        for rid in run_ids:
            parts.append(f"<h3>{_e(_run_title(runs_by_id.get(rid), rid, param_keys))}</h3>"
                         + _table_html(by_run[rid], runs_by_id, False))
    # TCP over time, per run
    series_by_run: dict[str, Rows] = {}
    for r in process_series:
        series_by_run.setdefault(r.get("run_id"), []).append(r)
    plotted = [rid for rid in run_ids if tcp_series(series_by_run.get(rid) or [])]
    if plotted:
        parts.append("<h3>TCP of the processes over time</h3>")
        if len(plotted) > MAX_RUN_PLOTS:
            parts.append(f"<p>Plots of the first {MAX_RUN_PLOTS} of the {len(plotted)} runs with TCP series.</p>")
    for rid in plotted[:MAX_RUN_PLOTS]:
        title = _run_title(runs_by_id.get(rid), rid, param_keys)
        events = (timelines.get(rid) or {}).get("events") or []
        caption = (f"{title}: per process, the mean RTT of its TCP connections and its retransmissions per "
                   "interval; vertical lines are the events (red: aimed at that process, dotted: failed)")
        try:
            fig = run_figure(tcp_series(series_by_run[rid]), events, title=f"{title}: processes' TCP")
            png = _save(fig, out_dir / f"{PNG_PREFIX}{rid}.png")
            parts.append(f"<figure>{img(png, caption)}<figcaption>{_e(caption)}</figcaption></figure>")
        except Exception as ex:  # noqa: BLE001 - a plot that cannot be drawn must not lose the table
            log.warning("processes plot of run %s failed: %s", rid, ex)
            parts.append(f"<p>The processes plot of {_e(title)} could not be drawn: {_e(ex)}</p>")
    # app latency against the first sweep axis
    if param_keys and _has_app(processes):
        axis = param_keys[0]
        try:
            fig = latency_figure(processes, runs_by_id, axis)
            if fig is not None:
                png = _save(fig, out_dir / LATENCY_PNG)
                caption = (f"Latency the processes offered, p50 and p99 against {axis}, one line per process "
                           "(lines join the means of runs; markers are runs)")
                parts.append(f"<figure>{img(png, caption)}<figcaption>{_e(caption)}</figcaption></figure>")
        except Exception as ex:  # noqa: BLE001
            log.warning("processes latency plot failed: %s", ex)
            parts.append(f"<p>The processes' latency plot could not be drawn: {_e(ex)}</p>")
    return "".join(parts)


def remove_stale_pngs(out_dir: Path) -> None:
    for p in out_dir.glob(f"{PNG_PREFIX}*.png"):
        p.unlink(missing_ok=True)
