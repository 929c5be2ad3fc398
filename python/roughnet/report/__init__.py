"""Reports of stored sweeps: the HTML page with plots, the run summary, perftest lines.

Public API (reads a ``results.Store``; writes only under the report folder):

- ``build_report(store, sweep_id, out_dir=None) -> Path``: self-contained
  ``index.html`` (PNGs embedded) plus the PNGs, in ``out_dir`` or
  ``<results>/reports/<sweep_id>/``.
- ``summary_rows(store, sweep_id) -> list[dict[str, str]]``: one dict per run,
  same keys in the same order for every row (column headers), values ready to
  print: ``#``, ``run``, each swept key, ``repeat`` (only when the sweep has
  repetitions), ``status``, ``validity`` (mark + word),
  then key metrics with units by pattern (latency/rtt p50 and p99, loss,
  throughput).
- ``point_rows(store, sweep_id, confidence=0.95) -> list[dict[str, str]]``: with
  repeats, one dict per parameter point (swept keys, ``runs``, each key metric as
  "12.3 ms [10.1, 15.2]": estimate and interval over the runs, ``flags``); ``[]``
  when no point has more than one run (see ``points`` and docs/statistics.md).
- ``perftest_lines(store, sweep_id) -> list[str]``: RTI Perftest-style summary
  lines per run (see ``perftest``).
- ``workload_rows(store, sweep_id) -> list[dict[str, str]]``: one row per workload
  of every run with more than one (``#``, workload, protocol, senders → receivers,
  key metrics, validity); ``[]`` when no run has several.
- ``recovery_lines(store, sweep_id) -> list[tuple[str, bool]]``: one compact line
  per fault of every timeline run (worst outage and recovery over its flows, totals,
  promise kept or broken) and whether a promise was broken (see ``timeline``).

Modules: ``timeline`` (timeline runs: plot, workloads, events, recovery), ``shaping`` (rows -> series/panels/tables), ``points`` (repeats -> intervals, flags), ``plots`` (PNG),
``html`` (page), ``perftest`` (text lines), ``fmt`` (units for people).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from roughnet.report import perftest, points, shaping
from roughnet.report import timeline as timeline_report

if TYPE_CHECKING:
    from roughnet.results import Store

__all__ = ["build_report", "perftest_lines", "point_rows", "recovery_lines", "summary_rows", "workload_rows"]

REPORTS_DIR = "reports"


def build_report(store: Store, sweep_id: str, out_dir: Path | None = None, extra: list[str] | None = None) -> Path:
    """Write the HTML report of ``sweep_id`` and its PNGs; returns index.html's path.  ``extra``: HTML sections
    after the plots (a sweep run on several backends: the side by side, ``sidebyside.compare_backends``)."""
    sweep = store.sweep(sweep_id)
    runs = store.runs(sweep_id)
    histograms = store.histograms(sweep_id)
    if out_dir is None:
        out_dir = store.root / REPORTS_DIR / sweep_id
    from roughnet.report import html  # matplotlib: only for the report, not for the CLI's summary

    return html.render(sweep, runs, histograms, Path(out_dir), timelines=store.timelines(sweep_id),
                       distance=store.distance(sweep_id), run_dir=lambda r: store.run_dir(sweep_id, r["run_id"]),
                       extra=extra, processes=store.processes(sweep_id),
                       process_series=store.process_series(sweep_id))


def summary_rows(store: Store, sweep_id: str) -> list[dict[str, str]]:
    """Rows of the CLI's summary table (see the module docstring)."""
    sweep = store.sweep(sweep_id)
    runs = store.runs(sweep_id)
    axes = shaping.axis_values(sweep.get("axes") or {}, runs)
    _, rows = shaping.run_table(runs, list(axes))
    return rows


def point_rows(store: Store, sweep_id: str, confidence: float = points.DEFAULT_CONFIDENCE) -> list[dict[str, str]]:
    """Rows of the points table (see the module docstring); [] without repeats."""
    sweep = store.sweep(sweep_id)
    runs = store.runs(sweep_id)
    stats = points.aggregate(runs, store.histograms(sweep_id), points.columns_for(runs, sweep.get("report")),
                             confidence)
    if not points.has_repeats(stats):
        return []
    axes = shaping.axis_values(sweep.get("axes") or {}, runs)
    patterns = list(dict.fromkeys(r.get("pattern") for r in runs if r.get("pattern")))
    return points.point_table(stats, list(axes), patterns)[1]


def perftest_lines(store: Store, sweep_id: str) -> list[str]:
    """RTI Perftest-style summary lines of every run of ``sweep_id``."""
    store.sweep(sweep_id)  # a clear error for an unknown sweep
    return perftest.lines_for_runs(store.runs(sweep_id))


def workload_rows(store: Store, sweep_id: str) -> list[dict[str, str]]:
    """Rows of the CLI's per-workload block (see the module docstring); [] when no run has several workloads."""
    return timeline_report.workload_rows(store.runs(sweep_id), _light_timelines(store, sweep_id))


def process_rows(store: Store, sweep_id: str) -> list[dict[str, str]]:
    """Rows of the CLI's per-process block: one per [[process]] of each run ([] without processes)."""
    import json

    index = {r["run_id"]: r.get("index", r.get("run_index")) for r in store.runs(sweep_id)}
    out = []
    for p in store.processes(sweep_id):
        final = p.get("final")
        if isinstance(final, str):
            try:
                final = json.loads(final)
            except ValueError:
                pass
        end = ", ".join(f"{k} {v}" for k, v in final.items()) if isinstance(final, dict) else "never started"

        def num(v, scale=1.0, unit=""):
            if v is None:
                return "-"
            x = v / scale
            return f"{x:.0f}{unit}" if abs(x) >= 100 or (isinstance(v, int) and scale == 1.0) else f"{x:.3g}{unit}"
        out.append({"#": str(index.get(p["run_id"], "?")), "process": str(p["name"]), "host": str(p.get("host")),
                    "ended": end, "as expected": "yes" if p.get("ok") else f"no: {p.get('reason')}",
                    "TCP conns": num(p.get("tcp_connections")), "retrans": num(p.get("tcp_retrans")),
                    "RTT": num(p.get("tcp_rtt_us"), 1000, " ms"), "app p50": num(p.get("lat_p50_us"), 1000, " ms"),
                    "app p99": num(p.get("lat_p99_us"), 1000, " ms"), "CPU": num(p.get("cpu_s"), 1, " s")})
    return out


def recovery_lines(store: Store, sweep_id: str) -> list[tuple[str, bool]]:
    """(line, promise broken) per fault of every timeline run of ``sweep_id`` (see the module docstring)."""
    return timeline_report.recovery_lines(store.runs(sweep_id), _light_timelines(store, sweep_id))


def _light_timelines(store: Store, sweep_id: str) -> dict[str, dict[str, list[dict]]]:
    """run id -> workloads, events, recovery (not the series, which the summary does not need)."""
    out: dict[str, dict[str, list[dict]]] = {}
    for table, rows in (("workloads", store.workloads(sweep_id)), ("events", store.events(sweep_id)),
                        ("recovery", store.recovery(sweep_id))):
        for row in rows:
            out.setdefault(row["run_id"], {}).setdefault(table, []).append(row)
    return out
