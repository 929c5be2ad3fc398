"""What a running local cluster is: the state file `roughnet cluster up` writes, and how to reach it.

Owns the state file format (``/run/roughnet/cluster/<name>/state.json``), loading it
(``load``, ``list_clusters``), and the small API other code uses to talk to the
cluster (``ClusterState.kubectl_argv``, ``ClusterState.node``, ``NodeState.ns_argv``).
It creates nothing: ``cluster.up`` writes the file once every node is Ready and
``cluster.down`` removes it.

Reaching the API server: it listens on the control-plane namespace's address
(``198.18.0.1:6443``), which the root namespace cannot route to (roughnet never adds
a route there). So every kubectl call runs *inside* the control-plane namespace:
``ClusterState.kubectl_argv()`` is ``["ip", "netns", "exec", <cp-ns>, <kubectl>,
"--kubeconfig", <admin kubeconfig>]``, and the caller appends kubectl's own arguments.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PreflightError, RoughnetError

#: Runtime state (the state file, sockets): tmpfs, gone at reboot like the cluster itself.
RUN_ROOT = Path(os.environ.get("ROUGHNET_CLUSTER_RUN", "/run/roughnet/cluster"))
#: Bulky data (etcd, containerd's images and snapshots, kubelet dirs, logs, PKI) on disk.
DATA_ROOT = Path(os.environ.get("ROUGHNET_CLUSTER_DATA", "/var/lib/roughnet/cluster"))
DEFAULT_NAME = "local"
#: A cluster name ends up in namespace names (``rn-k<name>-cp``) and cgroup paths.
NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")
STATE_FILE = "state.json"
#: Version of the state file format; a reader refuses a newer one.
STATE_FORMAT = 1


class ClusterError(RoughnetError):
    """Bringing a cluster up or down failed (exit 1); the message names the step and the cause."""


class ClusterPreflightError(PreflightError):
    """The cluster cannot be brought up or found as asked (exit 2); nothing was created."""


class ClusterNotFound(ClusterPreflightError):
    """No cluster of that name is up (no state file)."""


def check_name(name: str) -> str:
    """``name`` if it can name a cluster, else ClusterPreflightError (it ends up in namespace names)."""
    if not NAME_RE.fullmatch(name or ""):
        raise ClusterPreflightError(f"cluster name {name!r} is not usable; expected {NAME_RE.pattern} (a lowercase "
                                    f"letter, then up to 9 lowercase letters or digits)")
    return name


def state_path(name: str, root: Path | None = None) -> Path:
    return Path(root or RUN_ROOT) / check_name(name) / STATE_FILE


@dataclass
class NodeState:
    """One node: its Kubernetes name, its topology host and namespace, addresses and runtime socket."""

    name: str  # Kubernetes node name: node1, node2, ...
    host: str  # host name in the node network's topology: n1, n2, ...
    ns: str  # network namespace: rn-k<name>-n1
    address: str  # node address (InternalIP) on the node network, 198.18.0.x
    pod_cidr: str  # this node's pods, e.g. 198.19.192.0/24 (as the controller-manager allocated it)
    containerd_socket: str  # the node's own containerd (reachable from the root mount namespace)
    holder_pid: int | None = None  # the process holding the node's mount namespace (containerd + kubelet)

    def ns_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this node's network namespace (``ip netns exec``)."""
        return ["ip", "netns", "exec", self.ns, *[str(a) for a in argv]]

    def mount_ns_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in this node's network *and* mount namespace (where its containerd and kubelet live)."""
        if self.holder_pid is None:
            return self.ns_argv(argv)
        return ["nsenter", "-t", str(self.holder_pid), "-m", "-n", "--", *[str(a) for a in argv]]


@dataclass
class ClusterState:
    """A cluster that is up, as ``cluster up`` recorded it once every node was Ready."""

    name: str
    token: str  # namespace token: namespaces are rn-<token>-cp, rn-<token>-n1, ...
    version: str  # Kubernetes version, e.g. v1.32.13
    network: str  # one of layout.NETWORKS
    cp_ns: str  # control-plane namespace (etcd, kube-apiserver, controller-manager, scheduler)
    cp_address: str  # its address on the node network
    apiserver: str  # https://<cp_address>:6443 (reachable from the cluster's namespaces only)
    kubeconfig: str  # admin kubeconfig (system:masters)
    kubectl: str  # the kubectl binary `make cluster` built
    service_cidr: str
    cluster_cidr: str  # all pods; each node has a /24 of it
    node_link: dict[str, Any]  # {"rate_bps", "loss", "delay_ns", "engine", "text"}
    nodes: list[NodeState]
    created_at: float  # epoch seconds when `cluster up` started
    up_seconds: float  # from `cluster up` start to every node Ready
    ledger: str  # the ledger file that lists everything this cluster created
    run_dir: str  # /run/roughnet/cluster/<name>
    data_dir: str  # /var/lib/roughnet/cluster/<name>
    processes: list[dict[str, Any]] = field(default_factory=list)  # {"role", "node", "pid", "start_time"}
    images: list[str] = field(default_factory=list)  # image references imported into every node
    format: int = STATE_FORMAT

    # ---- the API other code uses ------------------------------------------------------------

    def kubectl_argv(self) -> list[str]:
        """The argv prefix running the built kubectl, as cluster admin, against this cluster.

        ``ip netns exec <cp-ns> <kubectl> --kubeconfig <admin kubeconfig>``: kubectl runs inside
        the control-plane namespace, the only place (besides the nodes) that reaches the API
        server. Append kubectl's arguments: ``state.kubectl_argv() + ["get", "nodes", "-o", "json"]``.
        """
        return ["ip", "netns", "exec", self.cp_ns, self.kubectl, "--kubeconfig", self.kubeconfig]

    def node(self, name: str) -> NodeState:
        """The node called ``name`` (Kubernetes name ``node1`` or topology host ``n1``)."""
        for n in self.nodes:
            if name in (n.name, n.host):
                return n
        raise ClusterError(f"cluster {self.name} has no node {name!r}; expected one of {[n.name for n in self.nodes]}")

    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def running(self) -> list[dict[str, Any]]:
        """The recorded processes that still run (same pid and start time)."""
        from ..topo.ledger import process_alive

        return [p for p in self.processes if process_alive(int(p["pid"]), p.get("start_time"))]

    # ---- (de)serialisation ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClusterState:
        if int(d.get("format", 0)) > STATE_FORMAT:
            raise ClusterError(f"cluster state format {d.get('format')} is newer than this roughnet reads "
                               f"({STATE_FORMAT}); expected the roughnet that brought the cluster up")
        d = dict(d)
        d["nodes"] = [NodeState(**n) for n in d.get("nodes", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


def save(state: ClusterState, root: Path | None = None) -> Path:
    """Write the state file atomically (a temporary file renamed over it)."""
    path = state_path(state.name, root)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_dict(), indent=1) + "\n")
    os.replace(tmp, path)
    return path


def load(name: str = DEFAULT_NAME, root: Path | None = None) -> ClusterState:
    """The state of cluster ``name``; ClusterNotFound (exit 2) when it is not up."""
    path = state_path(name, root)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterNotFound(f"no local cluster {name!r} is up (no {path}); start one with "
                              f"`roughnet cluster up --name {name}`") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ClusterError(f"cannot read the state of cluster {name!r} ({path}): {e}") from e
    return ClusterState.from_dict(data)


def list_clusters(root: Path | None = None) -> list[ClusterState]:
    """Every cluster with a state file, by name."""
    base = Path(root or RUN_ROOT)
    out = []
    try:
        names = sorted(p.name for p in base.iterdir() if (p / STATE_FILE).is_file() and NAME_RE.fullmatch(p.name))
    except FileNotFoundError:
        return []
    for name in names:
        try:
            out.append(load(name, base))
        except RoughnetError:
            continue
    return out
