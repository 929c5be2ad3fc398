"""What every command of the CLI shares: the typer app, the consoles, the results folder and store, errors as
exit codes, the signal handlers of a command that tears down, and how a value prints.

The CLI is the only code of roughnet that prints.  Exit codes: 0 success, 1 a failure while running, 2 bad
input or a machine that cannot run the scenario (nothing created), 130 interrupted.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from .. import __version__
from ..errors import RoughnetError

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
    from ..results import Store

    root = _results_root(results)
    if not create and not (root / "results.duckdb").exists():
        from ..errors import UnknownResults

        raise UnknownResults(f"no results database at {root / 'results.duckdb'}; run a scenario first or pass --results")
    from ..results.store import READER_WAIT_S, NeedsUpgrade

    if create:  # `roughnet run`: holds the folder, opens the database only to write (readers get in between)
        from ..run.runner import duckdb_interrupts

        with duckdb_interrupts():  # Ctrl-C while DuckDB creates the tables (rolled back: the next run makes them)
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


def _install_signal_handlers() -> dict:
    """Ctrl-C and SIGTERM: the first raises ``Interrupted`` (the current run is torn down, then the command
    stops); the second raises nothing (an exception landing inside the first one's cleanup would break it) but
    asks for haste: ``topo.system.hurry``, the teardown kills processes without waiting out their grace; later
    ones are ignored while it finishes.  Returns the handler's state (``hits``; set ``done`` once the teardown
    is over, after which a signal only counts)."""
    from ..run import Interrupted
    from ..topo.system import hurry

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


def _exit_interrupted(signals: dict, e: BaseException, what: str) -> None:
    """After Ctrl-C or SIGTERM ended a tool's namespaces (calibrate, profiles check): say so, exit 130."""
    signals["done"] = True
    left = _say_left_behind(what)
    err.print(f"[yellow]interrupted ({e}); {'its namespaces were removed' if not left else 'see above'}[/]")
    raise typer.Exit(130)


def _say_left_behind(what: str) -> bool:
    """After an interruption: print what this process's teardown left (its ledgers' objects) and that `roughnet
    clean` removes it; True when something was left."""
    from ..topo.clean import own_leftovers

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


def _fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}{unit}"
    return f"{v}{unit}"
