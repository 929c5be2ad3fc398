"""The machine's side: `roughnet clean`, `schema`, `doctor`, `calibrate`, `image`, `cluster` and `mobility`."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import RoughnetError

from .common import app, console, err, _fail, _install_signal_handlers, _exit_interrupted

@app.command()
def clean(
    run: Optional[str] = typer.Argument(None, help="Only this dead run: its run id (or its first 8 characters, "
                                        "the ledger's token). Default: every dead run."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be removed."),
) -> None:
    """Remove what dead roughnet runs left behind (found by ledger and prefix, and only those)."""
    from .. import topo

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
    from ..spec import json_schema

    print(json.dumps(json_schema(), indent=2))


@app.command()
def doctor() -> None:
    """What this machine can do: root, namespaces, sch_netem, tools, binaries (a pass/fail line each)."""
    from ..doctor import checks

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
    from ..binaries import require_binary
    from ..calibrate import CI_PROFILES, calibrate as run_calibration

    if os.geteuid() != 0:
        _fail(RoughnetError("roughnet calibrate needs root (it creates network namespaces); run it as root"))
    from ..run.runner import Interrupted

    names = list(profile) + (list(CI_PROFILES) if ci else [])
    signals = _install_signal_handlers()  # Ctrl-C and SIGTERM tear the calibration's namespaces down
    try:
        agent = require_binary("roughnet-agent")
        checks = run_calibration(names, file, agent, seed=seed, quick=not full)
    except RoughnetError as e:
        _fail(e)
    except Interrupted as e:
        _exit_interrupted(signals, e, "the calibration's teardown")
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
    from ..kube.image import build_all

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

    from ..apps.ocibundle import image_name_ok, pack_image

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
    network: str = typer.Option("routed", "--network", metavar="NETWORK",
                                help="Pod network: routed, flannel-vxlan, flannel-host-gw, flannel-ipsec or kube-router "
                                     "(docs/kubernetes.md)."),
    node_link: Optional[str] = typer.Option(None, "--node-link", help='Rate of the node network, e.g. "100 Mbit/s" '
                                            "(default: not limited)."),
    node_delay: Optional[str] = typer.Option(None, "--node-delay", help='One-way delay, e.g. "1 ms" (wire engine).'),
    node_loss: Optional[str] = typer.Option(None, "--node-loss", help='Random loss, e.g. "1%".'),
    name: str = ClusterName,
) -> None:
    """Bring a local cluster up and wait until every node is Ready."""
    from ..cluster.up import UpOptions, up

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

    from ..cluster.ops import down_cluster

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
    from ..cluster.ops import status

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
    from .. import units
    from ..errors import SpecError
    from ..mobility.fcd import read_fcd
    from ..mobility.sumo import write_fcd

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
