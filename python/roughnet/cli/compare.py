"""``roughnet compare A B``: the terminal side of ``roughnet.analysis.compare``.

Owns the command's options, opening the one or two results folders (read-only;
an older format is upgraded once, as every reading command does), the table it
prints, the files it writes (``index.html``: the figure and both sweeps overlaid in the report's interactive
plot; ``compare.png`` and ``compare.json`` in ``--out``, the
JSON also where ``--json`` says) and the exit code a CI job gates on: 0 no
regression beyond the thresholds, 1 at least one, 2 bad input (unknown sweep,
metric or selection, no common point; the message names it).

Wired into the CLI by ``register(app)`` (called from ``roughnet.cli``), which also adds
``roughnet search`` (``cli.search``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..analysis.compare import column_title, open_results, read_side
from ..errors import ResultsError, RoughnetError

_VERDICT_STYLE = {"worse": "red", "better": "green", "no detectable difference": "dim", "too few runs": "yellow",
                  "higher": "cyan", "lower": "cyan"}  # fmt: skip


def _root(results: Optional[Path]) -> Path:
    return results if results is not None else Path(os.environ.get("ROUGHNET_RESULTS", "roughnet-results"))


def register(app: typer.Typer) -> None:
    """Add ``compare`` (and ``search``, ``cli.search``) to the roughnet CLI."""
    from .search import register as register_search

    register_search(app)

    @app.command("compare")
    def compare_cmd(
        a: str = typer.Argument(..., help="Sweep A, the reference (id, unique prefix or scenario name)."),
        b: str = typer.Argument(..., help="Sweep B, compared against A."),
        metric: list[str] = typer.Option([], "--metric", "-m", metavar="NAME", help="A metric to compare (repeatable): report "
                                         "names such as latency_p99, loss, throughput, or column names "
                                         "(default: the table's key metrics)."),
        confidence: float = typer.Option(0.95, "--confidence", metavar="C", help="Confidence of the intervals and verdicts."),
        fail_if_worse: float = typer.Option(0.0, "--fail-if-worse", metavar="PCT", help="Exit 1 when B is worse "
                                            "than A by more than PCT percent of A (ratios) at the stated confidence."),
        fail_if_worse_pp: float = typer.Option(0.0, "--fail-if-worse-pp", metavar="PP", help="The same for "
                                               "proportions (message loss, share of runs with full sync), in "
                                               "percentage points."),
        json_out: Optional[Path] = typer.Option(None, "--json", metavar="FILE", help="Also write the JSON "
                                                "document to FILE ('-': print it instead of the table)."),
        out: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="Folder for index.html, compare.png and compare.json "
                                           "(default <results>/reports/compare/<A>--<B>)."),
        results: Optional[Path] = typer.Option(None, "--results", metavar="DIR", help="Results folder of A (and of B unless "
                                               "--results-b; default $ROUGHNET_RESULTS or ./roughnet-results).",
                                               show_default=False),
        results_b: Optional[Path] = typer.Option(None, "--results-b", metavar="DIR", help="Results folder of B.",
                                                 show_default=False),
        where_a: list[str] = typer.Option([], "--where-a", metavar="KEY=VALUE", help="Only A's runs with this "
                                          "parameter value (repeatable)."),
        where_b: list[str] = typer.Option([], "--where-b", metavar="KEY=VALUE", help="Only B's runs with this "
                                          "parameter value (repeatable)."),
        ignore: list[str] = typer.Option([], "--ignore", metavar="KEY", help="Leave this parameter out when "
                                         "matching points (e.g. protocol, to compare two protocols)."),
    ) -> None:
        """Compare two sweeps point by point: B against A per metric, with intervals and a verdict.

        Exit code: 0 no regression beyond the thresholds, 1 a regression, 2 bad input."""
        to_stdout = json_out is not None and str(json_out) == "-"
        console = Console(stderr=to_stdout, width=None if sys.stdout.isatty() else 200)
        err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
        stores = []
        try:
            from ..analysis.compare import compare, metric_columns

            root_a = _root(results)
            root_b = results_b if results_b is not None else root_a
            store_a = open_results(root_a)
            stores.append(store_a)
            store_b = store_a
            if root_b.resolve() != root_a.resolve():
                store_b = open_results(root_b)
                stores.append(store_b)
            side_a = read_side(store_a, "A", a, where_a)
            side_b = read_side(store_b, "B", b, where_b)
            columns = metric_columns(metric, side_a.runs, side_b.runs)
            result = compare(side_a, side_b, columns, confidence, fail_if_worse, fail_if_worse_pp, tuple(ignore))
            overlay = [(side.name, store.sweep(side.sweep_id), side.runs, _histograms(store, side), store.root)
                       for side, store in ((side_a, store_a), (side_b, store_b))]
        except ResultsError as e:  # unknown sweep or folder: bad input
            err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except RoughnetError as e:
            err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        finally:
            for s in stores:
                s.close()
        doc = result.to_dict()
        folder = out if out is not None else root_a / "reports" / "compare" / f"{side_a.sweep_id}--{side_b.sweep_id}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "compare.json").write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
            from ..report.compare_plot import compare_png

            titles = {c: column_title(result, c) for c in columns}
            png = compare_png(result, titles)
            (folder / "compare.png").write_bytes(png)
            from ..report.html import overlay_page

            # the page: the figure, and both sweeps' runs overlaid in one interactive plot (series: the sweep)
            overlay_page(f"{side_b.sweep_id} (B) against {side_a.sweep_id} (A)", overlay, folder, png)
            if json_out is not None and not to_stdout:
                json_out.parent.mkdir(parents=True, exist_ok=True)
                json_out.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
        except OSError as e:
            err.print(f"[bold red]error:[/] cannot write the comparison: {escape(str(e))}", highlight=False)
            raise typer.Exit(2) from None
        if to_stdout:
            print(json.dumps(doc, indent=1, default=str))
        _print(console, result)
        console.print(f"wrote {folder / 'index.html'}, {folder / 'compare.png'} and {folder / 'compare.json'}"
                      + (f" and {json_out}" if json_out is not None and not to_stdout else ""), highlight=False)
        raise typer.Exit(result.exit_code)


def _histograms(store, side) -> list:
    """The latency histograms of the side's runs (its --where selection)."""
    ids = {r.get("run_id") for r in side.runs}
    return [h for h in store.histograms(side.sweep_id) if h.get("run_id") in ids]


def _print(console: Console, result) -> None:
    from ..analysis.compare import change_text, params_text
    from ..report.points import interval_text

    conf = f"{100 * result.confidence:g} %"
    t = Table(title=f"B {result.b.sweep_id} against A {result.a.sweep_id} ({conf} intervals)")
    for col, justify in (("point", "left"), ("runs A/B", "right"), ("metric", "left"), ("A", "right"),
                         ("B", "right"), ("B vs A", "right"), ("verdict", "left")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for p in result.points:
        for i, m in enumerate(p.metrics):
            style = _VERDICT_STYLE.get(m.verdict, "")
            verdict = m.verdict + (f" (regression{': ' + m.beyond if m.beyond else ''})" if m.regression else "")
            t.add_row(params_text(p.params) if i == 0 else "", f"{p.a_runs}/{p.b_runs}" if i == 0 else "",
                      column_title(result, m.column), interval_text(m.column, m.a), interval_text(m.column, m.b),
                      change_text(m), f"[{style}]{escape(verdict)}[/]" if style else escape(verdict),
                      end_section=i == len(p.metrics) - 1)
    console.print(t)
    for name, only in (("A", result.only_a), ("B", result.only_b)):
        if only:
            console.print(f"only in {name} ({len(only)} point(s), not compared): "
                          + "; ".join(params_text(p) for p in only), highlight=False)
    for side in (result.a, result.b):
        versions = ", ".join(f"{k} {' / '.join(v)}" for k, v in side.versions().items()) or "not recorded"
        where = f" where {', '.join(f'{k}={v}' for k, v in side.where.items())}" if side.where else ""
        console.print(f"{side.name}: {side.sweep_id}{where} in {side.results}: {len(side.runs)} runs; {versions}",
                      highlight=False)
    counts = result.counts()
    parts = [f"{n} {v}" for v, n in counts.items() if v != "regressions"]
    regressions = result.regressions()
    line = ", ".join(parts) + f"; {len(regressions)} regression(s) beyond the thresholds " \
        f"({result.fail_pct:g} %, {result.fail_pp:g} percentage points)"
    console.print(("[red]" if regressions else "[green]") + escape(line) + "[/]", highlight=False)
    for p, m in regressions:
        console.print(f"  regression: {params_text(p.params)}: {column_title(result, m.column)} {change_text(m)}",
                      highlight=False)
