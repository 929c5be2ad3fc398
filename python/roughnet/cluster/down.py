"""Taking a cluster away: `cluster down`, a failed `cluster up`, and `roughnet clean` of a cluster's ledger.

Owns replaying a cluster's ledger in the order that leaves nothing behind:

1. kube-proxy, flanneld and the kubelets (so nothing restarts pods);
2. every process in the kubelets' cgroup roots (the pods' containers), SIGKILL;
3. containerd, then whatever else still runs in a node namespace (the shims);
4. the mount-namespace holders, the control plane (scheduler, controller-manager,
   API server, etcd), the node link's relay; then any stray in the cluster's namespaces.
   With the last process of a node's mount namespace gone, its mounts (bind mounts,
   container root filesystems, pod network namespace pins, secrets) go with it;
5. the cgroup directories under each cgroup root, in every hierarchy;
6. the namespaces (their veths and routes go with them);
7. the host-wide sysctls the kubelet changed, back to their recorded values; directories
   (the cluster's run and data trees; empty host directories made as mount points or
   parents) - both only once no other local cluster that shares them is up;
8. the state file (inside the run tree) and the ledger.

Each step goes on after a failure; the failures are raised together at the end, and the
ledger then stays for `roughnet clean`. Only what the ledger names is touched, and a
directory only under the cluster roots (``/run/roughnet/cluster``, ``/var/lib/roughnet/cluster``)
or among the few host directories a cluster creates.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..topo import naming
from ..topo.ledger import DEFAULT_LEDGER_DIR, LEDGER_SUFFIX, owner_alive, process_start_time, read_ledger
from ..topo.system import delete_ns, netns_pids, ns_exists
from . import procs
from .configs import PRIVATE_MOUNTS
from .ledger import KIND_CGROUP, KIND_DIR, KIND_EMPTYDIR, KIND_SYSCTL, cluster_name, is_cluster_ledger
from .state import DATA_ROOT, RUN_ROOT, ClusterError

log = logging.getLogger(__name__)

#: Stop order by role (see the module docstring); roles not named here go with the last group.
STOP_FIRST = ("kube-proxy", "flanneld", "kubelet")
STOP_RUNTIME = ("containerd",)
STOP_HOLDERS = ("holder",)
GRACE_S = 5.0


def allowed_empty_dirs() -> set[str]:
    """Host directories a cluster may have created empty (mount points, parents of its trees)."""
    out = {host for host, _ in PRIVATE_MOUNTS}
    for root in (RUN_ROOT, DATA_ROOT):
        p = Path(root)
        while p != p.parent and str(p) not in ("/run", "/var/lib", "/var", "/"):
            out.add(str(p))
            p = p.parent
    return out


def _under_roots(path: Path) -> bool:
    path = Path(path)
    return any(path != Path(r) and Path(r) in path.parents for r in (RUN_ROOT, DATA_ROOT))


def other_live_clusters(ledger_dir: Path, exclude: Path | None) -> list[list[dict[str, Any]]]:
    """The entries of every other cluster ledger that is alive (up, or being brought up or down)."""
    out = []
    try:
        files = sorted(p for p in Path(ledger_dir).iterdir() if p.name.endswith(LEDGER_SUFFIX))
    except FileNotFoundError:
        return out
    for p in files:
        if exclude is not None and p.resolve() == Path(exclude).resolve():
            continue
        entries = read_ledger(p)
        if is_cluster_ledger(entries) and owner_alive(entries):
            out.append(entries)
    return out


def describe(entries: list[dict[str, Any]]) -> list[str]:
    """What tearing down these entries would remove (for `roughnet clean --dry-run`)."""
    out = []
    for e in entries:
        k = e.get("kind")
        if k == "process" and procs.process_alive(int(e.get("pid", -1)), e.get("start_time")):
            out.append(f"process {e['pid']} ({e.get('role', e.get('argv0'))}{' on ' + e['node'] if e.get('node') else ''})")
        elif k == "netns" and ns_exists(str(e.get("name"))):
            out.append(f"netns {e['name']}")
        elif k == KIND_CGROUP and procs.cgroup_dirs(str(e.get("path"))):
            out.append(f"cgroup {e['path']} (every hierarchy)")
        elif k == KIND_SYSCTL:
            out.append(f"sysctl {e['key']} back to {e['old']}")
        elif k in (KIND_DIR, KIND_EMPTYDIR) and Path(str(e.get("path"))).exists():
            out.append(f"{'directory' if k == KIND_DIR else 'empty directory'} {e['path']}")
    return out


def teardown(entries: list[dict[str, Any]], ledger_path: Path | None, ledger_dir: Path = DEFAULT_LEDGER_DIR,
             ) -> list[str]:
    """Remove everything ``entries`` (a cluster's ledger) names; returns descriptions of what went.

    Raises ClusterError naming every failure after trying every step; the ledger file is
    removed only when nothing failed.
    """
    name = cluster_name(entries) or "?"
    token = f"k{name}"
    removed: list[str] = []
    failures: list[str] = []
    processes = [e for e in entries if e.get("kind") == "process"]
    namespaces = [str(e["name"]) for e in entries if e.get("kind") == "netns" and isinstance(e.get("name"), str)]
    namespaces = [ns for ns in dict.fromkeys(namespaces) if ns.startswith(f"{naming.NS_PREFIX}{token}-")]
    cgroups = [str(e["path"]) for e in entries if e.get("kind") == KIND_CGROUP]

    def step(what: str, fn) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - teardown goes on
            log.error("cluster %s teardown: %s: %s", name, what, e)
            failures.append(f"{what}: {e}")

    def stop_roles(roles: Iterable[str] | None, exclude: Iterable[str] = (), grace: float = GRACE_S) -> None:
        roles = set(roles) if roles is not None else None
        chosen = [e for e in processes if (roles is None or e.get("role") in roles) and e.get("role") not in exclude]
        done = procs.stop([(int(e["pid"]), e.get("start_time")) for e in chosen], grace)
        for e in chosen:
            if int(e["pid"]) in done:
                removed.append(f"process {e['pid']} ({e.get('role', e.get('argv0'))}"
                               f"{' on ' + e['node'] if e.get('node') else ''})")

    recorded = {int(e["pid"]) for e in processes}

    def strays(nss: list[str], skip: set[int] = frozenset()) -> None:
        found = [(pid, process_start_time(pid)) for ns in nss for pid in netns_pids(ns) if pid not in skip]
        for pid in procs.stop(found, GRACE_S):
            removed.append(f"process {pid} (unrecorded) in a cluster namespace")

    def pods() -> None:
        for cg in cgroups:
            killed = procs.kill_cgroup(cg)
            if killed:
                removed.append(f"{len(set(killed))} process(es) in cgroup {cg} (pods)")

    node_nss = [ns for ns in namespaces if not ns.endswith("-cp")]
    step("stopping kube-proxy, flanneld and the kubelets", lambda: stop_roles(STOP_FIRST))
    step("stopping the pods", pods)
    step("stopping containerd", lambda: stop_roles(STOP_RUNTIME))
    step("stopping the shims", lambda: strays(node_nss, skip=recorded))
    step("ending the nodes' mount namespaces", lambda: stop_roles(STOP_HOLDERS))
    step("stopping the control plane and the rest", lambda: stop_roles(None, grace=GRACE_S))
    step("stopping strays in the cluster's namespaces", lambda: strays(namespaces))
    step("stopping the pods (again)", pods)
    for cg in cgroups:
        def rm_cgroup(cg=cg) -> None:
            if procs.remove_cgroup(cg):
                removed.append(f"cgroup {cg} (every hierarchy)")
        step(f"removing cgroup {cg}", rm_cgroup)
    for ns in reversed(namespaces):
        def rm_ns(ns=ns) -> None:
            if delete_ns(ns):
                removed.append(f"netns {ns}")
        step(f"deleting namespace {ns}", rm_ns)

    others = other_live_clusters(ledger_dir, ledger_path)
    shared_empty = {str(e.get("path")) for o in others for e in o if e.get("kind") == KIND_EMPTYDIR}
    if not others:
        for e in reversed([e for e in entries if e.get("kind") == KIND_SYSCTL]):
            def restore(e=e) -> None:
                now = procs.read_sysctl(e["key"])
                if now != str(e["old"]):
                    procs.write_sysctl(e["key"], str(e["old"]))
                    removed.append(f"sysctl {e['key']} {now} -> {e['old']} (restored)")
            step(f"restoring sysctl {e.get('key')}", restore)
    else:
        log.info("cluster %s: %d other cluster(s) up; the host-wide sysctls stay until the last one goes", name,
                 len(others))

    mounts = procs.host_mounts()
    for e in reversed([e for e in entries if e.get("kind") == KIND_DIR]):
        path = Path(str(e.get("path")))

        def rm_tree(path=path) -> None:
            if not _under_roots(path):
                raise ClusterError(f"{path} is outside the cluster roots {RUN_ROOT} and {DATA_ROOT}; left alone")
            inside = [m for m in mounts if m == str(path) or m.startswith(str(path) + "/")]
            if inside:
                raise ClusterError(f"{path} still holds mounts {inside[:3]}; not removed")
            if path.exists():
                shutil.rmtree(path)
                removed.append(f"directory {path}")
        step(f"removing {path}", rm_tree)
    allowed = allowed_empty_dirs()
    for e in reversed([e for e in entries if e.get("kind") == KIND_EMPTYDIR]):
        path = Path(str(e.get("path")))

        def rm_empty(path=path) -> None:
            if str(path) not in allowed:
                raise ClusterError(f"{path} is not a directory a cluster creates; left alone")
            if str(path) in shared_empty:
                return  # another cluster that is up uses it (as a mount point)
            try:
                path.rmdir()
                removed.append(f"empty directory {path}")
            except FileNotFoundError:
                pass
            except OSError as err:
                if err.errno not in (39,):  # ENOTEMPTY: something else keeps it; it is theirs then
                    raise
        step(f"removing {path}", rm_empty)

    if failures:
        raise ClusterError(f"taking cluster {name} down left objects behind (its ledger {ledger_path} stays for "
                           f"`roughnet clean`): {'; '.join(failures)}")
    if ledger_path is not None:
        try:
            Path(ledger_path).unlink()
            removed.append(f"ledger {Path(ledger_path).name}")
        except FileNotFoundError:
            pass
    return removed


def clean_ledger(path: Path, entries: list[dict[str, Any]] | None = None, dry_run: bool = False) -> list[str]:
    """`roughnet clean` of a dead cluster ledger (a `cluster up` or `down` killed half way, or a cluster whose
    processes all died): the same teardown as `cluster down`.  topo.clean calls this for the ledgers whose
    ``ledger_cleaner`` names this module (cluster.ledger writes it: topo imports no cluster module)."""
    path = Path(path)
    entries = read_ledger(path) if entries is None else entries
    if dry_run:
        return describe(entries) + [f"ledger {path.name} ({path})"]
    try:
        return teardown(entries, path, path.parent)
    except ClusterError as e:
        from ..errors import TopologyError

        raise TopologyError(str(e)) from e
