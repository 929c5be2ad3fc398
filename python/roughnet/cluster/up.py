"""`roughnet cluster up`: preflight, then build a local cluster step by step until every node is Ready.

Owns the order of things: preflight (root, name, binaries, packages, images, the node link's
engine; nothing is created before it passes), the ledger, the node network (a
``topo.Topology`` of the control-plane and node hosts on one link, impaired by the link
engines), directories, PKI and config files, the control plane in its namespace, each
node's mount namespace, containerd, images, kubelet and kube-proxy, the pod network
(static routes, or flanneld), the wait for Ready, the state file and the ledger's
handover. Any failure (or Ctrl-C) tears down what was made, from the ledger
(``down.teardown``), and raises.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import units
from ..runspec import Direction, Link
from ..topo import Topology
from ..topo.build import ROLE_A, ROLE_B, ROLE_MEMBER
from ..topo.ledger import DEFAULT_LEDGER_DIR, owner_alive, read_ledger
from . import configs, down, pki, procs
from .layout import (CHARON, CLUSTER_CIDR, FLANNEL_BACKENDS, KUBE_VERSION, NODE_LINK, SERVICE_CIDR, Layout, make_layout,
                     node_link, node_run)
from .ledger import KIND_CGROUP, KIND_DIR, KIND_EMPTYDIR, KIND_SYSCTL, ClusterLedger, ledger_path
from .state import RUN_ROOT, ClusterError, ClusterPreflightError, ClusterState, NodeState, save, state_path

log = logging.getLogger(__name__)

KUBE_BIN_DIR = Path(os.environ.get("ROUGHNET_KUBE_BIN", f"/var/cache/roughnet/kubernetes/{KUBE_VERSION}/bin"))
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl")
#: Debian packages' programs a cluster needs, and the package that has each.
HOST_TOOLS = {"containerd": "containerd", "containerd-shim-runc-v2": "containerd", "ctr": "containerd",
              "runc": "runc", "etcd": "etcd-server", "iptables": "iptables", "conntrack": "conntrack",
              "nsenter": "util-linux", "unshare": "util-linux", "openssl": "openssl", "ip": "iproute2"}
APISERVER_TIMEOUT_S = 120.0
CONTAINERD_TIMEOUT_S = 60.0
IMPORT_TIMEOUT_S = 600.0
REGISTER_TIMEOUT_S = 180.0
READY_TIMEOUT_S = 240.0

Progress = Callable[[str], None]


@dataclass
class UpOptions:
    name: str = "local"
    nodes: int = 2
    network: str = "routed"
    rate: str | None = None  # --node-link, e.g. "100 Mbit/s"; None: not limited
    delay: str | None = None  # --node-delay, e.g. "1 ms" (the wire engine: a relay process)
    loss: str | None = None  # --node-loss, e.g. "1%"


@dataclass
class Prepared:
    """What preflight found: everything ``up`` needs, nothing created yet."""

    opts: UpOptions
    layout: Layout
    link: Link
    engine: str
    bin_dir: Path
    flanneld: Path | None
    images: list[tuple[str, Path]]  # (reference, archive)
    link_info: dict[str, Any] = field(default_factory=dict)


# ---- preflight ---------------------------------------------------------------------------------


def _direction(opts: UpOptions) -> tuple[Direction, dict[str, Any]]:
    info: dict[str, Any] = {"rate_bps": None, "delay_ns": 0, "loss": 0.0}
    try:
        if opts.rate and opts.rate.strip().lower() not in ("none", "unlimited"):
            info["rate_bps"] = units.parse_rate_bps(opts.rate)
        if opts.delay:
            info["delay_ns"] = units.parse_duration_ns(opts.delay)
        if opts.loss:
            info["loss"] = units.parse_fraction(opts.loss)
    except ValueError as e:
        raise ClusterPreflightError(f"node link: {e}") from e
    parts = []
    if info["rate_bps"]:
        parts.append(units.format_rate_bps(info["rate_bps"]))
    if info["delay_ns"]:
        parts.append(f"delay {units.format_duration_ns(info['delay_ns'])}")
    if info["loss"]:
        parts.append(f"loss {info['loss'] * 100:g}%")
    info["text"] = ", ".join(parts) or "not impaired"
    return Direction(rate_bps=info["rate_bps"], delay_ns=info["delay_ns"], loss=info["loss"]), info


def network_daemon(network: str) -> str | None:
    """The binary (built by `make cluster`, best effort) that runs ``network``'s pod routes, if any."""
    return "flanneld" if network in FLANNEL_BACKENDS else "kube-router" if network == "kube-router" else None


def network_tools_missing(network: str) -> list[str]:
    """The host programs ``network`` needs beyond every cluster's (missing_host_tools) that are not installed."""
    out = []
    if FLANNEL_BACKENDS.get(network) == "ipsec" and not os.access(CHARON, os.X_OK):
        out.append(f"{CHARON} (Debian package strongswan-charon: flanneld's ipsec backend runs it)")
    if network == "kube-router" and shutil.which("ipset", path=configs.DAEMON_PATH) is None:
        out.append("ipset (Debian package ipset: kube-router needs it)")
    return out


def missing_binaries(bin_dir: Path = KUBE_BIN_DIR, daemon: str | None = None) -> list[str]:
    names = list(KUBE_BINARIES) + ([daemon] if daemon else [])
    return [str(bin_dir / b) for b in names if not os.access(bin_dir / b, os.X_OK)]


def missing_host_tools() -> list[str]:
    out = [f"{t} (Debian package {pkg})" for t, pkg in HOST_TOOLS.items() if shutil.which(t, path=configs.DAEMON_PATH)
           is None]
    out += [f"{configs.CNI_BIN_DIR / p} (Debian package containernetworking-plugins)" for p in configs.CNI_PLUGINS
            if not (configs.CNI_BIN_DIR / p).is_file()]
    return out


#: An ESP state with flannel's cipher (AES-GCM, 128-bit key + 4-byte salt, 128-bit ICV), in a network namespace of
#: its own that ends with the command: nothing is left anywhere.
ESP_PROBE = ["unshare", "--net", "--", "ip", "xfrm", "state", "add", "src", "192.0.2.1", "dst", "192.0.2.2", "proto",
             "esp", "spi", "0x100", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", "0x" + "ab" * 20, "128"]


def kernel_esp_refusal() -> str | None:
    """None if this kernel can hold the ESP states flannel's ipsec backend asks for, else the kernel's words."""
    import subprocess

    res = subprocess.run(ESP_PROBE, capture_output=True, text=True, timeout=10, check=False)
    return None if res.returncode == 0 else (res.stderr or res.stdout).strip() or f"exit {res.returncode}"


def network_refusals() -> dict[str, str | None]:
    """Each ``--network``: None if this machine has what it needs (its daemon, tools and kernel), else why not,
    in the words `cluster up` would refuse it with (for ``roughnet doctor``)."""
    from .layout import NETWORKS

    out: dict[str, str | None] = {}
    for net in NETWORKS:
        daemon = network_daemon(net)
        if daemon and not os.access(KUBE_BIN_DIR / daemon, os.X_OK):
            out[net] = f"{daemon} not built (`make cluster` builds it, best effort)"
        elif tools := network_tools_missing(net):
            out[net] = "missing " + ", ".join(tools)
        elif FLANNEL_BACKENDS.get(net) == "ipsec" and os.geteuid() != 0:
            out[net] = "the kernel's ESP not checked (needs root)"
        elif FLANNEL_BACKENDS.get(net) == "ipsec" and (refused := kernel_esp_refusal()):
            out[net] = f"the kernel has no ESP with AES-GCM ({refused})"
        else:
            out[net] = None
    return out


def image_archives() -> tuple[list[tuple[str, Path]], list[str]]:
    """(reference, archive) of the pause and roughnet images, and the archives that are missing."""
    from ..kube.image import image_archive, image_ref

    found, missing = [], []
    for name in ("pause", "roughnet"):
        ref, path = image_ref(name), image_archive(name)
        (found if path.is_file() else missing).append((ref, path))
    return found, [f"{p} (image {r})" for r, p in missing]


def prepare(opts: UpOptions) -> Prepared:
    """Check everything `cluster up` needs; ClusterPreflightError (exit 2) naming what is missing. Creates nothing."""
    if os.geteuid() != 0:
        raise ClusterPreflightError("roughnet cluster up needs root (it creates network namespaces, cgroups and "
                                    "mounts); run it as root")
    layout = make_layout(opts.name, opts.nodes, opts.network)
    direction, info = _direction(opts)
    daemon = network_daemon(opts.network)
    missing = missing_binaries(KUBE_BIN_DIR, daemon)
    if missing:
        hint = ("run `make cluster` (scripts/build-kubernetes.sh builds Kubernetes and, when it can, flanneld and "
                "kube-router)")
        if daemon and missing == [str(KUBE_BIN_DIR / daemon)]:
            log = {"flanneld": "flannel-build.log"}.get(daemon, f"{daemon}-build.log")
            hint = (f"{daemon} was not built (scripts/build-kubernetes.sh tries it best effort: see its output and "
                    f"{KUBE_BIN_DIR.parent.parent / log}, or use --network routed)")
        raise ClusterPreflightError(f"missing Kubernetes binaries: {', '.join(missing)}; {hint}")
    tools = missing_host_tools() + network_tools_missing(opts.network)
    if tools:
        raise ClusterPreflightError(f"missing programs: {', '.join(tools)}; run `make cluster` "
                                    f"(scripts/install-cluster-deps.sh installs them)")
    if FLANNEL_BACKENDS.get(opts.network) == "ipsec":
        refused = kernel_esp_refusal()
        if refused:
            raise ClusterPreflightError(
                f"--network flannel-ipsec needs the kernel's IPsec ESP with AES-GCM (flannel proposes "
                f"aes128gcm16; CONFIG_INET_ESP, CONFIG_CRYPTO_GCM): this kernel refused an ESP state in a scratch "
                f"network namespace ({refused}); use a kernel with them, or another --network")
    images, missing_images = image_archives()
    if missing_images:
        raise ClusterPreflightError(f"missing image archives: {', '.join(missing_images)}; run `make cluster` "
                                    f"(`roughnet image build` writes them)")
    if state_path(opts.name).exists():
        raise ClusterPreflightError(f"cluster {opts.name!r} is already up ({state_path(opts.name)}); "
                                    f"`roughnet cluster down --name {opts.name}` first, or pick another --name")
    lp = ledger_path(opts.name)
    if lp.exists() and owner_alive(read_ledger(lp)):
        raise ClusterPreflightError(f"cluster {opts.name!r} is being brought up or down, or is up without its "
                                    f"state file (ledger {lp} is alive); `roughnet cluster down --name {opts.name}`")
    for ns in layout.namespaces():
        if Path("/run/netns", ns).exists() and not lp.exists():
            raise ClusterPreflightError(f"namespace {ns} exists but no ledger records it; expected it absent "
                                        f"(remove it, or run `roughnet clean --dry-run` to see whose it is)")
    link = node_link(layout, direction)
    engine = _choose_engine(link)
    flanneld = KUBE_BIN_DIR / "flanneld" if daemon == "flanneld" else None
    return Prepared(opts, layout, link, engine, KUBE_BIN_DIR, flanneld, images, info | {"engine": engine})


def _choose_engine(link: Link) -> str:
    if not link.needs():
        return "kernel"  # nothing to apply: no probe needed
    from .. import links
    from ..errors import PreflightError

    try:
        return links.choose_engine(link, links.probe_capabilities())
    except PreflightError as e:
        raise ClusterPreflightError(f"node link: {e}") from e


# ---- bring up ------------------------------------------------------------------------------------


class _Up:
    def __init__(self, prep: Prepared, progress: Progress, ledger_dir: Path):
        self.prep = prep
        self.layout = prep.layout
        self.progress = progress
        self.ledger_dir = ledger_dir
        self.ledger: ClusterLedger | None = None
        self.pki: pki.ClusterPki | None = None
        self.holders: dict[str, int] = {}
        self.pod_cidrs: dict[str, str] = {}
        self.t0 = time.monotonic()
        self.created_at = time.time()
        self.topology: Topology | None = None

    # -- helpers

    def say(self, msg: str) -> None:
        log.info("cluster %s: %s", self.layout.name, msg)
        self.progress(f"[{time.monotonic() - self.t0:5.1f} s] {msg}")

    def kubectl(self, args: list[str], timeout: float = 30, check: bool = True):
        argv = ["ip", "netns", "exec", self.layout.cp_ns, str(self.prep.bin_dir / "kubectl"), "--kubeconfig",
                str(self.layout.admin_kubeconfig), "--request-timeout", "20s", *args]
        return procs.run(argv, f"kubectl {' '.join(args)}", timeout=timeout, check=check)

    def dead(self) -> str | None:
        assert self.ledger is not None
        return procs.describe_dead(self.ledger.entries())

    def spawn(self, argv: list[str], role: str, node: str | None = None, ns: str | None = None,
              env: dict[str, str] | None = None):
        assert self.ledger is not None
        logname = f"{role}{'-' + node if node else ''}.log"
        return procs.spawn(self.ledger, argv, self.layout.log_dir / logname, role=role, node=node, ns=ns,
                           env=env or procs.daemon_env(bin_dir=self.prep.bin_dir))

    def mkdir_recorded(self, path: Path, kind: str = KIND_DIR) -> None:
        assert self.ledger is not None
        self.ledger.add(kind, path=str(path))
        if kind == KIND_DIR and path.exists():
            shutil.rmtree(path)  # a stale tree of this cluster's name (no live ledger owns it: preflight said so)
        path.mkdir(mode=0o755)

    def ensure_empty_dir(self, path: Path, others: list[list[dict[str, Any]]]) -> None:
        """A host directory we need to exist (a mount point, a parent): made and recorded if missing; recorded too
        when another live cluster made it (the last cluster down removes it)."""
        assert self.ledger is not None
        theirs = any(e.get("kind") == KIND_EMPTYDIR and e.get("path") == str(path) for o in others for e in o)
        if path.exists():
            if theirs:
                self.ledger.add(KIND_EMPTYDIR, path=str(path), shared=True)
            return
        self.ledger.add(KIND_EMPTYDIR, path=str(path))
        path.mkdir(mode=0o755)

    # -- steps

    def run(self) -> ClusterState:
        L = self.layout
        self.ledger = ClusterLedger.create(L.name, self.ledger_dir, version=KUBE_VERSION, network=L.network,
                                           run_dir=str(L.run_dir), data_dir=str(L.data_dir))
        self.say(f"ledger {self.ledger.path}")
        self.node_network()
        self.files()
        self.control_plane()
        self.nodes()
        self.wait_apiserver()
        self.controllers()
        self.kubelets()
        self.pod_network()
        self.wait_ready()
        return self.finish()

    def node_network(self) -> None:
        L, prep = self.layout, self.prep
        run = node_run(L, prep.link)
        engines = {NODE_LINK: prep.engine}
        assert self.ledger is not None
        self.topology = Topology(run, self.ledger, engines=engines)
        self.topology.build()
        if prep.engine == "wire":
            self.start_wire()
        else:
            from ..links import engine_for

            engine_for(prep.engine).apply(self.topology, prep.link)
        self.say(f"node network: {', '.join(L.namespaces())} on {prep.link_info['text']} ({prep.engine} engine)")

    def start_wire(self) -> None:
        """The wire engine as a daemon (it must outlive `cluster up`): config from a file, output to a log."""
        from ..links import wire

        assert self.topology is not None
        topo, link = self.topology, self.prep.link
        L = self.layout
        binary = wire.wire_binary()
        config = wire.link_config(link, None)
        wire.WireEngine(binary)._checksums_in_software(topo, link)
        ns = topo.link_ns(NODE_LINK)
        if link.shared:
            where = [a for ifname, mac in topo.relay_ports(NODE_LINK) for a in ("--port", f"{ifname}={mac}")]
        else:
            a, b = topo.relay_ifaces(NODE_LINK)
            where = ["--if-a", a, "--if-b", b]
        self.ensure_trees()
        cfg = L.data_dir / "node-link.json"
        cfg.write_text(json.dumps(config))
        argv = ["ip", "netns", "exec", ns, str(binary), *where, "--config", str(cfg), "--seed", "1",
                "--control", str(L.run_dir / "wire.sock"), "--realtime", "0", "--spin-us", "0"]
        self.spawn(argv, "roughnet-wire", ns=ns)
        log_path = L.log_dir / "roughnet-wire.log"

        def ready():
            for line in log_path.read_text(errors="replace").splitlines():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if obj.get("type") == "error":
                    raise ClusterError(f"roughnet-wire refused the node link: {obj.get('message')}")
                if obj.get("type") == "ready":
                    return True
            return None

        procs.wait_for(ready, wire.READY_TIMEOUT_S, "roughnet-wire on the node link", alive=self.dead)

    _trees_made = False

    def ensure_trees(self) -> None:
        if self._trees_made:
            return
        self._trees_made = True
        L = self.layout
        others = down.other_live_clusters(self.ledger_dir, self.ledger.path if self.ledger else None)
        for root in (RUN_ROOT, L.data_dir.parent):
            chain = []
            p = Path(root)
            while not p.exists():
                chain.append(p)
                p = p.parent
            for d in reversed(chain):
                self.ensure_empty_dir(d, others)
        self.mkdir_recorded(L.run_dir)
        self.mkdir_recorded(L.data_dir)
        for host, _ in configs.PRIVATE_MOUNTS:
            self.ensure_empty_dir(Path(host), others)

    def files(self) -> None:
        L = self.layout
        self.ensure_trees()
        for d in (L.log_dir, L.cp_dir, L.run_dir / "nodes", L.data_dir / "nodes"):
            d.mkdir(parents=True, exist_ok=True)
        self.pki = pki.make_cluster_pki(L)
        L.audit_policy.write_text(json.dumps(configs.AUDIT_POLICY, indent=1))
        psk = secrets.token_hex(48) if FLANNEL_BACKENDS.get(L.network) == "ipsec" else None  # one per cluster
        for n in L.nodes:
            p = configs.node_paths(n)
            for key in ("containerd_root", "containerd_state", "containerd_opt", "runc_root", "cni_conf_dir",
                        "cni_ipam_dir", "kubelet_root", "pod_logs", "volume_plugins", "logs"):
                p[key].mkdir(parents=True, exist_ok=True)
            for _, key in configs.PRIVATE_MOUNTS:
                p[key].mkdir(parents=True, exist_ok=True)
            p["containerd_config"].write_text(configs.containerd_config(n))
            p["kubelet_config"].write_text(json.dumps(configs.kubelet_config(L, n, self.pki), indent=1))
            p["kube_proxy_config"].write_text(
                json.dumps(configs.kube_proxy_config(n, self.pki.kubeconfigs["kube-proxy"]), indent=1))
            p["resolv_conf"].write_text(configs.resolv_conf())
            if L.network in FLANNEL_BACKENDS:
                conf = configs.flannel_net_conf(FLANNEL_BACKENDS[L.network], psk)
                fd = os.open(p["flannel_net_conf"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the PSK
                with os.fdopen(fd, "w") as f:
                    json.dump(conf, f)
        self.say(f"certificates and configuration in {L.data_dir}")

    def control_plane(self) -> None:
        L, b = self.layout, self.prep.bin_dir
        assert self.pki is not None
        cp = ["ip", "netns", "exec", L.cp_ns]
        self.spawn(cp + configs.etcd_argv(L), "etcd", ns=L.cp_ns)
        self.spawn(cp + configs.apiserver_argv(b, L, self.pki), "kube-apiserver", ns=L.cp_ns)
        self.say(f"control plane starting in {L.cp_ns} (etcd, kube-apiserver)")

    def controllers(self) -> None:
        """controller-manager and scheduler: after the API server is ready (they exit when its RBAC is not there yet)."""
        L, b = self.layout, self.prep.bin_dir
        assert self.pki is not None
        cp = ["ip", "netns", "exec", L.cp_ns]
        self.spawn(cp + configs.controller_manager_argv(b, L, self.pki), "kube-controller-manager", ns=L.cp_ns)
        self.spawn(cp + configs.scheduler_argv(b, self.pki), "kube-scheduler", ns=L.cp_ns)

    def nodes(self) -> None:
        """Per node: the mount-namespace holder, its bind mounts, containerd."""
        L = self.layout
        for n in L.nodes:
            proc = self.spawn(procs.holder_argv(n.ns), "holder", node=n.name, ns=n.ns)
            self.holders[n.name] = proc.pid
        for n in L.nodes:
            pid = self.holders[n.name]
            mine = os.readlink("/proc/self/ns/mnt")

            def entered(pid=pid):
                try:
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    return comm == "sleep" and os.readlink(f"/proc/{pid}/ns/mnt") != mine
                except OSError:
                    return None
            procs.wait_for(entered, 15, f"the mount namespace of {n.name}", interval_s=0.05, alive=self.dead)
            p = configs.node_paths(n)
            for host, key in configs.PRIVATE_MOUNTS:
                procs.bind_mount(pid, p[key], host)
            self.spawn(procs.in_holder(pid, configs.containerd_argv(n)), "containerd", node=n.name, ns=n.ns)
        self.say(f"nodes: {len(L.nodes)} mount namespaces, containerd starting")

    def wait_apiserver(self) -> None:
        def ready():
            res = self.kubectl(["get", "--raw", "/readyz"], check=False)
            return res.returncode == 0 and res.stdout.strip() == "ok"
        procs.wait_for(ready, APISERVER_TIMEOUT_S, "kube-apiserver /readyz", alive=self.dead)
        self.say("kube-apiserver ready; controller-manager and scheduler starting")

    def _ctr(self, node, args: list[str]) -> list[str]:
        return procs.in_holder(self.holders[node.name], ["ctr", "-a", str(node.containerd_socket), "-n", "k8s.io",
                                                        *args])

    def import_images(self, node) -> None:
        def up():
            return procs.run(self._ctr(node, ["version"]), "ctr version", timeout=10, check=False).returncode == 0
        procs.wait_for(up, CONTAINERD_TIMEOUT_S, f"containerd on {node.name}", alive=self.dead)
        for ref, archive in self.prep.images:
            procs.run(self._ctr(node, ["images", "import", str(archive)]),
                      f"importing {ref} into {node.name}", timeout=IMPORT_TIMEOUT_S)
        listed = procs.run(self._ctr(node, ["images", "ls", "-q"]), f"listing images on {node.name}").stdout.split()
        lacking = [ref for ref, _ in self.prep.images if not any(x == ref or x.endswith("/" + ref) for x in listed)]
        if lacking:
            raise ClusterError(f"images {lacking} are not in containerd on {node.name} after the import "
                               f"(it lists {listed})")

    def kubelets(self) -> None:
        L, b = self.layout, self.prep.bin_dir
        assert self.ledger is not None and self.pki is not None
        others = down.other_live_clusters(self.ledger_dir, self.ledger.path)
        for key in procs.KUBELET_SYSCTLS:
            old = next((e["old"] for o in others for e in o if e.get("kind") == KIND_SYSCTL and e.get("key") == key),
                       None)
            self.ledger.add(KIND_SYSCTL, key=key, old=old if old is not None else procs.read_sysctl(key))
        for n in L.nodes:
            self.ledger.add(KIND_CGROUP, path=n.cgroup)
            procs.make_cgroup(n.cgroup)
        with ThreadPoolExecutor(max_workers=len(L.nodes)) as pool:
            for fut in [pool.submit(self.import_images, n) for n in L.nodes]:
                fut.result()
        self.say(f"images imported into every node ({', '.join(r for r, _ in self.prep.images)})")
        for n in L.nodes:
            kubelet = configs.kubelet_argv(str(b / "kubelet"), n, self.pki.kubeconfigs[n.name])
            self.spawn(procs.in_holder(self.holders[n.name], kubelet), "kubelet", node=n.name, ns=n.ns)
            self.spawn(["ip", "netns", "exec", n.ns, *configs.kube_proxy_argv(str(b / "kube-proxy"), n)],
                       "kube-proxy", node=n.name, ns=n.ns)
        self.say("kubelets and kube-proxies starting")

    def node_objects(self) -> dict[str, dict[str, Any]]:
        res = self.kubectl(["get", "nodes", "-o", "json"], check=False)
        if res.returncode != 0:
            return {}
        try:
            return {item["metadata"]["name"]: item for item in json.loads(res.stdout).get("items", [])}
        except (ValueError, KeyError):
            return {}

    def pod_network(self) -> None:
        L = self.layout

        def registered():
            objs = self.node_objects()
            cidrs = {n.name: objs.get(n.name, {}).get("spec", {}).get("podCIDR") for n in L.nodes}
            return cidrs if all(cidrs.values()) else None
        self.pod_cidrs = procs.wait_for(registered, REGISTER_TIMEOUT_S, "every node registered with a pod CIDR",
                                        alive=self.dead)
        self.say("nodes registered: " + ", ".join(f"{k} {v}" for k, v in self.pod_cidrs.items()))
        mtu = self.prep.link.mtu
        if L.network in FLANNEL_BACKENDS:
            if FLANNEL_BACKENDS[L.network] == "vxlan":
                mtu -= 50  # the VXLAN header (outer IPv4 20, UDP 8, VXLAN 8, inner Ethernet 14)
            elif FLANNEL_BACKENDS[L.network] == "ipsec":
                mtu -= 77  # ESP in tunnel mode: flannel's own figure (ipsec_network.go, ipsecOverhead)
            self.start_flannel()
            if FLANNEL_BACKENDS[L.network] == "ipsec":
                # flannel's ipsec backend writes the ESP policies between pod subnets and no routes (a host's
                # default route finds them; these namespaces have none): the nodes get routed's routes, which
                # the policies then encrypt
                self.add_routes(nodes_only=True)
        elif L.network == "kube-router":
            self.start_kube_router()
        else:
            self.add_routes()
        for n in L.nodes:
            p = configs.node_paths(n)
            tmp = p["cni_conf"].with_suffix(".tmp")
            tmp.write_text(json.dumps(configs.cni_conflist(n, self.pod_cidrs[n.name], mtu), indent=1))
            os.replace(tmp, p["cni_conf"])
        self.say(f"pod network ({L.network}): CNI ptp + host-local, one /24 per node of {CLUSTER_CIDR}")

    def node_ifname(self, host: str) -> str:
        assert self.topology is not None
        for iface in self.topology.interfaces():
            if iface.host == host and iface.link == NODE_LINK and iface.role in (ROLE_MEMBER, ROLE_A, ROLE_B):
                return iface.ifname
        raise ClusterError(f"host {host} has no interface on the node network")

    def add_routes(self, nodes_only: bool = False) -> None:
        from .layout import pod_cidr_routes

        L = self.layout
        host_of_ns = {L.cp_ns: "cp", **{n.ns: n.host for n in L.nodes}}
        for ns, routes in pod_cidr_routes(L, self.pod_cidrs).items():
            if nodes_only and ns == L.cp_ns:
                continue
            dev = self.node_ifname(host_of_ns[ns])
            for cidr, via in routes:
                procs.run(["ip", "-n", ns, "route", "add", cidr, "via", via, "dev", dev],
                          f"adding a route to pods {cidr} in {ns}")

    def start_flannel(self) -> None:
        L = self.layout
        assert self.pki is not None and self.prep.flanneld is not None
        for n in L.nodes:
            argv = configs.flanneld_argv(str(self.prep.flanneld), n, self.pki.kubeconfigs["admin"],
                                         FLANNEL_BACKENDS[L.network])
            env = procs.daemon_env({"NODE_NAME": n.name}, self.prep.bin_dir)
            self.spawn(["ip", "netns", "exec", n.ns, *argv], "flanneld", node=n.name, ns=n.ns, env=env)
        for n in L.nodes:
            f = configs.node_paths(n)["flannel_subnet_env"]
            procs.wait_for(lambda f=f: f.is_file(), 60, f"flanneld on {n.name} (its subnet file)", alive=self.dead)
        # flannel installs the routes to the other nodes' pods in the nodes (vxlan: over flannel.1; host-gw: via
        # the node's address on the node link); the control plane namespace gets plain routes to reach pods too.
        dev = self.node_ifname("cp")
        for n in L.nodes:
            procs.run(["ip", "-n", L.cp_ns, "route", "add", self.pod_cidrs[n.name], "via", n.address, "dev", dev],
                      f"adding a route to pods of {n.name} in {L.cp_ns}")

    def start_kube_router(self) -> None:
        """kube-router per node; ready when every node has learnt over BGP a route to every other node's pods."""
        L = self.layout
        assert self.pki is not None
        for n in L.nodes:
            argv = configs.kube_router_argv(str(self.prep.bin_dir / "kube-router"), n, self.pki.kubeconfigs["admin"])
            self.spawn(["ip", "netns", "exec", n.ns, *argv], "kube-router", node=n.name, ns=n.ns,
                       env=procs.daemon_env({"NODE_NAME": n.name}, self.prep.bin_dir))

        def learnt(n):
            res = procs.run(["ip", "-n", n.ns, "-4", "route", "show"], f"reading the routes of {n.ns}")
            return all(f"{self.pod_cidrs[o.name]} via {o.address} " in res.stdout for o in L.nodes if o is not n)
        for n in L.nodes:
            procs.wait_for(lambda n=n: learnt(n), 90, f"kube-router on {n.name} (routes to the other nodes' pods "
                           "over BGP)", alive=self.dead)
        dev = self.node_ifname("cp")
        for n in L.nodes:  # the control plane is not a BGP peer: plain routes, as with flannel
            procs.run(["ip", "-n", L.cp_ns, "route", "add", self.pod_cidrs[n.name], "via", n.address, "dev", dev],
                      f"adding a route to pods of {n.name} in {L.cp_ns}")

    def wait_ready(self) -> None:
        L = self.layout

        def ready():
            objs = self.node_objects()
            ok = []
            for n in L.nodes:
                conds = objs.get(n.name, {}).get("status", {}).get("conditions", [])
                if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
                    ok.append(n.name)
            return len(ok) == len(L.nodes)
        procs.wait_for(ready, READY_TIMEOUT_S, "every node Ready", interval_s=1.0, alive=self.dead)
        self.say(f"all {len(L.nodes)} nodes Ready")

    def finish(self) -> ClusterState:
        L, prep = self.layout, self.prep
        assert self.ledger is not None
        entries = self.ledger.entries()
        nodes = [NodeState(name=n.name, host=n.host, ns=n.ns, address=n.address, pod_cidr=self.pod_cidrs[n.name],
                           containerd_socket=str(n.containerd_socket), holder_pid=self.holders.get(n.name))
                 for n in L.nodes]
        processes = [{"role": e.get("role"), "node": e.get("node"), "pid": e["pid"], "start_time": e.get("start_time"),
                      "log": e.get("log")} for e in entries if e.get("kind") == "process"]
        state = ClusterState(
            name=L.name, token=L.token, version=KUBE_VERSION, network=L.network, cp_ns=L.cp_ns,
            cp_address=L.cp_address, apiserver=L.apiserver_url, kubeconfig=str(L.admin_kubeconfig),
            kubectl=str(prep.bin_dir / "kubectl"), service_cidr=str(SERVICE_CIDR), cluster_cidr=str(CLUSTER_CIDR),
            node_link=dict(prep.link_info), nodes=nodes, created_at=self.created_at,
            up_seconds=round(time.monotonic() - self.t0, 1), ledger=str(self.ledger.path), run_dir=str(L.run_dir),
            data_dir=str(L.data_dir), processes=processes, images=[r for r, _ in prep.images])
        save(state)
        self.ledger.handover()
        return state


def up(opts: UpOptions, progress: Progress = lambda msg: None, ledger_dir: Path = DEFAULT_LEDGER_DIR,
       prepared: Prepared | None = None) -> ClusterState:
    """Bring cluster ``opts.name`` up; its state once every node is Ready.

    ClusterPreflightError (nothing created) or ClusterError (everything made was removed
    again, or the ledger names what could not be, for `roughnet clean`).
    """
    prep = prepared or prepare(opts)
    job = _Up(prep, progress, ledger_dir)
    try:
        return job.run()
    except BaseException as e:
        if job.ledger is None:
            raise
        try:
            progress(f"bringing cluster {opts.name} up failed ({type(e).__name__}: {e}); removing what was made")
        except Exception:  # noqa: BLE001 - the teardown matters more than the message
            pass
        keep = os.environ.get("ROUGHNET_CLUSTER_KEEP_LOGS")
        if keep:  # debugging a failed `cluster up`: its logs, copied before the teardown removes them
            shutil.copytree(prep.layout.log_dir, Path(keep) / f"{opts.name}-{int(time.time())}", dirs_exist_ok=True)
        try:
            down.teardown(job.ledger.entries(), job.ledger.path, ledger_dir)
        except ClusterError as te:
            log.error("%s", te)
            if isinstance(e, ClusterError):
                raise ClusterError(f"{e}; and then: {te}") from e
        raise
