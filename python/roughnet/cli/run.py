"""`roughnet validate`, `show` and `run`: a scenario planned, shown, run (on one backend, or on several side by
side) with a progress bar, then its summary and report."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from ..errors import RoughnetError

from .common import (ResultsOpt, app, console, err, _fail, _install_signal_handlers, _open_store, _results_root, 
                     _say_left_behind)

@app.command()
def validate(file: Path = typer.Argument(..., help="Scenario file (TOML).")) -> None:
    """Check a scenario file: format, units, ranges, sweep placeholders. Creates nothing."""
    from ..plan import plan_sweep

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
    from ..plan import plan_sweep

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
    from .. import units

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

        from ..backends import backend_for
        from ..plan import plan_sweep
        from ..run import Interrupted, pending_runs, preflight, run_sweep
        from ..select import select_only
        from ..analysis.sidebyside import parse_backends
        from ..spec.schedule import select_rows

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
    from ..backends import backend_for
    from ..plan import plan_sweep
    from ..run import Interrupted, pending_runs, preflight, run_sweep
    from ..run.runner import duckdb_interrupts
    from ..select import select_only
    from ..analysis.sidebyside import parse_backends
    from ..spec.schedule import select_rows

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
    with duckdb_interrupts():  # a signal inside DuckDB's query: an interrupt before any run began
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

            with duckdb_interrupts():  # beginning the sweep, reading what is stored: a signal inside DuckDB
                run_sweep(sweep, store, pf, resume=resume, on_start=on_start, on_done=on_done,
                          retry_failed=retry_failed, retry_invalid=retry_invalid, only=chosen)
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
    from .results import _print_summary  # (imported here: its commands come after these in the help)

    try:
        _print_summary(store, sweep.sweep_id)
        if report:
            from ..report import build_report

            path = build_report(store, sweep.sweep_id)
            console.print(f"report: {path}")
    except (Interrupted, RuntimeError) as e:  # every run is stored and torn down: only the summary or the report
        from ..run.runner import query_interrupted  # is cut short (DuckDB reports a signal as "Query interrupted")

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
    from ..topo.ledger import DEFAULT_LEDGER_DIR, LEDGER_SUFFIX, busy_message, live_owner

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
    from ..backends import backend_for
    from .compare import _print as print_comparison
    from ..plan import plan_sweep
    from ..run import preflight
    from ..select import select_only
    from ..analysis.sidebyside import compare_backends, results_of
    from ..spec.schedule import select_rows

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
