"""`roughnet trace`: capacity traces for a link (`capacity_trace`), imported from the formats measurements come in."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import RoughnetError
from .common import _fail, app, console

trace_app = typer.Typer(help="Capacity traces (a link direction's capacity over time, outages included) for "
                        "`capacity_trace` on a link: import them from Mahimahi files or per-second CSVs, and "
                        "look at one.")
app.add_typer(trace_app, name="trace")

FORMATS = ("mahimahi", "csv")


class TraceInputError(RoughnetError):
    """A trace file or option that cannot be read as asked (exit 2: bad input, nothing written)."""

    exit_code = 2


def _print_summary(name: str, s: dict[str, float], as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps({"trace": name, **s}))
        return
    t = Table(title=f"capacity trace {escape(name)} (1-s bins)")
    for col in ("duration", "mean", "p10 / p50 / p90", "seconds at zero", "longest outage"):
        t.add_column(col, justify="right")
    t.add_row(f"{s['duration_s']:,.1f} s", f"{s['mean_mbps']:.3g} Mbit/s",
              f"{s['p10_mbps']:.3g} / {s['p50_mbps']:.3g} / {s['p90_mbps']:.3g} Mbit/s",
              f"{100 * s['zero_seconds']:.1f} %", f"{s['longest_outage_s']:.0f} s")
    console.print(t)


@trace_app.command("import")
def trace_import(
    fmt: str = typer.Argument(..., metavar="FORMAT", help="mahimahi (one ms per line, a 1500-byte delivery "
                              "opportunity each) or csv (a time in seconds and a capacity per line)."),
    file: Path = typer.Argument(..., help="The trace to import (your copy of a dataset's file)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Where to write the Mahimahi trace roughnet "
                                       "reads (default: ./<FILE's name>.mahimahi). Never overwritten."),
    unit: str = typer.Option("Mbit/s", "--unit", help="csv: the rate column's unit (bit/s, kbit/s, Mbit/s, "
                             "Gbit/s, B/s, kB/s, MB/s)."),
    time_column: int = typer.Option(1, "--time-column", min=1, max=1000, help="csv: the time's column (1 = first)."),
    rate_column: int = typer.Option(2, "--rate-column", min=1, max=1000, help="csv: the rate's column."),
    as_json: bool = typer.Option(False, "--json", help="Print the trace's summary as JSON."),
) -> None:
    """Check a trace and write it as a Mahimahi file for `capacity_trace = "FILE"`; print its figures."""
    from ..spec import capacity

    try:
        if fmt not in FORMATS:
            raise TraceInputError(f"format {fmt!r} is unknown; expected one of {', '.join(FORMATS)}")
        target = out if out is not None else Path.cwd() / f"{file.stem}.mahimahi"
        if target.exists():
            raise TraceInputError(f"{target} exists; expected a new file (--out PATH), roughnet never overwrites one")
        try:
            if fmt == "mahimahi":
                ops = capacity.read_mahimahi(file)
            else:
                from ..spec.tracefile import read_trace_text

                text = read_trace_text(file, capacity.MAX_BYTES, capacity.CSV_EXPECTED)
                rows = capacity.parse_rate_csv(text, str(file), unit, time_column, rate_column)
                ops = capacity.from_rates(rows)
        except ValueError as e:
            raise TraceInputError(str(e)) from None
        if not target.parent.is_dir():
            raise TraceInputError(f"{target.parent} is not a folder; expected --out in an existing folder")
        fd, tmp = tempfile.mkstemp(prefix=".trace-", dir=target.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(capacity.to_mahimahi(ops))
            os.link(tmp, target)  # fails if the target appeared meanwhile: never overwritten
        finally:
            os.unlink(tmp)
    except RoughnetError as e:
        _fail(e)
    except OSError as e:
        _fail(TraceInputError(f"cannot write {target}: {e.strerror or e}"))
    _print_summary(str(target), capacity.summary(ops), as_json)
    if not as_json:
        console.print(f"wrote {escape(str(target))}: give it to a link as capacity_trace = \"{escape(str(target))}\" "
                      "(in \\[link.forward] or \\[link.reverse] for one direction)", highlight=False, soft_wrap=True)


@trace_app.command("show")
def trace_show(file: Path = typer.Argument(..., help="A Mahimahi trace."),
               as_json: bool = typer.Option(False, "--json", help="As JSON.")) -> None:
    """A Mahimahi trace's figures from 1-s bins: mean, percentiles, seconds at zero, the longest outage."""
    from ..spec import capacity

    try:
        ops = capacity.read_mahimahi(file)
    except ValueError as e:
        _fail(TraceInputError(str(e)))
    _print_summary(str(file), capacity.summary(ops), as_json)
