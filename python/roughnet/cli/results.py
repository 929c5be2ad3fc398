"""`roughnet results`, `import`, `report` and `export`: what is stored, read back (the summary `roughnet run`
prints at its end is here too)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import RoughnetError

from .common import ResultsOpt, app, console, err, _fail, _fmt, _open_store

def _print_summary(store, sweep_id: str) -> None:
    from ..report import summary_rows

    rows = summary_rows(store, sweep_id)
    if not rows:
        console.print("no runs stored")
        return
    t = Table(title=f"summary of {sweep_id}")
    cols = list(rows[0].keys())
    for c in cols:
        t.add_column(c)
    for row in rows:
        t.add_row(*[_fmt(row[c]) for c in cols])
    console.print(t)
    from ..report import point_rows

    prows = point_rows(store, sweep_id)  # points with repeats: estimate [interval] and flags (docs/statistics.md)
    if prows:
        pt = Table(title=f"points of {sweep_id} (repeats pooled; intervals at 95 %)")
        pcols = list(prows[0].keys())
        for c in pcols:
            pt.add_column(c)
        for row in prows:
            pt.add_row(*[escape(str(row[c])) for c in pcols])
        console.print(pt)
    from ..report import recovery_lines, workload_rows

    wrows = workload_rows(store, sweep_id)  # runs with several workloads (docs/timelines.md)
    if wrows:
        wt = Table(title="workloads")
        for c in wrows[0]:
            wt.add_column(c)
        for row in wrows:
            wt.add_row(*[escape(str(v)) for v in row.values()])
        console.print(wt)
    from ..report import process_rows

    procs = process_rows(store, sweep_id)  # the user's own programs ([[process]], docs/applications.md)
    if procs:
        ptab = Table(title="processes")
        for c in procs[0]:
            ptab.add_column(c)
        for row in procs:
            ptab.add_row(*[escape(v) for v in row.values()], style=None if row["as expected"] == "yes" else "red")
        console.print(ptab)
    for line, broken in recovery_lines(store, sweep_id):  # one per fault: outage, recovery, loss, promise
        console.print(f"[red]{escape(line)}[/]" if broken else escape(line), highlight=False)


@app.command("results")
def results_cmd(
    sweep: Optional[str] = typer.Argument(None, help="A sweep id, prefix or scenario name: list its runs."),
    results: Optional[Path] = ResultsOpt,
) -> None:
    """List stored sweeps, or the runs of one sweep."""
    try:
        store = _open_store(results, create=False)
        if sweep is None:
            t = Table(title=f"sweeps in {store.root}")
            cols = ("sweep_id", "scenario", "created_at", "run_count", "runs_ok", "runs_failed", "source")
            for c in cols:
                t.add_column(c.replace("_", " "))
            for r in store.sweeps():
                t.add_row(*[_fmt(r.get(c)) for c in cols])
            console.print(t)
        else:
            _print_summary(store, store.resolve_sweep(sweep))
        store.close()
    except RoughnetError as e:
        _fail(e)


@app.command("import")
def import_cmd(
    source: Path = typer.Argument(..., help="A run's record.json, or a run, sweep or results folder: every "
                                  "record.json below it."),
    results: Optional[Path] = ResultsOpt,
) -> None:
    """Store run records kept as files (a run whose database commit failed, or another results folder's runs)."""
    try:
        store = _open_store(results, create=True)
        stored = store.import_records(source)
        store.close()
    except RoughnetError as e:
        _fail(e)
    for sweep_id, run_id in stored:
        console.print(f"stored run {run_id} of sweep {sweep_id}", highlight=False)
    console.print(f"{len(stored)} run(s) stored in {store.path}", highlight=False)


@app.command()
def report(
    sweep: str = typer.Argument(..., help="A sweep id, prefix or scenario name."),
    fmt: str = typer.Option("html", "--format", help="html (report + PNGs) or perftest (RTI Perftest-style lines)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for the HTML report."),
    results: Optional[Path] = ResultsOpt,
) -> None:
    """Write the HTML report (plots, tables) of a sweep, or print perftest lines."""
    from ..report import build_report, perftest_lines

    if fmt not in ("html", "perftest"):
        err.print(f"[red]error:[/] --format must be html or perftest (got {fmt!r})")
        raise typer.Exit(2)
    try:
        store = _open_store(results, create=False)
        sid = store.resolve_sweep(sweep)
        if fmt == "perftest":
            for line in perftest_lines(store, sid):
                print(line)
        else:
            console.print(f"report: {build_report(store, sid, out)}")
        store.close()
    except RoughnetError as e:
        _fail(e)


@app.command()
def export(
    sweep: str = typer.Argument(..., help="A sweep id, prefix or scenario name."),
    fmt: str = typer.Option("csv", "--format", help="csv or parquet."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output file (default <sweep>.<format>)."),
    table: str = typer.Option("runs", "--table", help="runs, or a timeline table: workloads, flows, series, "
                              "events, recovery, distance, processes, process_series (default file <sweep>-<table>.<format>)."),
    results: Optional[Path] = ResultsOpt,
) -> None:
    """Export one row per run (parameters and metrics), or a timeline table's rows, to CSV or Parquet."""
    from ..results.schema import TIMELINE_TABLES

    if fmt not in ("csv", "parquet"):
        err.print(f"[red]error:[/] --format must be csv or parquet (got {fmt!r})")
        raise typer.Exit(2)
    if table not in ("runs", *TIMELINE_TABLES):
        err.print(f"[red]error:[/] --table must be runs or one of {', '.join(TIMELINE_TABLES)} (got {table!r})")
        raise typer.Exit(2)
    try:
        store = _open_store(results, create=False)
        sid = store.resolve_sweep(sweep)
        default = f"{sid}.{fmt}" if table == "runs" else f"{sid}-{table}.{fmt}"
        path = store.export(sid, fmt, out or Path(default), table=table)
        console.print(f"wrote {path}")
        store.close()
    except RoughnetError as e:
        _fail(e)
