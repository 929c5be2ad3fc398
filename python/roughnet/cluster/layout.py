"""Names, addresses and paths of a local cluster: pure functions, no I/O.

Owns the cluster's naming and addressing rules (docs/kubernetes.md, "The local cluster"):

- token ``k<name>`` (never hex-only, so never a run's token); namespaces
  ``rn-k<name>-cp`` (control plane), ``rn-k<name>-n<i>`` (node i), and the node
  network's segment namespace ``rn-k<name>-s0`` (topology hosts ``cp``, ``n1``..``nN``;
  Kubernetes node names ``node1``..``nodeN``);
- the node network is link 0 of a roughnet topology: ``198.18.0.0/24``, the control
  plane ``198.18.0.1``, node i ``198.18.0.<i+1>`` (topo.naming's rules);
- pods: ``198.19.192.0/19`` (the controller-manager gives each node a /24 of it),
  services: ``198.19.224.0/20`` (the ``kubernetes`` Service is ``198.19.224.1``).
  Runs use 198.18.<link>.0/24 and 198.19.x only inside their own namespaces, so
  nothing here can meet them; the ranges are still kept apart from the node network;
- paths: runtime files in ``/run/roughnet/cluster/<name>``, data in
  ``/var/lib/roughnet/cluster/<name>``, a node's files in ``.../nodes/<host>``;
  cgroup root of node i ``/rn-k<name>-n<i>`` in every cgroup v1 hierarchy.

It also turns the node link options into the ``runspec.Run`` that ``topo.Topology``
builds (one link among all hosts: a veth pair for one node, a shared segment for more).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from ..runspec import Direction, Host, Link, Run, Workload
from ..topo import naming
from .state import DATA_ROOT, RUN_ROOT, ClusterPreflightError, check_name

KUBE_VERSION = "v1.32.13"
CP_HOST = "cp"
MAX_NODES = 16
NETWORKS = ("routed", "flannel-vxlan", "flannel-host-gw", "flannel-ipsec", "kube-router")
#: The networks flanneld carries, with its backend for each (net-conf.json's Backend.Type).
FLANNEL_BACKENDS = {"flannel-vxlan": "vxlan", "flannel-host-gw": "host-gw", "flannel-ipsec": "ipsec"}
#: strongSwan's IKE daemon, which flanneld's ipsec backend starts as its child (Debian package strongswan-charon).
CHARON = "/usr/lib/ipsec/charon"
#: All pods; each node gets a /24 (NODE_CIDR_MASK) of it from the controller-manager.
CLUSTER_CIDR = ipaddress.IPv4Network("198.19.192.0/19")
NODE_CIDR_MASK = 24
SERVICE_CIDR = ipaddress.IPv4Network("198.19.224.0/20")
#: The first address of the service range is the `kubernetes` Service (the API server).
API_SERVICE_IP = SERVICE_CIDR.network_address + 1
API_PORT = 6443
CLUSTER_DOMAIN = "cluster.local"
#: Index of the node network's link in its topology (so its subnet is 198.18.0.0/24).
NODE_LINK = 0
#: Pods per node: small, the nodes share two cores.
MAX_PODS = 32
#: flannel's VXLAN: VNI and port (the IANA port; each node namespace has its own stack).
FLANNEL_VNI = 1
FLANNEL_PORT = 8472


def token(name: str) -> str:
    """The namespace token of cluster ``name``: ``k<name>`` (contains non-hex letters: never a run token)."""
    check_name(name)
    tok = f"k{name}"
    naming.check_token(tok)
    return tok


def host_of(index: int) -> str:
    """Topology host of node ``index`` (1-based): ``n1``."""
    return f"n{index}"


def node_name(index: int) -> str:
    """Kubernetes name of node ``index`` (1-based): ``node1``."""
    return f"node{index}"


@dataclass(frozen=True)
class NodeLayout:
    index: int  # 1-based
    name: str  # node1
    host: str  # n1
    ns: str  # rn-k<name>-n1
    address: str  # 198.18.0.2
    dir: Path  # data: /var/lib/roughnet/cluster/<name>/nodes/n1
    run_dir: Path  # runtime: /run/roughnet/cluster/<name>/nodes/n1
    cgroup: str  # cgroupRoot: /rn-k<name>-n1

    @property
    def containerd_socket(self) -> Path:
        return self.run_dir / "containerd.sock"


@dataclass(frozen=True)
class Layout:
    """Everything about a cluster that follows from its name and node count."""

    name: str
    nodes: tuple[NodeLayout, ...]
    network: str = "routed"

    @property
    def token(self) -> str:
        return token(self.name)

    @property
    def cp_ns(self) -> str:
        return naming.host_ns(self.token, CP_HOST)

    @property
    def cp_address(self) -> str:
        return str(naming.host_address(NODE_LINK, 0))

    @property
    def apiserver_url(self) -> str:
        return f"https://{self.cp_address}:{API_PORT}"

    @property
    def run_dir(self) -> Path:
        return RUN_ROOT / self.name

    @property
    def data_dir(self) -> Path:
        return DATA_ROOT / self.name

    @property
    def pki_dir(self) -> Path:
        return self.data_dir / "pki"

    @property
    def cp_dir(self) -> Path:
        return self.data_dir / "cp"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def audit_policy(self) -> Path:
        return self.cp_dir / "audit-policy.json"

    @property
    def audit_log(self) -> Path:
        """What the service accounts of namespace roughnet asked the API server (configs.AUDIT_POLICY)."""
        return self.log_dir / "audit.log"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.data_dir / "admin.kubeconfig"

    def hosts(self) -> list[str]:
        return [CP_HOST] + [n.host for n in self.nodes]

    def namespaces(self) -> list[str]:
        return [self.cp_ns] + [n.ns for n in self.nodes]

    def node(self, name: str) -> NodeLayout:
        for n in self.nodes:
            if name in (n.name, n.host):
                return n
        raise KeyError(name)


def make_layout(name: str, nodes: int, network: str = "routed") -> Layout:
    """The layout of cluster ``name`` with ``nodes`` nodes; ClusterPreflightError on bad input."""
    check_name(name)
    if not 1 <= nodes <= MAX_NODES:
        raise ClusterPreflightError(f"--nodes {nodes} is out of range; expected 1..{MAX_NODES}")
    if network not in NETWORKS:
        raise ClusterPreflightError(f"--network {network!r} is unknown; expected one of {', '.join(NETWORKS)}")
    tok = token(name)
    out = []
    for i in range(1, nodes + 1):
        host = host_of(i)
        ns = naming.host_ns(tok, host)
        out.append(NodeLayout(
            index=i, name=node_name(i), host=host, ns=ns,
            address=str(naming.host_address(NODE_LINK, i)),
            dir=DATA_ROOT / name / "nodes" / host,
            run_dir=RUN_ROOT / name / "nodes" / host,
            cgroup=f"/{ns}",
        ))
    return Layout(name=name, nodes=tuple(out), network=network)


def node_link(layout: Layout, direction: Direction, engine: str = "auto", mtu: int = 1500) -> Link:
    """The node network: one link among the control plane and every node, impaired by ``direction``.

    The same impairments in both directions (for a shared segment: every host's traffic
    into the segment, and again from the segment to every host).
    """
    return Link(index=NODE_LINK, hosts=tuple(layout.hosts()), mtu=mtu, engine=engine, forward=direction,
                reverse=direction)


def node_run(layout: Layout, link: Link, seed: int = 1) -> Run:
    """The ``runspec.Run`` whose topology is the node network (a run in name only: it has no workload to run)."""
    rid = f"cluster-{layout.name}"
    hosts = layout.hosts()
    return Run(scenario=rid, sweep_id=rid, run_id=rid, index=0, params={}, seed=seed, repeat=0,
               hosts=tuple(Host(h) for h in hosts), links=(link,),
               workload=Workload(pattern="stream", protocol="tcp", sender=hosts[0], receivers=(hosts[1],),
                                 payload_bytes=64))


def pod_cidr_routes(layout: Layout, pod_cidrs: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """Namespace -> [(pod CIDR, via address)]: every other node's pods, in every node and the control plane."""
    out: dict[str, list[tuple[str, str]]] = {layout.cp_ns: []}
    for n in layout.nodes:
        out[n.ns] = []
    for owner in layout.nodes:
        cidr = pod_cidrs.get(owner.name)
        if not cidr:
            continue
        for ns in out:
            if ns != owner.ns:
                out[ns].append((cidr, owner.address))
    return out
