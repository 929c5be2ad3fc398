"""What this machine can do for link emulation: probed, not guessed.

Owns ``Capabilities`` and ``probe_capabilities``: in a scratch namespace
(ledgered like any run's, always removed) it tries to add a netem qdisc, a tbf,
an htb and an nftables netdev ingress table, and it looks for a working
roughnet-wire binary.  It never touches the root namespace, and decides nothing:
``links.choose`` turns capabilities into engine choices.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RoughnetError
from ..topo.ledger import DEFAULT_LEDGER_DIR, Ledger
from ..topo.system import delete_ns, ns_exec, run_cmd

log = logging.getLogger(__name__)

PROBE_IF_A, PROBE_IF_B = "rnprobe0", "rnprobe1"


@dataclass
class Capabilities:
    root: bool
    netns: bool
    netem: bool
    tbf: bool
    htb: bool
    nft: bool
    wire: bool
    notes: dict[str, Any] = field(default_factory=dict)  # capability -> why not / what was found


def find_wire() -> tuple[Path | None, str]:
    """roughnet-wire, looked up as the agent is ($ROUGHNET_WIRE, <repo>/bin, cargo target, PATH).

    Usable means: the binary runs (``roughnet-wire --version`` exits 0) and the
    engine's Python side (``roughnet.links.wire.WireEngine``) is there to drive it.
    """
    import importlib

    from ..binaries import find_binary

    path = find_binary("roughnet-wire")
    if path is None:
        return None, "roughnet-wire is not built (run `make build`, or set $ROUGHNET_WIRE)"
    try:
        proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=10, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{path} does not run: {e}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return None, f"{path} --version exited {proc.returncode}: {tail[0][:200]}"
    try:
        mod = importlib.import_module("roughnet.links.wire")
    except ImportError as e:
        return None, f"{path} is built but the wire engine's Python side is missing (roughnet.links.wire: {e})"
    if not hasattr(mod, "WireEngine"):
        return None, f"{path} is built but roughnet.links.wire defines no WireEngine"
    return path, f"{path} ({proc.stdout.strip()})"


def _try(argv: list[str], what: str, input: str | None = None) -> tuple[bool, str]:
    try:
        run_cmd(argv, what, input=input)
    except RoughnetError as e:
        return False, str(e)
    return True, "ok"


_cache: Capabilities | None = None
_cache_lock = threading.Lock()


def probe_capabilities(ledger_dir: Path = DEFAULT_LEDGER_DIR, refresh: bool = False) -> Capabilities:
    """Probe once per process (``refresh`` probes again)."""
    global _cache
    with _cache_lock:
        if _cache is None or refresh:
            _cache = _probe(Path(ledger_dir))
        return _cache


def _probe(ledger_dir: Path) -> Capabilities:
    notes: dict[str, Any] = {}
    wire_path, notes["wire"] = find_wire()
    caps = Capabilities(root=os.geteuid() == 0, netns=False, netem=False, tbf=False, htb=False, nft=False,
                        wire=wire_path is not None, notes=notes)
    if not caps.root:
        for k in ("netns", "netem", "tbf", "htb", "nft"):
            notes[k] = "not probed: needs root"
        return caps
    token = f"probe{os.getpid()}"
    ns = f"rn-{token}"
    ledger = Ledger(token, token, ledger_dir)
    try:
        ledger.add("netns", name=ns)
        caps.netns, notes["netns"] = _try(["ip", "netns", "add", ns], "creating a scratch namespace")
        if not caps.netns:
            for k in ("netem", "tbf", "htb", "nft"):
                notes[k] = "not probed: no network namespace"
            return caps
        ok, msg = _try(["ip", "-n", ns, "link", "add", PROBE_IF_A, "type", "veth", "peer", "name", PROBE_IF_B],
                       "creating a scratch veth pair")
        if not ok:
            for k in ("netem", "tbf", "htb", "nft"):
                notes[k] = f"not probed: {msg}"
            return caps
        qdiscs = {
            "netem": ["netem", "delay", "1ms"],
            "tbf": ["tbf", "rate", "1mbit", "burst", "5000", "limit", "10000"],
            "htb": ["handle", "1:", "htb", "default", "1"],
        }
        for key, spec in qdiscs.items():
            ok, msg = _try(["tc", "-n", ns, "qdisc", "add", "dev", PROBE_IF_A, "root", *spec], f"adding a {key} qdisc")
            setattr(caps, key, ok)
            notes[key] = "ok" if ok else msg
            if ok:
                _try(["tc", "-n", ns, "qdisc", "del", "dev", PROBE_IF_A, "root"], f"removing the {key} qdisc")
        if not caps.netem and "unknown" in str(notes["netem"]).lower():
            notes["netem"] = "the kernel has no sch_netem (modprobe sch_netem, or a kernel built with CONFIG_NET_SCH_NETEM)"
        rules = (
            "table netdev rnprobe {\n"
            f'  chain in {{ type filter hook ingress device "{PROBE_IF_B}" priority -500; policy accept;\n'
            "    numgen random mod 1000000 < 1 counter drop\n  }\n}\n"
        )
        caps.nft, notes["nft"] = _try(ns_exec(ns, ["nft", "-f", "-"]), "adding an nftables netdev table", input=rules)
        return caps
    finally:
        try:
            delete_ns(ns)
            ledger.remove_file()
        except RoughnetError as e:  # keep the ledger for `roughnet clean`
            log.error("removing the probe namespace %s: %s", ns, e)
        log.info("capabilities: %s", {k: v for k, v in caps.__dict__.items() if k != "notes"})
