"""`roughnet cluster down` and `roughnet cluster status`: the cluster as a whole, after `up`.

Owns taking a named cluster down (take its ledger over, ``down.teardown``, which also
removes the state file with the run tree) and describing one (nodes with Ready and
versions from the API server, network, node link, age, processes, memory).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..topo.ledger import DEFAULT_LEDGER_DIR, process_alive, read_ledger
from ..topo.system import netns_pids
from . import down, procs
from .ledger import KIND_CGROUP, ClusterLedger, ledger_path
from .state import ClusterError, ClusterNotFound, ClusterPreflightError, ClusterState, check_name, load, state_path


def down_cluster(name: str, progress: Callable[[str], None] = lambda m: None,
                 ledger_dir: Path = DEFAULT_LEDGER_DIR) -> list[str]:
    """Take cluster ``name`` down (or what a killed `cluster up` of it left); what was removed.

    ClusterNotFound (exit 2) when neither its state nor its ledger exists.
    """
    if os.geteuid() != 0:
        raise ClusterPreflightError("roughnet cluster down needs root; run it as root")
    check_name(name)
    lp = ledger_path(name, ledger_dir)
    if not lp.exists():
        sp = state_path(name)
        if sp.exists():
            raise ClusterError(f"cluster {name!r} has a state file ({sp}) but no ledger ({lp}); nothing recorded "
                               f"can be removed safely: remove {sp.parent} by hand if its processes are gone")
        raise ClusterNotFound(f"no local cluster {name!r} is up (no ledger {lp}); `roughnet cluster status` lists them")
    ledger = ClusterLedger.attach(name, ledger_dir)
    progress(f"taking cluster {name} down (ledger {ledger.path})")
    return down.teardown(ledger.entries(), ledger.path, ledger_dir)


@dataclass
class NodeStatus:
    name: str
    ready: str  # "True" | "False" | "Unknown" | "missing"
    kubelet_version: str
    address: str
    pod_cidr: str
    ns: str
    reason: str = ""


@dataclass
class Status:
    state: ClusterState
    nodes: list[NodeStatus]
    age_s: float
    processes_running: int
    processes_recorded: int
    rss_bytes: int
    api_error: str = ""
    dead: list[str] = field(default_factory=list)


def cluster_pids(state: ClusterState, ledger_dir: Path = DEFAULT_LEDGER_DIR) -> set[int]:
    """Every process of the cluster: in its namespaces (daemons, shims) and in its kubelets' cgroups (pods)."""
    pids: set[int] = set()
    for ns in [state.cp_ns] + [n.ns for n in state.nodes]:
        pids |= set(netns_pids(ns))
    entries = read_ledger(Path(state.ledger)) if state.ledger else []
    for e in entries:
        if e.get("kind") == KIND_CGROUP:
            pids |= procs.cgroup_pids(str(e["path"]))
    return pids


def rss_bytes(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            continue
    return total


def status(name: str) -> Status:
    """The status of cluster ``name`` (ClusterNotFound, exit 2, when it is not up)."""
    state = load(name)
    nodes: list[NodeStatus] = []
    api_error = ""
    objs: dict[str, Any] = {}
    try:
        res = procs.run([*state.kubectl_argv(), "--request-timeout", "10s", "get", "nodes", "-o", "json"],
                        "kubectl get nodes", timeout=30)
        objs = {i["metadata"]["name"]: i for i in json.loads(res.stdout).get("items", [])}
    except (ClusterError, ValueError, KeyError) as e:
        api_error = str(e)
    for n in state.nodes:
        obj = objs.get(n.name)
        if obj is None:
            nodes.append(NodeStatus(n.name, "missing" if not api_error else "?", "?", n.address, n.pod_cidr, n.ns))
            continue
        cond = next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == "Ready"), {})
        nodes.append(NodeStatus(n.name, cond.get("status", "Unknown"),
                                obj.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "?"), n.address,
                                obj.get("spec", {}).get("podCIDR", n.pod_cidr), n.ns,
                                "" if cond.get("status") == "True" else cond.get("message", "")))
    running = [p for p in state.processes if process_alive(int(p["pid"]), p.get("start_time"))]
    dead = [f"{p['role']}{' on ' + p['node'] if p.get('node') else ''} (pid {p['pid']})" for p in state.processes
            if p not in running]
    return Status(state=state, nodes=nodes, age_s=time.time() - state.created_at, processes_running=len(running),
                  processes_recorded=len(state.processes), rss_bytes=rss_bytes(cluster_pids(state)),
                  api_error=api_error, dead=dead)
