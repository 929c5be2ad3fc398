"""``roughnet search FILE --key KEY --from LOAD --to LOAD``: the terminal side of ``roughnet.analysis.search``.

Owns the command's options, running each probe with the ordinary runner into the
results store (each load is a sweep of its own, stored like any other: ``roughnet
report``, ``results`` and ``compare`` read it; an interrupted search started again
reuses the runs already stored), one search per combination of the scenario's other
swept keys, the table it prints, ``search.json`` and the exit code: 0 a boundary (or
the highest load) found, 1 not even the lowest load sustained, 2 bad input or a machine
that cannot run the scenario, 130 interrupted.

Wired into the CLI by ``register(app)`` (``cli.compare.register`` calls it).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import RoughnetError


def _root(results: Optional[Path]) -> Path:
    return results if results is not None else Path(os.environ.get("ROUGHNET_RESULTS", "roughnet-results"))


def _fraction(text: str, what: str) -> float:
    from ..units import parse_fraction

    try:
        return float(parse_fraction(text))
    except (ValueError, TypeError, ArithmeticError):
        raise RoughnetError(f"{what} is {text!r}; expected a percentage such as \"1%\"") from None


def _duration_us(text: str, what: str) -> float:
    from ..units import parse_duration_ns

    try:
        return float(parse_duration_ns(text)) / 1000.0
    except (ValueError, TypeError, ArithmeticError):
        raise RoughnetError(f"{what} is {text!r}; expected a duration such as \"50 ms\"") from None


class _BadInput(RoughnetError):
    exit_code = 2


def register(app: typer.Typer) -> None:
    """Add ``search`` to the roughnet CLI."""

    @app.command("search")
    def search_cmd(
        file: Path = typer.Argument(..., help="Scenario file whose [sweep] has the load key (e.g. rate = "
                                    "\"${load}\" in [workload], load = [\"1000 msg/s\"] in [sweep])."),
        key: str = typer.Option(..., "--key", help="The swept key that is the load."),
        low: str = typer.Option(..., "--from", help="Lowest load, as in the scenario (\"100 msg/s\", "
                                "\"1 Mbit/s\", a number)."),
        high: str = typer.Option(..., "--to", help="Highest load."),
        factor: float = typer.Option(2.0, "--factor", help="Climb by this factor, one run a load, until a run "
                                     "fails."),
        precision: float = typer.Option(0.1, "--precision", help="Stop when the highest sustained and the "
                                        "lowest failing load are within this fraction (0.1 = 10 percent)."),
        repeats: int = typer.Option(3, "--repeats", help="Runs of each load at the boundary; all must pass."),
        max_loss: str = typer.Option("1%", "--max-loss", help="Message loss a run may have (\"none\": not "
                                     "checked)."),
        max_p99: Optional[str] = typer.Option(None, "--max-p99", help="Latency p99 a run may have (\"50 ms\"; "
                                              "default: not checked)."),
        max_held: str = typer.Option("5%", "--max-held", help="Share of sends the protocol may hold back "
                                     "more than 1 ms (\"none\": not checked)."),
        results: Optional[Path] = typer.Option(None, "--results", metavar="DIR", help="Results folder (default "
                                               "$ROUGHNET_RESULTS or ./roughnet-results).", show_default=False),
    ) -> None:
        """Find the highest load a configuration sustains: climb, then bisect with repeats at the boundary.

        One search per combination of the scenario's other swept keys. Exit code: 0 found, 1 the lowest
        load is not sustained, 2 bad input, 130 interrupted."""
        console = Console(width=None if sys.stdout.isatty() else 200)
        err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
        from ..analysis import search as srch

        try:
            crit = srch.Criteria(
                max_loss=None if max_loss.strip() == "none" else _fraction(max_loss, "--max-loss"),
                max_p99_us=None if max_p99 is None else _duration_us(max_p99, "--max-p99"),
                max_held=None if max_held.strip() == "none" else _fraction(max_held, "--max-held"))
            data = srch.read_data(file)
            combos = srch.other_points(data, key, file)
            written = (data.get("sweep") or {}).get(key) or []
            kind, _ = srch.load_kind(written[0] if written else low, f"[sweep] {key}")
            kind_low, lo = srch.load_kind(low, "--from")
            kind_high, hi = srch.load_kind(high, "--to")
            if {kind_low, kind_high} != {kind}:
                raise _BadInput(f"--from {low!r} and --to {high!r} are not of the kind of {key} in {file} "
                                f"({written[0]!r}); expected loads written the same way")
            if not 0 < lo < hi:
                raise _BadInput(f"--from {low!r} and --to {high!r}: expected 0 < --from < --to")
        except RoughnetError as e:
            err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        _install_signal_handlers()
        out: list[dict[str, Any]] = []
        code = 0
        store = None
        try:
            store = _writer(results)
            for fixed in combos:
                title = ", ".join(f"{k}={_label(v)}" for k, v in fixed.items()) or "the scenario"
                console.print(f"[bold]search[/] {key} from {low} to {high} for {escape(title)}: "
                              f"{escape(crit.describe())}", highlight=False)
                probe = _prober(file, key, kind, repeats, fixed, crit, store, console)
                res = srch.search(probe, lo, hi, factor=factor, precision=precision, repeats=repeats)
                _print(console, res, key, title)
                out.append({"point": {k: _label(v) for k, v in fixed.items()}, **res.to_dict()})
                if res.best is None:
                    code = 1
        except RoughnetError as e:
            err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2 if e.exit_code == 2 else 1) from None
        except _interrupted() as e:
            err.print(f"[yellow]interrupted ({e}); the current run was torn down, stored runs are kept: the same "
                      "command continues the search from them[/]")
            raise typer.Exit(130) from None
        finally:
            if store is not None:
                store.close()
        folder = _root(results) / "reports" / "search" / f"{Path(file).stem}-{key}"
        folder.mkdir(parents=True, exist_ok=True)
        doc = {"scenario": str(file), "key": key, "from": low, "to": high, "factor": factor,
               "criteria": crit.describe(), "searches": out}
        (folder / "search.json").write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
        console.print(f"wrote {folder / 'search.json'}", highlight=False)
        raise typer.Exit(code)


def _label(v: Any) -> str:
    if isinstance(v, dict):
        return str(v.get("name") or ", ".join(f"{k}={x}" for k, x in v.items()))
    return str(v)


def _interrupted() -> type[BaseException]:
    from ..run import Interrupted

    return Interrupted


def _install_signal_handlers() -> None:
    """As `roughnet run`'s: the first Ctrl-C or SIGTERM raises ``Interrupted``, the second asks for a quick
    teardown (cli._install_signal_handlers)."""
    from .common import _install_signal_handlers as install

    install()


def _writer(results: Optional[Path]):
    from ..results import Store
    from ..results.store import READER_WAIT_S

    return Store(_root(results), create=True, hold=False, lock_wait_s=READER_WAIT_S)


def _prober(file: Path, key: str, kind: str, repeats: int, fixed: dict[str, Any], crit, store, console):
    """probe(load, n): run the load's missing runs of repeat < n, then judge its stored runs."""
    from ..analysis import search as srch
    from ..run import preflight, run_sweep

    checked: dict[str, Any] = {}  # sweep id -> its preflight

    def probe(load: float, n: int) -> srch.Probe:
        label = srch.load_label(kind, load)
        sweep = srch.probe_sweep(file, key, label, repeats, fixed)
        pf = checked.get(sweep.sweep_id)
        if pf is None:
            pf = checked[sweep.sweep_id] = preflight(sweep)
        want = frozenset(r.run_id for r in sweep.runs if r.repeat < n)
        done = store.completed_run_ids(sweep.sweep_id)
        todo = [r for r in sweep.runs if r.run_id in want and r.run_id not in done]
        if todo:
            console.print(f"  {key} = {label}: {len(todo)} run(s) ({sweep.sweep_id})", highlight=False)
            run_sweep(sweep, store, pf, resume=True, only=want)
        records = [r for r in store.runs(sweep.sweep_id) if r["run_id"] in want]
        p = srch.Probe(srch.load_kind(label, key)[1], str(label), sweep.sweep_id,
                       [srch.judge(r, crit) for r in records])
        verdict = "[green]pass[/]" if p.passed else "[red]fail[/]"
        reasons = p.why_not()
        console.print(f"  {key} = {label}: {verdict} {sum(o.ok for o in p.outcomes)}/{len(p.outcomes)}"
                      + (f" ({escape(reasons)})" if reasons else ""), highlight=False)
        return p

    return probe


def _print(console: Console, res, key: str, title: str) -> None:
    from ..report import fmt

    t = Table(title=f"{key} for {title}: {res.stop}")
    for col in ("load", "runs", "passed", "suspect", "latency p99", "msg loss", "throughput", "why not"):
        t.add_column(col)
    for p in sorted(res.probes, key=lambda p: p.load):
        def worst(column: str, pick=max) -> str:
            vals = [o.metrics.get(column) for o in p.outcomes if o.metrics.get(column) is not None]
            return fmt.value(column, pick(vals)) if vals else "-"

        mark = " ◀ best" if res.best is p else (" ◀ first failing" if res.first_failing is p else "")
        t.add_row(f"{p.label}{mark}", str(len(p.outcomes)), str(sum(o.ok for o in p.outcomes)),
                  str(sum(o.suspect for o in p.outcomes)), worst("lat_p99_us"), worst("loss_ratio"),
                  worst("throughput_bps", min),
                  escape(p.why_not()))
    console.print(t)
    if res.best is None:
        console.print(f"[red]not sustained even at the lowest load[/] ({res.first_failing.label})", highlight=False)
        return
    line = f"highest sustainable {key}: [bold]{res.best.label}[/] ({len(res.best.outcomes)} of " \
           f"{len(res.best.outcomes)} runs passed)"
    if res.first_failing is not None:
        line += f"; {res.first_failing.label} is not ({len(res.first_failing.failures)} of " \
                f"{len(res.first_failing.outcomes)} runs failed)"
    suspect = sum(o.suspect for o in res.best.outcomes)
    if suspect:
        line += f"; {suspect} of the best load's runs are suspect: the machine may be the limit"
    console.print(line, highlight=False)
