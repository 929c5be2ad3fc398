"""The components' configuration files and command lines: pure functions, no I/O.

Owns what each process of a local cluster is told: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler (control-plane namespace); per node containerd
(its own root, state, socket, CRI settings), kubelet (KubeletConfiguration), kube-proxy
(KubeProxyConfiguration, iptables mode), the CNI network list (ptp + host-local with the
node's pod /24) and, for the ``flannel-*`` networks, flanneld. Files are JSON (what the
Kubernetes components read as YAML) or TOML (containerd).

Settings that keep the host untouched, and why:
- containerd: ``restrict_oom_score_adj`` (root here lacks CAP_SYS_RESOURCE: without it runc
  fails with "can't get final child's PID from pipe"), ``disable_apparmor`` (no profile
  loaded into the kernel), ``netns_mounts_under_state_dir`` (pod network namespaces pinned
  under the node's state dir, not /run/netns), runc's ``Root`` and the ``opt`` plugin's path
  in the node's own directories;
- kubelet: ``cgroupDriver: cgroupfs`` under a ``cgroupRoot`` of its own, ``podLogsDir`` and
  ``volumePluginDir`` in the node's directory, image garbage collection off (the images were
  imported and cannot be pulled again), ``oomScoreAdj: 0``;
- kube-proxy: every conntrack setting 0 (``nf_conntrack_max`` and the hash size are
  host-wide; 0 leaves them alone), ``oomScoreAdj: 0``, ``localhostNodePorts: false``.
The kubelet still writes six host-wide sysctls at start; ``procs.KUBELET_SYSCTLS`` lists
them and ``up`` records their values in the ledger first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .layout import (API_PORT, API_SERVICE_IP, CLUSTER_CIDR, CLUSTER_DOMAIN, FLANNEL_PORT, FLANNEL_VNI, MAX_PODS,
                     NODE_CIDR_MASK, SERVICE_CIDR, Layout, NodeLayout)
from .pki import ClusterPki

CNI_BIN_DIR = Path("/usr/lib/cni")
#: The CNI plugins a node's network needs (Debian's containernetworking-plugins).
CNI_PLUGINS = ("ptp", "host-local", "loopback")
PAUSE_IMAGE = "roughnet.local/pause:3.10"
DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Ports inside the control-plane namespace (its own loopback: unreachable from elsewhere).
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380


def _toml_str(value: str) -> str:
    return json.dumps(str(value))  # a TOML basic string is a JSON string for these (ASCII paths)


# ---- per-node paths ----------------------------------------------------------------------------


def node_paths(node: NodeLayout) -> dict[str, Path]:
    """Every file and directory of one node (data on disk, runtime files under /run)."""
    d, r = node.dir, node.run_dir
    return {
        "containerd_config": d / "containerd.toml",
        "containerd_root": d / "containerd",
        "containerd_state": r / "containerd",
        "containerd_opt": d / "containerd-opt",
        "runc_root": r / "runc",
        "cni_conf_dir": d / "cni" / "net.d",
        "cni_conf": d / "cni" / "net.d" / "10-roughnet.conflist",
        "cni_ipam_dir": d / "cni" / "ipam",
        "kubelet_root": d / "kubelet",
        "kubelet_config": d / "kubelet.json",
        "pod_logs": d / "pod-logs",
        "volume_plugins": d / "volume-plugins",
        "resolv_conf": d / "resolv.conf",
        "kube_proxy_config": d / "kube-proxy.json",
        # Bind-mounted, in the node's own mount namespace, over host paths the components
        # hard-code (so nothing lands in the host's):
        "mnt_var_lib_cni": d / "mnt" / "var-lib-cni",  # libcni's cache (containerd's CRI)
        "mnt_run_containerd": r / "mnt-run-containerd",  # shim sockets (/run/containerd/s)
        "mnt_var_log_containers": d / "mnt" / "var-log-containers",  # the kubelet's log symlinks
        "mnt_run_mount": r / "mnt-run-mount",
        "flannel_net_conf": d / "flannel-net-conf.json",
        # not under the run dir: flanneld with the ipsec backend sees a /run of its own (charon's socket)
        "flannel_subnet_env": d / "flannel-subnet.env",
        "logs": d / "logs",
    }


#: Host paths that are private per node: (host path, key of node_paths bind-mounted over it).
PRIVATE_MOUNTS = (
    ("/run/mount", "mnt_run_mount"),  # libmount's utab and its locks (the kubelet mounts volumes)
    # The kubelet's root (--root-dir) again at the path its device-plugin socket hard-codes
    # (/var/lib/kubelet/device-plugins/kubelet.sock): two kubelets would share one otherwise.
    ("/var/lib/kubelet", "kubelet_root"),
    ("/var/lib/cni", "mnt_var_lib_cni"),
    ("/run/containerd", "mnt_run_containerd"),
    ("/var/log/containers", "mnt_var_log_containers"),
)


# ---- containerd ---------------------------------------------------------------------------------


def containerd_config(node: NodeLayout) -> str:
    """containerd's config.toml (version 2, containerd 1.6) for one node."""
    p = node_paths(node)
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    lines = [
        "version = 2",
        f"root = {_toml_str(p['containerd_root'])}",
        f"state = {_toml_str(p['containerd_state'])}",
        "oom_score = 0",
        'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", '
        '"io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", '
        '"io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
        "[grpc]",
        f"  address = {_toml_str(node.containerd_socket)}",
        "[ttrpc]",
        f"  address = {_toml_str(str(node.containerd_socket) + '.ttrpc')}",
        "[debug]",
        '  address = ""',
        "[metrics]",
        '  address = ""',
        '[plugins."io.containerd.internal.v1.opt"]',
        f"  path = {_toml_str(p['containerd_opt'])}",
        f"[{cri}]",
        f"  sandbox_image = {_toml_str(PAUSE_IMAGE)}",
        "  restrict_oom_score_adj = true",
        "  disable_apparmor = true",
        "  enable_selinux = false",
        "  systemd_cgroup = false",
        "  netns_mounts_under_state_dir = true",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "  max_container_log_line_size = 16384",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        "  discard_unpacked_layers = false",
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        "  SystemdCgroup = false",
        f"  Root = {_toml_str(p['runc_root'])}",
        f"[{cri}.cni]",
        f"  bin_dir = {_toml_str(CNI_BIN_DIR)}",
        f"  conf_dir = {_toml_str(p['cni_conf_dir'])}",
        "  max_conf_num = 1",
    ]
    return "\n".join(lines) + "\n"


def containerd_argv(node: NodeLayout) -> list[str]:
    return ["containerd", "--config", str(node_paths(node)["containerd_config"])]


# ---- CNI ----------------------------------------------------------------------------------------


def cni_conflist(node: NodeLayout, pod_cidr: str, mtu: int = 1500) -> dict[str, Any]:
    """ptp + host-local: each pod a veth to the node namespace, routed there (no bridge).

    With ptp every pod's traffic passes the node namespace's routing and iptables, so a
    Service works between two pods of one node without br_netfilter (a bridge would switch
    their replies past kube-proxy's DNAT).
    """
    p = node_paths(node)
    return {
        "cniVersion": "0.4.0",
        "name": "roughnet",
        "plugins": [{
            "type": "ptp",
            "ipMasq": False,
            "mtu": mtu,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": pod_cidr}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": str(p["cni_ipam_dir"]),
            },
        }],
    }


# ---- kubelet ------------------------------------------------------------------------------------


def resolv_conf() -> str:
    # No cluster DNS (no CoreDNS image here): pods get a resolver that answers nothing.
    return "# roughnet local cluster: no DNS server\nnameserver 127.0.0.1\noptions ndots:1\n"


def kubelet_config(layout: Layout, node: NodeLayout, pki: ClusterPki) -> dict[str, Any]:
    p = node_paths(node)
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.address,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki.ca)}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki.crt(f"kubelet-{node.name}-serving")),
        "tlsPrivateKeyFile": str(pki.key(f"kubelet-{node.name}-serving")),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": False,
        "resolvConf": str(p["resolv_conf"]),
        "maxPods": MAX_PODS,
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [],
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "podLogsDir": str(p["pod_logs"]),
        "volumePluginDir": str(p["volume_plugins"]),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
                         "imagefs.available": "1%"},
        "oomScoreAdj": 0,
        "protectKernelDefaults": False,
        "serializeImagePulls": False,
        "runtimeRequestTimeout": "2m",
        "nodeStatusUpdateFrequency": "5s",
        "nodeStatusReportFrequency": "1m",
        "syncFrequency": "30s",
        "fileCheckFrequency": "20s",
        "localStorageCapacityIsolation": True,
        "containerLogMaxSize": "10Mi",
        "containerLogMaxFiles": 2,
        "shutdownGracePeriod": "0s",
    }


def kubelet_argv(kubelet: str, node: NodeLayout, kubeconfig: Path) -> list[str]:
    p = node_paths(node)
    return [kubelet, "--config", str(p["kubelet_config"]), "--kubeconfig", str(kubeconfig),
            "--hostname-override", node.name, "--node-ip", node.address, "--root-dir", str(p["kubelet_root"]),
            "--cert-dir", str(p["kubelet_root"] / "pki"), "--v", "1"]


# ---- kube-proxy ---------------------------------------------------------------------------------


def kube_proxy_config(node: NodeLayout, kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name,
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "mode": "iptables",
        "clusterCIDR": str(CLUSTER_CIDR),
        "oomScoreAdj": 0,
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"masqueradeAll": False, "localhostNodePorts": False, "syncPeriod": "30s",
                     "minSyncPeriod": "1s"},
    }


def kube_proxy_argv(kube_proxy: str, node: NodeLayout) -> list[str]:
    return [kube_proxy, "--config", str(node_paths(node)["kube_proxy_config"]), "--v", "1"]


# ---- control plane ------------------------------------------------------------------------------


def etcd_argv(layout: Layout) -> list[str]:
    # Loopback of the control-plane namespace only: nothing else can reach it, so no TLS.
    client = f"http://127.0.0.1:{ETCD_CLIENT_PORT}"
    peer = f"http://127.0.0.1:{ETCD_PEER_PORT}"
    return ["etcd", "--name", f"roughnet-{layout.name}", "--data-dir", str(layout.cp_dir / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"roughnet-{layout.name}={peer}", "--initial-cluster-state", "new",
            "--snapshot-count", "10000", "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn"]


#: The API server's audit policy: every request of a service account of namespace "roughnet" (the kind of
#: subject manifests/kubernetes/role.yaml is bound to), at Metadata level (verb, resource, answer; no bodies);
#: nothing of anyone else. tests/integration/test_kubernetes_role.py reads it to check the Role is exact.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": ["system:serviceaccounts:roughnet"]},
        {"level": "None"},
    ],
}


def apiserver_argv(bin_dir: Path, layout: Layout, pki: ClusterPki) -> list[str]:
    return [
        str(bin_dir / "kube-apiserver"),
        "--etcd-servers", f"http://127.0.0.1:{ETCD_CLIENT_PORT}",
        "--bind-address", "0.0.0.0",
        "--advertise-address", layout.cp_address,
        "--secure-port", str(API_PORT),
        "--service-cluster-ip-range", str(SERVICE_CIDR),
        "--client-ca-file", str(pki.ca),
        "--tls-cert-file", str(pki.crt("apiserver")),
        "--tls-private-key-file", str(pki.key("apiserver")),
        "--kubelet-client-certificate", str(pki.crt("apiserver-kubelet-client")),
        "--kubelet-client-key", str(pki.key("apiserver-kubelet-client")),
        "--kubelet-certificate-authority", str(pki.ca),
        "--kubelet-preferred-address-types", "InternalIP",
        # No front proxy here; set anyway, else every component logs "missing content for CA bundle" forever.
        "--requestheader-client-ca-file", str(pki.ca),
        "--requestheader-allowed-names", "front-proxy-client",
        "--requestheader-username-headers", "X-Remote-User",
        "--requestheader-group-headers", "X-Remote-Group",
        "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
        "--service-account-key-file", str(pki.dir / "sa.pub"),
        "--service-account-signing-key-file", str(pki.dir / "sa.key"),
        "--service-account-issuer", f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
        "--api-audiences", f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
        "--authorization-mode", "Node,RBAC",
        "--enable-admission-plugins", "NodeRestriction",
        "--allow-privileged=true",
        "--profiling=false",
        "--endpoint-reconciler-type", "lease",
        "--event-ttl", "1h",
        "--audit-policy-file", str(layout.audit_policy),
        "--audit-log-path", str(layout.audit_log),
        "--audit-log-maxsize", "20",
        "--audit-log-maxbackup", "1",
        "--v", "1",
    ]


def controller_manager_argv(bin_dir: Path, layout: Layout, pki: ClusterPki) -> list[str]:
    kc = str(pki.kubeconfigs["controller-manager"])
    return [
        str(bin_dir / "kube-controller-manager"),
        "--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
        "--bind-address", "127.0.0.1",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        "--service-account-private-key-file", str(pki.dir / "sa.key"),
        "--root-ca-file", str(pki.ca),
        "--cluster-signing-cert-file", str(pki.ca),
        "--cluster-signing-key-file", str(pki.dir / "ca.key"),
        "--allocate-node-cidrs=true",
        "--cluster-cidr", str(CLUSTER_CIDR),
        "--node-cidr-mask-size", str(NODE_CIDR_MASK),
        "--service-cluster-ip-range", str(SERVICE_CIDR),
        "--controllers", "*,-cloud-node-lifecycle",
        # its default (/usr/libexec/kubernetes/kubelet-plugins/volume/exec) would be created on the host
        "--flex-volume-plugin-dir", str(layout.cp_dir / "volume-plugins"),
        "--profiling=false",
        "--v", "1",
    ]


def scheduler_argv(bin_dir: Path, pki: ClusterPki) -> list[str]:
    kc = str(pki.kubeconfigs["scheduler"])
    return [str(bin_dir / "kube-scheduler"), "--kubeconfig", kc, "--authentication-kubeconfig", kc,
            "--authorization-kubeconfig", kc, "--bind-address", "127.0.0.1", "--leader-elect=false",
            "--profiling=false", "--v", "1"]


# ---- flannel (--network flannel-vxlan | flannel-host-gw) ---------------------------------------------


def flannel_net_conf(backend: str = "vxlan", psk: str | None = None) -> dict[str, Any]:
    """flanneld's net-conf.json: the cluster's pod range, a /24 per node, and ``backend`` ("vxlan": an overlay
    device flannel.1; "host-gw": routes to each node's pods via that node's address, the nodes on one L2 link;
    "ipsec": ESP tunnels between the nodes keyed by IKEv2 (strongSwan's charon) with the pre-shared key ``psk``,
    at least 96 characters)."""
    if backend == "vxlan":
        spec: dict[str, Any] = {"Type": "vxlan", "VNI": FLANNEL_VNI, "Port": FLANNEL_PORT}
    elif backend == "host-gw":
        spec = {"Type": "host-gw"}
    elif backend == "ipsec":
        if psk is None or len(psk) < 96:
            raise ValueError("flannel's ipsec backend needs a pre-shared key of at least 96 characters")
        spec = {"Type": "ipsec", "PSK": psk, "UDPEncap": False}
    else:
        raise ValueError(f"flannel backend {backend!r}; expected vxlan, host-gw or ipsec")
    return {"Network": str(CLUSTER_CIDR), "SubnetLen": NODE_CIDR_MASK, "EnableIPv6": False, "Backend": spec}


def flanneld_argv(flanneld: str, node: NodeLayout, kubeconfig: Path, backend: str = "vxlan") -> list[str]:
    """flanneld for ``node``. With the ipsec backend in a mount namespace of its own whose /run is a tmpfs: flanneld
    starts charon, and both hard-code /run/charon.vici and charon's pid file, one per node (the namespace, and
    the tmpfs with it, end with flanneld; charon ends with it too, flanneld's parent-death signal)."""
    p = node_paths(node)
    private_run = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                   'mount -t tmpfs -o size=4m,mode=0755 roughnet-charon /run && exec "$@"', "flanneld"]
    return [*(private_run if backend == "ipsec" else []), flanneld, "--kube-subnet-mgr", "--kubeconfig-file",
            str(kubeconfig), "--iface", node.address, "--ip-masq=false",
            "--net-config-path", str(p["flannel_net_conf"]),
            "--subnet-file", str(p["flannel_subnet_env"]), "--v", "1"]


# ---- kube-router (--network kube-router) ----------------------------------------------------------------------


#: kube-router's BGP: one private AS for the whole cluster (iBGP full mesh between the nodes).
KUBE_ROUTER_ASN = 64512


def kube_router_argv(kube_router: str, node: NodeLayout, kubeconfig: Path) -> list[str]:
    """kube-router for ``node``, its router only: it advertises the node's pod /24 over iBGP to every other node
    and installs the routes it learns (the nodes share one subnet: direct routes, no tunnel). Its service proxy
    (IPVS) and network policy (ipset) stay off: kube-proxy serves Services as on the other networks."""
    return [kube_router, "--kubeconfig", str(kubeconfig), "--hostname-override", node.name,
            "--run-router=true", "--run-firewall=false", "--run-service-proxy=false", "--enable-cni=false",
            "--enable-ibgp=true", "--enable-overlay=false", "--enable-pod-egress=false",
            "--cluster-asn", str(KUBE_ROUTER_ASN), "--router-id", node.address,
            "--bgp-graceful-restart=false", "--metrics-port", "0", "--health-port", "0", "--v", "1"]


__all__ = ["API_SERVICE_IP", "CNI_PLUGINS", "PRIVATE_MOUNTS", "apiserver_argv", "cni_conflist", "containerd_config",
           "controller_manager_argv", "etcd_argv", "kube_proxy_config", "kubelet_config", "node_paths",
           "scheduler_argv"]
