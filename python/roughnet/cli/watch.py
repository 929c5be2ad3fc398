"""`roughnet watch`: a running sweep seen from another terminal (over SSH too), never disturbing it (issue 29).

In a terminal: one screen, redrawn every --interval: the sweep's progress, the runs stored so far with their
verdicts (the summary `roughnet run` prints at its end), and the run in progress with each flow's messages a
second as a sparkline. Not a terminal (a pipe, a log): one line per run as it is stored and one when a run
starts, nothing redrawn. Either ends by itself when every planned run is stored or no `roughnet run` writes
the folder any more. What it reads and why that cannot disturb the run: report/live.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..errors import ResultsError, RoughnetError
from .common import ResultsOpt, _results_root, app, console, err

#: Stored runs a terminal screen shows (the newest); the rest are counted.
SCREEN_RUNS = 12
#: Flows of the run in progress a screen shows; the rest are counted.
SCREEN_FLOWS = 8
#: Intervals of a flow's sparkline.
SPARK_WIDTH = 60
SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[int], width: int = SPARK_WIDTH) -> str:
    """The newest ``width`` values as block characters scaled to their maximum; a 0 is a blank (silence)."""
    vals = values[-width:]
    top = max(vals, default=0)
    if top <= 0:
        return " " * len(vals)
    return "".join(" " if v <= 0 else SPARKS[min(len(SPARKS) - 1, (v * len(SPARKS) - 1) // top)] for v in vals)


def bar(done: int, total: int, width: int = 60) -> str:
    """A progress bar of ``width`` cells and the percentage: ``████░░░░ 50 %``."""
    frac = min(1.0, done / total) if total > 0 else 0.0
    filled = round(frac * width)
    return "█" * filled + "░" * (width - filled) + f" {100 * frac:.0f} %"


def _rate(bps: float) -> str:
    from ..report import fmt

    return fmt.value("throughput_bps", bps)


def _params(params: dict) -> str:
    from ..report import fmt

    return ", ".join(f"{k}={fmt.label(v)}" for k, v in params.items()) or "single run"


def _head(s) -> str:
    counts = " · ".join(f"{n} {status}" for status, n in sorted(s.statuses.items()))
    writer = f"written by PID {s.writer_pid}" if s.writer_pid else "no roughnet run writes it"
    return (f"{s.scenario} ({s.sweep_id}): {s.stored} of {s.planned} runs stored"
            + (f" ({counts}, {s.suspect} suspect or invalid)" if s.stored else "") + f"; {writer}")


def _screen(s, note: str = "") -> Group:
    parts: list = [Text(_head(s)), Text(bar(s.stored, s.planned))]
    if s.rows:
        t = Table(title=None if len(s.rows) <= SCREEN_RUNS else f"the newest {SCREEN_RUNS} of {len(s.rows)} runs")
        for h in s.headers:
            t.add_column(escape(h))
        for row in s.rows[-SCREEN_RUNS:]:
            t.add_row(*[escape(row[h]) for h in s.headers])
        parts.append(t)
    c = s.current
    if c is not None:
        parts.append(Text(f"running #{c.index} ({c.run_id}): {_params(c.params)}, {c.elapsed_s:.0f} s"))
        if not c.flows:
            parts.append(Text("  (no agent has reported yet)"))
        for f in c.flows[:SCREEN_FLOWS]:
            last = _rate(f.points[-1][2]) if f.points else "-"
            state = "done" if f.finished else f"{last:>12}"
            parts.append(Text(f"  {f.name:<24} {f.messages:>9} msgs {state}  |{sparkline([p[1] for p in f.points])}|"))
        if len(c.flows) > SCREEN_FLOWS:
            parts.append(Text(f"  and {len(c.flows) - SCREEN_FLOWS} more flows"))
    if note:
        parts.append(Text(note, style="yellow"))
    return Group(*parts)


def _end_line(s) -> str:
    if s.complete:
        return f"sweep {s.sweep_id} complete: {_head(s)}"
    return (f"no roughnet run writes {s.root} any more: {s.stored} of {s.planned} runs of {s.sweep_id} stored "
            f"(`roughnet run SCENARIO --resume --results {s.root}` runs the rest)")


def _log_lines(s, seen: set[str], seen_current: str | None) -> tuple[list[str], str | None]:
    """Lines for a log: each run stored since the last look (by run id: a resumed sweep stores runs out of plan
    order), numbered in the order they were seen, and the run that started; ``seen`` gains the new run ids."""
    out = []
    for row in s.rows:
        if row["run"] in seen:
            continue
        seen.add(row["run"])
        cells = "  ".join(f"{h}={row[h]}" for h in s.headers if h not in ("#", "run"))
        out.append(f"stored {len(seen)}/{s.planned}: #{row['#']} {row['run']}  {cells}")
    cur = s.current.run_id if s.current else None
    if s.current is not None and cur != seen_current:
        out.append(f"running #{s.current.index} ({cur}): {_params(s.current.params)}")
    return out, cur if cur is not None else seen_current


@app.command()
def watch(
    sweep: Optional[str] = typer.Argument(None, help="A sweep id, prefix or scenario name (default: the newest "
                                          "sweep of the folder)."),
    results: Optional[Path] = ResultsOpt,
    interval: float = typer.Option(1.0, "--interval", help="Seconds between two looks (0.2 to 60)."),
    once: bool = typer.Option(False, "--once", help="Print what the sweep is doing now and exit."),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for a `roughnet run` to begin writing the "
                               "folder (watch started together with the run); without it a folder nobody writes "
                               "and that holds no sweep is an error at once."),
) -> None:
    """Follow a running sweep: progress, each run's verdict as it is stored, the current run's series."""
    from ..report import live

    if not 0.2 <= interval <= 60:
        err.print(f"[red]error:[/] --interval must be between 0.2 and 60 seconds (got {interval:g})")
        raise typer.Exit(2)
    if not 0 <= wait <= 3600:
        err.print(f"[red]error:[/] --wait must be between 0 and 3600 seconds (got {wait:g})")
        raise typer.Exit(2)
    root = _results_root(results)
    try:
        s = _first_look(live, root, sweep, wait)
    except RoughnetError as e:  # no database there, no such sweep: bad input (exit 2), nothing created
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    try:
        if once:
            console.print(_screen(s))
            return
        if console.is_terminal:
            _follow_screen(live, root, s.sweep_id, s, interval)
        else:
            _follow_log(live, root, s.sweep_id, s, interval)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


#: How long watch waits for a starting `roughnet run` (it holds the folder) to store its sweep.
START_WAIT_S = 60.0


def _first_look(live, root: Path, sweep: Optional[str], wait_s: float):
    """The first snapshot. While a `roughnet run` that holds the folder has not yet stored the sweep asked for
    (the database or the sweep not there yet: watch started beside the run), wait for it, up to START_WAIT_S;
    with ``wait_s``, also wait that long for a run to begin writing a folder nobody writes yet."""
    start = time.monotonic()
    told = False
    while True:
        now = time.monotonic()
        waiting = now < start + wait_s
        try:
            s = live.snapshot(root, sweep)
            # the newest sweep is complete while a run holds the folder: that run's sweep is not stored yet
            if not (sweep is None and s.complete and (s.writer_pid is not None or waiting)) \
                    or now > start + max(wait_s, START_WAIT_S):
                return s
        except ResultsError:
            if not (waiting or live.writer_pid(root) is not None) or now > start + max(wait_s, START_WAIT_S):
                raise
        if not told:
            err.print(f"waiting for a `roughnet run` writing {root} to store its sweep ...", highlight=False)
            told = True
        time.sleep(0.3)


def _follow_screen(live, root: Path, sweep_id: str, s, interval: float) -> None:
    from rich.live import Live

    note = ""
    with Live(_screen(s), console=console, auto_refresh=False, transient=False) as screen:
        while not s.over:
            time.sleep(interval)
            try:
                s, note = live.snapshot(root, sweep_id), ""
            except ResultsError as e:  # the store held by the writer for longer than a reader waits: next time
                note = f"(store busy: {e}; showing the last look)"
            screen.update(_screen(s, note), refresh=True)
    console.print(_end_line(s), highlight=False)


def _follow_log(live, root: Path, sweep_id: str, s, interval: float) -> None:
    console.print(escape(_head(s)), highlight=False, soft_wrap=True)
    seen: set[str] = set()
    lines, current = _log_lines(s, seen, None)
    for line in lines:
        console.print(escape(line), highlight=False, soft_wrap=True)
    while not s.over:
        time.sleep(interval)
        try:
            s = live.snapshot(root, sweep_id)
        except ResultsError:
            continue  # busy: the next look
        lines, current = _log_lines(s, seen, current)
        for line in lines:
            console.print(escape(line), highlight=False, soft_wrap=True)
    console.print(escape(_end_line(s)), highlight=False, soft_wrap=True)
