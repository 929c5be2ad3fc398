"""The roughnet command line: the only module that prints.

Each command is thin: it calls the library (spec, plan, run, results,
report, topo) and renders what comes back with rich.  Exit codes: 0 success,
1 a failure while running, 2 bad input or a machine that cannot run the
scenario (nothing created), 130 interrupted.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from . import __version__
from .errors import RoughnetError

app = typer.Typer(
    name="roughnet",
    help="How does messaging protocol X behave on network Y under workload Z? "
    "Real protocol stacks on emulated links between network namespaces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Not a terminal (CI logs, pipes): wide enough that tables are not folded into unreadable columns.
console = Console(width=None if sys.stdout.isatty() else 220)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 220)

ResultsOpt = typer.Option(
    None, "--results", help="Results folder (default $ROUGHNET_RESULTS or ./roughnet-results).", show_default=False
)


def _results_root(results: Optional[Path]) -> Path:
    if results is not None:
        return results
    return Path(os.environ.get("ROUGHNET_RESULTS", "roughnet-results"))


def _fail(e: RoughnetError) -> None:
    err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
    raise typer.Exit(e.exit_code)


def _open_store(results: Optional[Path], create: bool):
    """Open the results store; listing commands (create=False) open it read-only."""
    from .results import Store

    root = _results_root(results)
    if not create and not (root / "results.duckdb").exists():
        from .errors import ResultsError

        raise ResultsError(f"no results database at {root / 'results.duckdb'}; run a scenario first or pass --results")
    from .results.store import READER_WAIT_S, NeedsUpgrade

    if create:  # `roughnet run`: holds the folder, opens the database only to write (readers get in between)
        return Store(root, create=create, hold=False, lock_wait_s=READER_WAIT_S)
    try:
        return Store(root, create=False, read_only=True, lock_wait_s=READER_WAIT_S)
    except NeedsUpgrade:
        # An older format: upgrade it once (a backup is kept; refused clearly while another
        # roughnet writes to it), then read as asked.
        Store(root, create=False, lock_wait_s=READER_WAIT_S).close()
        return Store(root, create=False, read_only=True, lock_wait_s=READER_WAIT_S)


def _print_version(value: bool) -> None:
    if value:  # eager: before typer asks for a command
        console.print(f"roughnet {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More logging (-v info, -vv debug)."),
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                 callback=_print_version),
) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


@app.command()
def validate(file: Path = typer.Argument(..., help="Scenario file (TOML).")) -> None:
    """Check a scenario file: format, units, ranges, sweep placeholders. Creates nothing."""
    from .plan import plan_sweep

    try:
        sweep = plan_sweep(file)
    except RoughnetError as e:
        _fail(e)
    console.print(f"[green]ok[/] {file}: scenario {sweep.scenario!r}, {len(sweep.runs)} run(s), sweep id {sweep.sweep_id}")


@app.command()
def show(
    file: Path = typer.Argument(..., help="Scenario file (TOML)."),
    as_json: bool = typer.Option(False, "--json", help="Print the resolved runs as JSON."),
) -> None:
    """Print the runs a scenario expands to (with their stable run ids)."""
    from .plan import plan_sweep

    try:
        sweep = plan_sweep(file)
    except RoughnetError as e:
        _fail(e)
    if as_json:
        print(json.dumps([r.to_dict() for r in sweep.runs], indent=1, default=str))
        return
    t = Table(title=f"{sweep.scenario} ({sweep.sweep_id}): {len(sweep.runs)} run(s)")
    t.add_column("#", justify="right")
    t.add_column("run id", no_wrap=True)
    for axis in sweep.axes:
        t.add_column(axis)
    t.add_column("pattern / protocol")
    t.add_column("links")
    for r in sweep.runs:
        links = "; ".join(_describe_link(link) for link in r.links)
        t.add_row(str(r.index), r.run_id, *[str(r.params.get(a, "")) for a in sweep.axes],
                  f"{r.workload.pattern} / {r.workload.protocol}" if r.workload is not None
                  else f"processes: {', '.join(p.name for p in r.processes)}", links)
    console.print(t)


def _describe_link(link) -> str:
    from . import units

    def d(x):
        parts = []
        if x.rate_bps:
            parts.append(units.format_rate(x.rate_bps))
        if x.delay_ns:
            parts.append(units.format_duration(x.delay_ns))
        if x.loss:
            parts.append(f"{100 * x.loss:g}% loss")
        if isinstance(x.loss_model, dict) and x.loss_model.get("model"):
            parts.append(f"{x.loss_model['model']} loss")
        return " ".join(parts) or "clean"

    fw, rv = d(link.forward), d(link.reverse)
    body = fw if fw == rv else f"{fw} / {rv}"
    if link.positions:  # per-pair distances: positions, paths, path traces or vehicles of a SUMO trace
        moving = sum(len(p) > 1 for p in link.positions)
        body += f", distances from the hosts' positions ({moving} of {len(link.positions)} moving)"
    if link.medium == "csma":
        body += ", CSMA medium"
    if link.wire_threads == 2:
        body += ", a wire thread per direction"
    return f"{'-'.join(link.hosts)}: {body}"


def _install_signal_handlers() -> dict:
    """Ctrl-C and SIGTERM: the first raises ``Interrupted`` (the current run is torn down, then the command
    stops); the second raises nothing (an exception landing inside the first one's cleanup would break it) but
    asks for haste: ``topo.system.hurry``, the teardown kills processes without waiting out their grace; later
    ones are ignored while it finishes.  Returns the handler's state (``hits``; set ``done`` once the teardown
    is over, after which a signal only counts)."""
    from .run import Interrupted
    from .topo.system import hurry

    state: dict = {"hits": 0, "done": False}

    def handler(signum, frame):
        state["hits"] += 1
        name = signal.Signals(signum).name
        if state["done"]:
            return
        if state["hits"] == 1:
            raise Interrupted(name)
        if state["hits"] == 2:
            hurry()
            os.write(2, f"{name} again: tearing down quickly (processes are killed without waiting); if roughnet "
                        f"itself is killed now, `roughnet clean` removes what it leaves\n".encode())
        # later ones: the quick teardown is under way; let it finish

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return state


def _say_left_behind(what: str) -> bool:
    """After an interruption: print what this process's teardown left (its ledgers' objects) and that `roughnet
    clean` removes it; True when something was left."""
    from .topo.clean import own_leftovers

    try:
        left = own_leftovers()
    except RoughnetError as e:
        err.print(f"[yellow]could not read this run's ledger ({escape(str(e))}); `roughnet clean` removes what "
                  f"is left once this roughnet has exited[/]", highlight=False)
        return True
    if not left:
        return False
    err.print(f"[yellow]{what} was cut short and left behind:[/]", highlight=False)
    for x in left:
        err.print(f"  {escape(str(x))}", highlight=False)
    runs = sorted({x.run_id for x in left if x.run_id})
    err.print(f"[yellow]`roughnet clean{' ' + runs[0] if len(runs) == 1 else ''}` removes it once this roughnet has "
              f"exited[/]", highlight=False)
    return True


@app.command()
def run(
    file: Path = typer.Argument(..., help="Scenario file (TOML)."),
    resume: bool = typer.Option(False, "--resume", help="Run only the runs of this sweep not stored yet."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run the runs not stored yet and those "
                                      "stored as failed (their records are replaced); the ok ones are kept."),
    retry_invalid: bool = typer.Option(False, "--retry-invalid", help="As --retry-failed, and also run again the "
                                       "runs stored as ok but judged invalid (e.g. incomplete at the timeout)."),
    results: Optional[Path] = ResultsOpt,
    report: bool = typer.Option(True, "--report/--no-report", help="Write the HTML report at the end."),
    from_row: Optional[int] = typer.Option(None, "--from", min=1, help="First row of the schedule file axis to run "
                                           "(1-based, inclusive); the other rows are left out."),
    to_row: Optional[int] = typer.Option(None, "--to", min=1, help="Last row of the schedule file axis to run "
                                         "(1-based, inclusive)."),
    only: Optional[list[str]] = typer.Option(None, "--only", metavar="KEY=VALUE|RUN_ID|INDEX", help="Run only these runs (repeatable): KEY=VALUE of "
                                             "a swept key (values of one key: any; different keys: all), a run id or "
                                             "a run index. Stored records of them are replaced; the rest of the "
                                             "sweep is kept. With --resume/--retry-*, of those runs only the ones "
                                             "those flags pick."),
    backend: str = typer.Option("namespace", "--backend", metavar="namespace|kubernetes|ns3[,...]",
                                help="Where runs happen: network namespaces of this machine (default), pods "
                                     "of a Kubernetes cluster (docs/kubernetes.md) or an ns-3 simulation "
                                     "(docs/architecture.md, \"The ns3 backend\"). Several, comma-separated: "
                                     "the sweep on each into <results>/<backend>, then compared side by side."),
    kubeconfig: Optional[Path] = typer.Option(None, "--kubeconfig", help="Kubernetes backend: the cluster's "
                                              "kubeconfig (default: $KUBECONFIG, else roughnet's local cluster)."),
    image: Optional[str] = typer.Option(None, "--image", help="Kubernetes backend: roughnet's image as the nodes "
                                        "pull it (default: the one `roughnet image build` writes)."),
    k8s_namespace: Optional[str] = typer.Option(None, "--k8s-namespace", help="Kubernetes backend: the namespace "
                                                "the run's pods go to (default: roughnet)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Kubernetes backend: the local cluster to use "
                                          "(`roughnet cluster up --name`; default: local)."),
) -> None:
    """Run every run of a scenario's sweep, store the results, print a summary and write the report."""
    # Ctrl-C and SIGTERM are held while the modules load and the handlers go in: an exception raised inside a C
    # extension's initialisation (DuckDB's) aborts the process (bench/self_chaos.py: exit -6); then handled.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        import duckdb  # noqa: F401  (loaded now, while nothing can interrupt its initialisation)

        from .backends import backend_for
        from .plan import plan_sweep
        from .run import Interrupted, pending_runs, preflight, run_sweep
        from .select import select_only
        from .sidebyside import parse_backends
        from .spec.schedule import select_rows

        signals = _install_signal_handlers()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a held Ctrl-C or SIGTERM is handled here, in the try
        return _run(file, resume, retry_failed, retry_invalid, results, report, from_row, to_row, only, backend,
                    kubeconfig, image, k8s_namespace, cluster, signals)
    except Interrupted as e:  # before the first run started (planning, preflight): nothing of a run exists yet
        if not signals["done"]:
            signals["done"] = True
            err.print(f"[yellow]interrupted ({e}) before any run started: no run was begun[/]")
            raise typer.Exit(130)
        raise


def _run(file, resume, retry_failed, retry_invalid, results, report, from_row, to_row, only, backend, kubeconfig,
         image, k8s_namespace, cluster, signals) -> None:
    from .backends import backend_for
    from .plan import plan_sweep
    from .run import Interrupted, pending_runs, preflight, run_sweep
    from .select import select_only
    from .sidebyside import parse_backends
    from .spec.schedule import select_rows

    try:
        names = parse_backends(backend)
    except RoughnetError as e:
        _fail(e)
    if len(names) > 1:  # one sweep on several backends, side by side (sidebyside)
        _run_on_backends(names, file, resume, retry_failed, retry_invalid, results, report, from_row, to_row, only,
                         kubeconfig, image, k8s_namespace, cluster)
    try:
        sweep = select_rows(plan_sweep(file), from_row, to_row)
        chosen = select_only(sweep, only)
        pf = preflight(sweep, backend_for(backend, kubeconfig=kubeconfig, image=image, namespace=k8s_namespace,
                                          cluster=cluster))
        store = _open_store(results, create=True)
    except RoughnetError as e:
        _fail(e)
    todo = pending_runs(sweep, store, resume, retry_failed, retry_invalid, chosen)
    _refuse_live_runs(todo, store)
    done_ids: set[str] = set()
    skipped = len(sweep.runs) - len(todo)
    console.print(
        f"[bold]{sweep.scenario}[/] ({sweep.sweep_id}): {len(todo)} run(s) to do"
        + (f", {skipped} already stored" if skipped else "")
        + f"; results in {store.root}"
    )
    failed = 0
    try:
        with Progress(
            TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False,
        ) as progress:
            task = progress.add_task("runs", total=len(todo))

            def on_start(r):
                params = ", ".join(f"{k}={v}" for k, v in r.params.items()) or "single run"
                progress.update(task, description=f"run {r.index} ({params})")

            def on_done(r, rec):
                nonlocal failed
                done_ids.add(r.run_id)
                if rec["status"] != "ok":
                    failed += 1
                    progress.console.print(f"[red]run {r.index} failed:[/] {escape(str(rec['failure_reason']))}", highlight=False)
                progress.advance(task)

            run_sweep(sweep, store, pf, resume=resume, on_start=on_start, on_done=on_done, retry_failed=retry_failed,
                      retry_invalid=retry_invalid, only=chosen)
    except RoughnetError as e:  # the same run started elsewhere after _refuse_live_runs looked (RunBusyError:
        # nothing of it made), or the store failed (its message names the record file kept for `roughnet import`)
        store.close()
        err.print(f"[bold red]error:[/] {escape(str(e))}; the runs stored so far are kept", highlight=False,
                  soft_wrap=True)
        raise typer.Exit(e.exit_code)
    except Interrupted as e:
        signals["done"] = True
        left = _say_left_behind("the current run's teardown")
        rows = "".join(f" {o} {v}" for o, v in (("--from", from_row), ("--to", to_row)) if v is not None)
        if chosen is not None:
            # Exactly the chosen runs not done yet (--resume would skip those stored before this redo).
            left = [r.run_id for r in todo if r.run_id not in done_ids]
            hint = f"roughnet run {file}{rows}" + "".join(f" --only {i}" for i in left)
        else:
            flag = "--retry-invalid" if retry_invalid else "--retry-failed" if retry_failed else "--resume"
            hint = (f"roughnet run {file} {flag}{rows}"
                    + ("; it redoes again the runs redone so far that are still invalid" if retry_invalid else ""))
        done = "the current run was torn down" if not left else "see above for what is left"
        err.print(f"[yellow]interrupted ({e}); {done}, stored runs are kept. Continue with: {hint}[/]")
        store.close()
        raise typer.Exit(130)
    try:
        _print_summary(store, sweep.sweep_id)
        if report:
            from .report import build_report

            path = build_report(store, sweep.sweep_id)
            console.print(f"report: {path}")
    except (Interrupted, RuntimeError) as e:  # every run is stored and torn down: only the summary or the report
        from .run.runner import query_interrupted  # is cut short (DuckDB reports a signal as "Query interrupted")

        if isinstance(e, RuntimeError) and not query_interrupted(e):
            raise
        signals["done"] = True
        err.print(f"[yellow]interrupted ({e}) after the last run: every run is stored; `roughnet report "
                  f"{file}` makes the report[/]")
        store.close()
        raise typer.Exit(130)
    store.close()
    raise typer.Exit(1 if failed else 0)


def _refuse_live_runs(todo, store) -> None:
    """Exit 2, before anything runs, if a run of ``todo`` is being run right now by another roughnet process
    (its ledger's owner is alive: the same run id, whatever its results folder)."""
    from .topo.ledger import DEFAULT_LEDGER_DIR, LEDGER_SUFFIX, busy_message, live_owner

    for r in todo:
        token = r.run_id[:8]
        owner = live_owner(token)
        if owner is not None and owner.get("pid") != os.getpid():
            store.close()
            message = busy_message(owner, DEFAULT_LEDGER_DIR / f"{token}{LEDGER_SUFFIX}")
            err.print(f"[bold red]error:[/] {escape(message)}; nothing was run", highlight=False, soft_wrap=True)
            raise typer.Exit(2)


def _run_on_backends(names, file, resume, retry_failed, retry_invalid, results, report, from_row, to_row, only,
                     kubeconfig, image, k8s_namespace, cluster) -> None:
    """`roughnet run --backend A,B`: every backend's preflight first (nothing runs if one refuses), then the
    sweep on each into <results>/<backend>, then each further backend against the first (sidebyside)."""
    from .backends import backend_for
    from .compare_cli import _print as print_comparison
    from .plan import plan_sweep
    from .run import preflight
    from .select import select_only
    from .sidebyside import compare_backends, results_of
    from .spec.schedule import select_rows

    def kube(name):
        opts = dict(kubeconfig=kubeconfig, image=image, namespace=k8s_namespace, cluster=cluster)
        return opts if name == "kubernetes" else dict.fromkeys(opts)

    root = _results_root(results)
    try:
        sweep = select_rows(plan_sweep(file), from_row, to_row)
        select_only(sweep, only)
        for name in names:
            preflight(sweep, backend_for(name, **kube(name)))
    except RoughnetError as e:
        _fail(e)
    codes = []
    for name in names:
        console.print(f"[bold]backend {name}[/]: results in {results_of(root, name)}")
        o = kube(name)
        try:
            run(file, resume, retry_failed, retry_invalid, results_of(root, name), report, from_row, to_row, only,
                name, o["kubeconfig"], o["image"], o["namespace"], o["cluster"])
        except typer.Exit as e:
            if e.exit_code == 130:
                raise
            codes.append(e.exit_code)
    for other in names[1:]:
        try:
            result, folder = compare_backends(root, sweep.sweep_id, names[0], other)
        except RoughnetError as e:
            _fail(e)
        console.print(f"[bold]side by side[/]: B = {other}, A = {names[0]}")
        print_comparison(console, result)
        console.print(f"side by side: {folder / 'compare.png'} and {folder / 'compare.json'}", highlight=False)
    raise typer.Exit(max(codes, default=0))


def _fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}{unit}"
    return f"{v}{unit}"


def _print_summary(store, sweep_id: str) -> None:
    from .report import summary_rows

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
    from .report import point_rows

    prows = point_rows(store, sweep_id)  # points with repeats: estimate [interval] and flags (docs/statistics.md)
    if prows:
        pt = Table(title=f"points of {sweep_id} (repeats pooled; intervals at 95 %)")
        pcols = list(prows[0].keys())
        for c in pcols:
            pt.add_column(c)
        for row in prows:
            pt.add_row(*[escape(str(row[c])) for c in pcols])
        console.print(pt)
    from .report import recovery_lines, workload_rows

    wrows = workload_rows(store, sweep_id)  # runs with several workloads (docs/timelines.md)
    if wrows:
        wt = Table(title="workloads")
        for c in wrows[0]:
            wt.add_column(c)
        for row in wrows:
            wt.add_row(*[escape(str(v)) for v in row.values()])
        console.print(wt)
    from .report import process_rows

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
    from .report import build_report, perftest_lines

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
    from .results.schema import TIMELINE_TABLES

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


@app.command()
def clean(
    run: Optional[str] = typer.Argument(None, help="Only this dead run: its run id (or its first 8 characters, "
                                        "the ledger's token). Default: every dead run."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be removed."),
) -> None:
    """Remove what dead roughnet runs left behind (found by ledger and prefix, and only those)."""
    from . import topo

    if os.geteuid() != 0:
        err.print("[red]error:[/] roughnet clean needs root")
        raise typer.Exit(2)
    try:
        removed = topo.clean(dry_run=dry_run, run=run)
    except RoughnetError as e:
        _fail(e)
    verb = "would remove" if dry_run else "removed"
    if not removed:
        console.print("nothing left behind")
    for item in removed:
        # a process line says how it ended ("... (SIGTERM)"); clean returns once every one is gone
        console.print(f"{'ended' if not dry_run and item.startswith('process ') else verb} {item}", highlight=False)


@app.command()
def schema() -> None:
    """Print the JSON Schema of scenario files (for editors)."""
    from .spec import json_schema

    print(json.dumps(json_schema(), indent=2))


@app.command()
def doctor() -> None:
    """What this machine can do: root, namespaces, sch_netem, tools, binaries (a pass/fail line each)."""
    from .doctor import checks

    bad = 0
    for c in checks():
        mark = "[green]pass[/]" if c.ok else ("[yellow]warn[/]" if not c.required else "[red]FAIL[/]")
        console.print(f"{mark}  {c.name:<28} {c.detail}", highlight=False)
        if c.required and not c.ok:
            bad += 1
    raise typer.Exit(1 if bad else 0)


@app.command()
def calibrate(
    file: Optional[Path] = typer.Argument(None, help="Scenario file: calibrate each two-host link of its first run."),
    profile: list[str] = typer.Option([], "--profile", "-p", help="A wire profile to calibrate (repeatable)."),
    ci: bool = typer.Option(False, "--ci", help="Calibrate the small CI profile set (lte, wifi-noisy)."),
    seed: int = typer.Option(1, "--seed", help="Seed of the wire's random decisions."),
    full: bool = typer.Option(False, "--full", help="Longer probes (tighter figures, about 3x the time)."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON lines instead of a table."),
) -> None:
    """Send probe traffic through wire-emulated links; print configured against realised figures (exit 1 if any fails)."""
    from .binaries import require_binary
    from .calibrate import CI_PROFILES, calibrate as run_calibration

    if os.geteuid() != 0:
        _fail(RoughnetError("roughnet calibrate needs root (it creates network namespaces); run it as root"))
    from .run.runner import Interrupted

    names = list(profile) + (list(CI_PROFILES) if ci else [])
    signals = _install_signal_handlers()  # Ctrl-C and SIGTERM tear the calibration's namespaces down
    try:
        agent = require_binary("roughnet-agent")
        checks = run_calibration(names, file, agent, seed=seed, quick=not full)
    except RoughnetError as e:
        _fail(e)
    except Interrupted as e:
        signals["done"] = True
        left = _say_left_behind("the calibration's teardown")
        err.print(f"[yellow]interrupted ({e}); {'its namespaces were removed' if not left else 'see above'}[/]")
        raise typer.Exit(130)
    failed = [c for c in checks if c.passed is False]
    if as_json:
        for c in checks:
            console.print_json(json.dumps(c.to_dict()))
    else:
        table = Table(title="calibration (forward direction, through roughnet-wire)")
        for col in ("link", "metric", "configured", "realised", "unit", "tolerance", "result", "note"):
            table.add_column(col, justify="right" if col in ("configured", "realised") else "left")
        for c in checks:
            verdict = "[green]pass[/]" if c.passed else ("[red]FAIL[/]" if c.passed is False else "-")
            num = ["-" if v is None else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.6g}" for v in (c.configured, c.realised)]
            table.add_row(c.target, c.metric, *num, c.unit, c.tolerance, verdict, c.note)
        console.print(table)
    console.print(f"{len(checks) - len(failed)} of {len(checks)} checks passed or not judged, {len(failed)} failed")
    raise typer.Exit(1 if failed else 0)


image_app = typer.Typer(help="Container images built here without a registry: roughnet's for Kubernetes (build), "
                         "yours for the image of a process (pack).", no_args_is_help=True)
app.add_typer(image_app, name="image")


@image_app.command("build")
def image_build(
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Folder for the archives "
                                          "(default $ROUGHNET_IMAGES_DIR or /var/cache/roughnet/images)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when an archive is newer than its inputs."),
) -> None:
    """Build the pause and roughnet images as OCI archives (skipped when up to date)."""
    from .kube.image import build_all

    try:
        images = build_all(output, force=force)
    except RoughnetError as e:
        _fail(e)
    for im in images:
        state = "built" if im.built else "up to date"
        console.print(f"{im.path}  {im.size / 1e6:.1f} MB  {im.ref}  ({state})", highlight=False)
    console.print("On your own cluster: `ctr -n k8s.io images import ARCHIVE` on each node, or copy it into a "
                  "registry (`skopeo copy oci-archive:ARCHIVE docker://REGISTRY/...`, `crane push ARCHIVE ...`) "
                  "and pass `--image`.", highlight=False)


@image_app.command("pack")
def image_pack(
    out: Path = typer.Argument(..., metavar="OUT", help="The archive to write (an OCI image-layout tar), "
                               "e.g. images/iperf3.oci.tar."),
    binary: list[str] = typer.Option([], "--binary", help="A program of this machine to put in the image at its "
                                     "own path, with the shared libraries it loads (repeatable)."),
    entrypoint: list[str] = typer.Option(..., "--entrypoint", help="The image's ENTRYPOINT, one argument per "
                                         "option (repeatable), e.g. --entrypoint /usr/bin/iperf3."),
    cmd: list[str] = typer.Option([], "--cmd", help="The image's CMD, one argument per option (repeatable)."),
    env: list[str] = typer.Option([], "--env", metavar="K=V", help="An Env variable of the image (repeatable)."),
    workdir: str = typer.Option("/", "--workdir", help="The image's WorkingDir (an absolute path)."),
    name: Optional[str] = typer.Option(None, "--name", help="Its reference repo[:tag] "
                                       "(default roughnet.local/<OUT's name>:latest)."),
) -> None:
    """Write an OCI image archive built here without a registry: busybox-static and the given binaries."""
    import re

    from .apps.ocibundle import image_name_ok, pack_image

    def bad(what: str) -> None:
        err.print(f"[red]error:[/] {escape(what)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)

    if out.is_dir() or not out.parent.is_dir():
        bad(f"OUT {out}: " + ("is a folder" if out.is_dir() else f"its folder {out.parent} does not exist"))
    for b in binary:
        p = Path(b)
        if not p.is_file() or not os.access(p, os.X_OK):
            bad(f"--binary {b}: " + ("not an executable file" if p.exists() else "no such file"))
    for e in env:
        if "=" not in e or e.startswith("="):
            bad(f"--env {e!r}: expected K=V")
    if not workdir.startswith("/"):
        bad(f"--workdir {workdir!r}: expected an absolute path")
    stem = re.sub(r"[^a-z0-9._-]+", "-", re.sub(r"(\.oci)?\.tar$", "", out.name).lower()).strip("._-") or "image"
    name = name or f"roughnet.local/{stem}:latest"
    if not image_name_ok(name):
        bad(f"--name {name!r}: expected repo[:tag] (lowercase letters, digits, '.', '_', '-', '/')")
    try:
        im = pack_image(out, name=name, entrypoint=entrypoint, cmd=cmd, working_dir=workdir,
                        env=dict(e.split("=", 1) for e in env), binaries=[str(Path(b).absolute()) for b in binary])
    except RoughnetError as e:
        _fail(e)
    console.print(f"{im.path}  {im.ref}  {im.size} bytes ({im.size / 1e6:.1f} MB)\n"
                  f"digest {im.digest} (config {im.config_digest})", highlight=False)


cluster_app = typer.Typer(help="A local Kubernetes whose nodes are network namespaces of this machine "
                          "(docs/kubernetes.md).", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
ClusterName = typer.Option("local", "--name", help="Cluster name (namespaces rn-k<name>-...).")


@cluster_app.command("up")
def cluster_up(
    nodes: int = typer.Option(2, "--nodes", help="Worker nodes (1..16)."),
    network: str = typer.Option("routed", "--network", metavar="routed|flannel-vxlan", help="Pod network."),
    node_link: Optional[str] = typer.Option(None, "--node-link", help='Rate of the node network, e.g. "100 Mbit/s" '
                                            "(default: not limited)."),
    node_delay: Optional[str] = typer.Option(None, "--node-delay", help='One-way delay, e.g. "1 ms" (wire engine).'),
    node_loss: Optional[str] = typer.Option(None, "--node-loss", help='Random loss, e.g. "1%".'),
    name: str = ClusterName,
) -> None:
    """Bring a local cluster up and wait until every node is Ready."""
    from .cluster.up import UpOptions, up

    def on_signal(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    try:
        state = up(UpOptions(name=name, nodes=nodes, network=network, rate=node_link, delay=node_delay,
                             loss=node_loss), progress=lambda m: console.print(m, highlight=False, markup=False))
    except RoughnetError as e:
        _fail(e)
    except KeyboardInterrupt:
        err.print("interrupted; what was made is removed")
        raise typer.Exit(130)
    console.print(f"cluster {state.name} up in {state.up_seconds:.1f} s: {len(state.nodes)} nodes Ready, "
                  f"Kubernetes {state.version}, network {state.network}", highlight=False)
    console.print(f"kubectl: {' '.join(state.kubectl_argv())} get nodes", highlight=False)


@cluster_app.command("down")
def cluster_down(name: str = ClusterName) -> None:
    """Take a local cluster down, leaving nothing behind (also what a killed `cluster up` left)."""
    import time as _time

    from .cluster.ops import down_cluster

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # half a teardown helps nobody; a second `down` finishes one
    t0 = _time.monotonic()
    try:
        removed = down_cluster(name, progress=lambda m: console.print(m, highlight=False, markup=False))
    except RoughnetError as e:
        _fail(e)
    console.print(f"cluster {name} down in {_time.monotonic() - t0:.1f} s ({len(removed)} objects removed)")


@cluster_app.command("status")
def cluster_status(name: str = ClusterName) -> None:
    """Nodes (Ready, versions), network, node link, age and memory of a local cluster."""
    from .cluster.ops import status

    try:
        st = status(name)
    except RoughnetError as e:
        _fail(e)
    s = st.state
    table = Table(title=f"cluster {s.name}: Kubernetes {s.version}, network {s.network}, node link "
                        f"{s.node_link.get('text')} ({s.node_link.get('engine')} engine)")
    for col in ("node", "Ready", "kubelet", "address", "pod CIDR", "namespace", "note"):
        table.add_column(col)
    for n in st.nodes:
        mark = "[green]True[/]" if n.ready == "True" else f"[red]{escape(n.ready)}[/]"
        table.add_row(n.name, mark, n.kubelet_version, n.address, n.pod_cidr, n.ns, escape(n.reason))
    console.print(table)
    console.print(f"up {st.age_s / 60:.0f} min (came up in {s.up_seconds:.1f} s); control plane {s.cp_ns} "
                  f"({s.apiserver}); processes {st.processes_running}/{st.processes_recorded} running; "
                  f"memory {st.rss_bytes / 2**20:.0f} MiB RSS", highlight=False)
    console.print(f"kubectl: {' '.join(s.kubectl_argv())}", highlight=False)
    if st.api_error:
        err.print(f"[red]API server:[/] {escape(st.api_error)}")
    for d in st.dead:
        err.print(f"[red]not running:[/] {escape(d)}")
    raise typer.Exit(0 if not st.api_error and not st.dead and all(n.ready == "True" for n in st.nodes) else 1)


from .compare_cli import register as _register_compare  # noqa: E402  (roughnet compare, roughnet search)

_register_compare(app)


def main() -> None:
    app()


mobility_app = typer.Typer(help="Vehicle mobility from SUMO, for hosts mapped to vehicles (\\[mobility] fcd, "
                           "\\[\\[host]] vehicle; docs/scenario-format.md).", no_args_is_help=True)
app.add_typer(mobility_app, name="mobility")


@mobility_app.command("fcd")
def mobility_fcd(
    net: Path = typer.Argument(..., help="SUMO network (.net.xml), e.g. scenarios/sumo/town.net.xml."),
    routes: list[Path] = typer.Argument(..., help="SUMO route files (.rou.xml), e.g. scenarios/sumo/town.rou.xml."),
    out: Path = typer.Option(..., "--out", help="The FCD file to write (XML)."),
    end: str = typer.Option("60 s", "--end", help='Simulated time to write, e.g. "60 s".'),
    step: str = typer.Option("1 s", "--step", help='SUMO step length (one FCD time step each), e.g. "0.1 s".'),
    seed: int = typer.Option(1, "--seed", help="SUMO's random seed."),
) -> None:
    """Run SUMO (the eclipse-sumo wheel's sumo, headless) on NET and ROUTES and write its floating-car data."""
    from . import units
    from .errors import SpecError
    from .mobility.fcd import read_fcd
    from .mobility.sumo import write_fcd

    try:
        try:
            end_s, step_s = units.parse_duration_ns(end) / 1e9, units.parse_duration_ns(step) / 1e9
        except ValueError as e:
            raise SpecError(f"--end/--step: {e}") from None
        path = write_fcd(net, list(routes), out, end_s, step_s, seed=seed)
        vehicles = read_fcd(path)
    except (RoughnetError, ValueError) as e:
        _fail(e if isinstance(e, RoughnetError) else SpecError(str(e)))
    console.print(f"wrote {path}: {len(vehicles)} vehicles over {end_s:g} s in steps of {step_s:g} s", highlight=False)


if __name__ == "__main__":
    main()
