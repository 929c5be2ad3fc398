"""`roughnet profiles`: the link profile table (spec/profiles.toml), each number with its source, and its check."""

from __future__ import annotations

import json
import os
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import RoughnetError
from .common import _fail, _install_signal_handlers, _exit_interrupted, app, console, err

profiles_app = typer.Typer(help="The wire's link profiles: what network each stands for, every number with its "
                           "source, and a check of the cited figures with ping and iperf3.",
                           invoke_without_command=True, no_args_is_help=False)
app.add_typer(profiles_app, name="profiles")


def _unknown(name: str) -> None:
    from ..meter import UnknownProfile
    from ..spec import profiles as table

    _fail(UnknownProfile(f"unknown profile {name!r}; expected one of {', '.join(table.names())}"))


@profiles_app.callback()
def profiles_list(ctx: typer.Context,
                  as_json: bool = typer.Option(False, "--json", help="One JSON object per profile.")) -> None:
    """One line per profile: the network, its key figures, its first source (`roughnet profiles show NAME`: all)."""
    if ctx.invoked_subcommand is not None:
        return
    from ..spec import profiles as table

    if as_json:
        for p in table.table():  # one line each
            typer.echo(json.dumps({"name": p.name, "network": p.network, "summary": p.summary(),
                                   "sources": [s.cites for s in p.sources]}))
        return
    t = Table(title="link profiles (profile = \"NAME\" on a \\[[link]]; side A is the client end, up = A to B)")
    for col in ("profile", "network", "key figures", "source"):
        t.add_column(col, overflow="fold")
    for p in table.table():
        first = p.sources[0].cites.split(";")[0] if p.sources else "-"
        t.add_row(p.name, p.network, p.summary(), first + (f" (+{len(p.sources) - 1})" if len(p.sources) > 1 else ""))
    console.print(t)


@profiles_app.command("show")
def profiles_show(name: str = typer.Argument(..., help="A profile's name (`roughnet profiles` lists them)."),
                  as_json: bool = typer.Option(False, "--json", help="The profile as JSON.")) -> None:
    """Every parameter of one profile with its source, what was derived and how, and the command that checks it."""
    from ..spec import profiles as table

    p = table.get(name)
    if p is None:
        _unknown(name)
    if as_json:
        console.print_json(json.dumps({
            "name": p.name, "network": p.network, "needs": p.needs, "link": p.link_config(),
            "parameters": [{"key": k, "value": v, "source": (s := p.source_of(k)) and s.cites} for k, v in p.numbers()],
            "sources": [s.__dict__ for s in p.sources], "meter": [m.__dict__ for m in p.meter]}))
        return
    console.print(f"[bold]{p.name}[/]: {escape(p.network)}", highlight=False)
    console.print(f"  {escape(p.summary())}", highlight=False)
    t = Table(title="parameters (wire-core LinkConfig; a_to_b = uplink)")
    for col in ("key", "value", "source"):
        t.add_column(col, overflow="fold")
    for k, v in p.parameters():
        s = p.source_of(k)
        shown = f"{v:,}" if isinstance(v, int) else f"{v:g}" if isinstance(v, float) else str(v)
        t.add_row(k, shown, str(p.sources.index(s) + 1) if s else "-")
    console.print(t)
    for i, s in enumerate(p.sources, 1):
        console.print(f"[bold]{i}.[/] {escape(s.figure)}", highlight=False, soft_wrap=True)
        console.print(f"   source: {escape(s.cites)}", highlight=False, soft_wrap=True)
        console.print(f"   derived: {escape(s.derived)}", highlight=False, soft_wrap=True)
        console.print(f"   checked: {escape(s.checked)}", highlight=False)
    if p.needs:
        console.print(f"[bold]you supply:[/] {escape(p.needs)}", highlight=False, soft_wrap=True)
    if p.meter:
        console.print("cited figures an independent meter checks (ping, iperf3):")
        for m in p.meter:
            console.print(f"  {m.figure} {m.cited:g} {m.unit} ± {m.tolerance:g}: {escape(m.why)}",
                          highlight=False, soft_wrap=True)
        console.print(f"check: [bold]roughnet profiles check {p.name}[/] (root)", highlight=False)




@profiles_app.command("check")
def profiles_check(
    names: list[str] = typer.Argument(None, help="Profiles to check (default: --all)."),
    every: bool = typer.Option(False, "--all", help="Every profile with cited figures."),
    count: Optional[int] = typer.Option(None, "--count", min=3, max=100_000,
                                        help="Pings per profile (default: 300, fewer on slow links)."),
    serial: bool = typer.Option(False, "--serial", help="One profile after the other (default: their pings side "
                                "by side, each in its own namespaces; the iperf3 phases one at a time)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON line per figure (progress on stderr)."),
) -> None:
    """Measure each profile's cited figures over the emulated link with ping and iperf3 (root; exit 1 if one is off)."""
    from .. import meter

    try:
        chosen = meter.resolve(list(names or []), every)
    except RoughnetError as e:
        _fail(e)
    if os.geteuid() != 0:
        _fail(RoughnetError("roughnet profiles check needs root (it creates network namespaces); run it as root"))
    from ..run.runner import Interrupted

    for p in chosen:
        if not p.meter:
            err.print(f"{p.name}: no cited figure a meter can check (see `roughnet profiles show {p.name}`)")
    signals = _install_signal_handlers()
    try:
        readings = meter.check_many(chosen, count, parallel=not serial,
                                    progress=lambda name, what: err.print(f"{name}: {what}", highlight=False))
    except RoughnetError as e:
        _fail(e)
    except Interrupted as e:
        _exit_interrupted(signals, e, "the check's teardown")
    if as_json:
        for r in readings:  # one line each
            typer.echo(json.dumps(r.to_dict()))
    limited = [r for r in readings if r.ok is None and r.meter.startswith("not measurable here")]
    bad = [r for r in readings if r.ok is not True and r not in limited]
    if not as_json:
        t = Table(title="cited against measured (ping and iperf3 over roughnet-wire)")
        for col in ("profile", "figure", "cited", "+probe", "measured", "±", "result", "meter"):
            numeric = col in ("cited", "+probe", "measured", "±")
            t.add_column(col, overflow="fold", justify="right" if numeric else "left")
        for r in readings:
            verdict = ("[green]ok[/]" if r.ok else "[red]OFF[/]" if r.ok is False
                       else "[yellow]beyond this machine[/]" if r in limited else "[red]not measured[/]")
            v = r.measured
            got = "-" if v is None else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
            t.add_row(r.profile, f"{r.figure} ({r.unit})", f"{r.cited:g}", f"{r.plus:g}" if r.plus else "", got,
                      f"{r.tolerance:g}", verdict, escape(r.meter))
        console.print(t)
        console.print(f"{len(readings) - len(bad) - len(limited)} of {len(readings)} figures within their tolerance"
                      + (f", {len(limited)} beyond what the meter reaches on this machine" if limited else ""))
    raise typer.Exit(1 if bad else 0)
