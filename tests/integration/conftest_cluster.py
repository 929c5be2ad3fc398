"""The local Kubernetes cluster the integration tests share, and host snapshots that show what a cluster left.

Owns the session-scoped ``local_cluster`` fixture (registered for tests/integration by its
conftest.py): one 2-node cluster per test session, brought up with `roughnet cluster up`
under a name of its own (``t<pid>``, so a cluster of yours called ``local`` is left alone)
and taken down at the end of the session, when the host must look as it did before (else
the session ends with an error naming what was left). ``ROUGHNET_TEST_CLUSTER=<name>``
uses a cluster that is already up instead (and leaves it up): quicker while working on
the Kubernetes backend.

Also owns ``host_snapshot``/``snapshot_diff``: the root namespace's links, routes, rules,
iptables and nftables rulesets, the kubelet's host-wide sysctls, mounts, top-level cgroup
directories, a few host directories, namespaces, and processes that belong to a cluster.
Other roughnet runs' namespaces (``rn-`` but not the cluster's ``rn-k<name>-``) are left
out, so a run of someone else on this machine does not look like a leftover.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roughnet.cluster import ClusterState, load
from roughnet.cluster.up import KUBE_BIN_DIR, image_archives, missing_binaries, missing_host_tools

ROUGHNET = [sys.executable, "-m", "roughnet.cli"]
SYSCTLS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
           "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")
#: Host directories whose entries are compared (a component writing a hard-coded path shows up here).
WATCHED_DIRS = ("/run", "/run/containerd", "/var/lib", "/var/log", "/var/run", "/opt", "/etc", "/usr/libexec",
                "/var/lib/cni", "/var/lib/kubelet", "/var/log/containers", "/run/roughnet", "/run/roughnet/ledger",
                "/var/lib/roughnet", "/var/lib/roughnet/cluster", "/run/roughnet/cluster")
UP_TIMEOUT_S = 600
#: What tests learnt about `cluster up`/`down` (times, memory), printed at the end of the session.
MEASURED: dict[str, float] = {}


def why_not() -> str | None:
    """Why a local cluster cannot be brought up here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (a local cluster creates namespaces, cgroups and mounts)"
    missing = missing_binaries(KUBE_BIN_DIR)
    if missing:
        return f"Kubernetes binaries are missing ({', '.join(Path(m).name for m in missing)}): run `make cluster`"
    tools = missing_host_tools()
    if tools:
        return f"missing programs ({', '.join(tools)}): run `make cluster`"
    _, images = image_archives()
    if images:
        return f"image archives are missing ({', '.join(images)}): run `make cluster`"
    return None


def _run(argv: list[str], timeout: float = 30) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _theirs(name: str, cluster: str | None) -> bool:
    """A namespace (or mount of one) of another roughnet run, not of ``cluster``: not compared."""
    base = name.rsplit("/", 1)[-1]
    if not base.startswith("rn-"):
        return False
    return cluster is None or not base.startswith(f"rn-k{cluster}-")


def _cluster_procs(cluster: str | None) -> list[str]:
    """Processes whose command line names the cluster (its namespaces or its files)."""
    out = []
    keys = [f"rn-k{cluster}-", f"/roughnet/cluster/{cluster}/"] if cluster else ["/roughnet/cluster/"]
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(k in cmd for k in keys):
            out.append(f"{d.name} {cmd[:160]}")
    return sorted(out)


def host_snapshot(cluster: str | None = None) -> dict[str, object]:
    """What a cluster could leave on the host (see the module docstring); ``cluster``: its name, for processes."""
    snap: dict[str, object] = {}
    snap["netns"] = sorted(x.split()[0] for x in _run(["ip", "netns", "list"]).splitlines()
                           if x.strip() and not _theirs(x.split()[0], cluster))
    links = json.loads(_run(["ip", "-j", "link"]) or "[]")
    snap["links"] = sorted((lk["ifname"], lk.get("operstate"), lk.get("mtu")) for lk in links)
    snap["routes"] = _run(["ip", "route", "show", "table", "all"])
    snap["rules"] = _run(["ip", "rule"])
    snap["iptables"] = [ln for ln in _run(["iptables-save"]).splitlines() if not ln.startswith("#")]
    snap["nft"] = _run(["nft", "list", "ruleset"])
    snap["sysctls"] = {k: Path("/proc/sys", k.replace(".", "/")).read_text().strip() for k in SYSCTLS}
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, where, fstype = line.split()[:3]
        if not _theirs(where, cluster):
            mounts.append(f"{where} {fstype}")
    snap["mounts"] = sorted(mounts)
    cgroups = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, where, fstype = line.split()[:3]
        if fstype in ("cgroup", "cgroup2"):
            cgroups += [str(p) for p in Path(where).iterdir() if p.is_dir() and not _theirs(p.name, cluster)]
    snap["cgroups"] = sorted(cgroups)
    dirs = {}
    for d in WATCHED_DIRS:
        try:
            names = [p.name for p in Path(d).iterdir()]
            if d == "/run/roughnet/ledger":  # other runs' ledgers come and go; only the cluster's counts
                names = [n for n in names if cluster is None or n.startswith(f"k{cluster}.")]
            if d == "/run/roughnet":  # ledger/ and wire/ (runs' control sockets) belong to every roughnet run
                names = [n for n in names if n not in ("ledger", "wire")]
            if d.endswith("/roughnet/cluster"):  # other clusters' trees (another test session's) likewise
                names = [n for n in names if cluster is None or n == cluster]
            dirs[d] = sorted(names)
        except OSError:
            dirs[d] = None
    snap["dirs"] = dirs
    snap["processes"] = _cluster_procs(cluster)
    snap["other_clusters"] = sorted(other_clusters(cluster))
    return snap


def other_clusters(cluster: str | None) -> list[str]:
    """Names of other local clusters that are up (or being brought up or down) right now."""
    from roughnet.cluster.down import other_live_clusters
    from roughnet.cluster.ledger import cluster_name
    from roughnet.topo.ledger import DEFAULT_LEDGER_DIR

    names = [cluster_name(e) for e in other_live_clusters(DEFAULT_LEDGER_DIR, None)]
    return [n for n in names if n and n != cluster]


def _without_shared_dirs(snap: dict[str, object]) -> dict[str, object]:
    """``snap`` without the host directories any local cluster may make or remove (allowed_empty_dirs)."""
    from roughnet.cluster.down import allowed_empty_dirs

    shared = allowed_empty_dirs()

    def real(d: str) -> str:  # /var/run is /run
        return "/run" + d[len("/var/run"):] if d == "/var/run" or d.startswith("/var/run/") else d

    dirs = {}
    for d, names in dict(snap.get("dirs") or {}).items():
        if real(d) in shared:
            continue
        dirs[d] = None if names is None else [n for n in names if f"{real(d).rstrip('/')}/{n}" not in shared]
    return {**snap, "dirs": dirs}


def snapshot_diff(before: dict[str, object], after: dict[str, object]) -> list[str]:
    """Readable differences between two host snapshots (empty: the same).

    The kubelet's host-wide sysctls are restored by the last cluster to go down: when another
    cluster (another test session's, or yours) came up or went down in between, they are not compared;
    nor, when the set of other clusters differs, the host directories all clusters share (mount points).
    """
    out = []
    if before.get("other_clusters") != after.get("other_clusters") or after.get("other_clusters"):
        before, after = dict(before), dict(after)
        before.pop("sysctls", None)
        after.pop("sysctls", None)
    if before.get("other_clusters") != after.get("other_clusters"):
        # Another cluster (another test session's) came or went meanwhile: the host directories every
        # cluster shares (mount points such as /var/lib/kubelet, and their parents) were its to make or
        # remove; the last cluster down removes them. Compare the rest.
        before, after = _without_shared_dirs(before), _without_shared_dirs(after)
    before = {k: v for k, v in before.items() if k != "other_clusters"}
    for key in before:
        a, b = before[key], after.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            sa, sb = {json.dumps(x) for x in a}, {json.dumps(x) for x in b}
            out.append(f"{key}: added {sorted(sb - sa)[:8]}, gone {sorted(sa - sb)[:8]}")
        elif isinstance(a, dict) and isinstance(b, dict):
            out.append(f"{key}: " + "; ".join(f"{k}: {a.get(k)} -> {b.get(k)}" for k in sorted(set(a) | set(b))
                                              if a.get(k) != b.get(k)))
        else:
            out.append(f"{key}: {str(a)[:300]!r} -> {str(b)[:300]!r}")
    return out


def cluster_cli(*args: str, timeout: float = UP_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([*ROUGHNET, "cluster", *args], capture_output=True, text=True, timeout=timeout)


def cluster_up(name: str, *args: str) -> tuple[ClusterState, float]:
    t0 = time.monotonic()
    res = cluster_cli("up", "--name", name, *args)
    took = time.monotonic() - t0
    assert res.returncode == 0, f"cluster up --name {name} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return load(name), took


def cluster_down(name: str) -> float:
    t0 = time.monotonic()
    res = cluster_cli("down", "--name", name, timeout=300)
    assert res.returncode == 0, f"cluster down --name {name} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return time.monotonic() - t0


def session_cluster_name() -> str:
    return f"t{os.getpid() % 10**9}"


@pytest.fixture(scope="session")
def local_cluster():
    """A 2-node local cluster (ClusterState), up for the whole session; the host checked after it went down."""
    reason = why_not()
    if reason:
        pytest.skip(f"local cluster: {reason}")
    reuse = os.environ.get("ROUGHNET_TEST_CLUSTER")
    if reuse:
        yield load(reuse)
        return
    name = session_cluster_name()
    before = host_snapshot(name)
    state, took = cluster_up(name, "--nodes", "2")
    MEASURED["session cluster up (2 nodes, CLI wall time) s"] = round(took, 1)
    MEASURED["session cluster up (to all Ready, as recorded) s"] = state.up_seconds
    try:
        yield state
    finally:
        MEASURED["session cluster down s"] = round(cluster_down(name), 1)
        left = snapshot_diff(before, host_snapshot(name))
        print(f"\nlocal cluster {name}: {MEASURED}", file=sys.stderr)
        assert not left, f"cluster {name} left things behind: {left}"
