"""The local cluster's names, addresses, state file and component configs (pure; no root, nothing created)."""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path

import pytest

from roughnet.cluster import configs, layout, state
from roughnet.cluster.layout import CLUSTER_CIDR, SERVICE_CIDR, make_layout, node_link, node_run, pod_cidr_routes
from roughnet.cluster.pki import cert_specs, kubeconfig_specs
from roughnet.cluster.state import ClusterNotFound, ClusterPreflightError, ClusterState, NodeState
from roughnet.runspec import Direction
from roughnet.topo import naming


def test_names_and_addresses_follow_roughnets_conventions():
    L = make_layout("local", 3)
    assert L.token == "klocal"
    assert L.cp_ns == "rn-klocal-cp"
    assert [n.ns for n in L.nodes] == ["rn-klocal-n1", "rn-klocal-n2", "rn-klocal-n3"]
    assert [n.name for n in L.nodes] == ["node1", "node2", "node3"]
    assert L.cp_address == "198.18.0.1" and [n.address for n in L.nodes] == ["198.18.0.2", "198.18.0.3", "198.18.0.4"]
    assert [n.cgroup for n in L.nodes] == ["/rn-klocal-n1", "/rn-klocal-n2", "/rn-klocal-n3"]
    assert L.apiserver_url == "https://198.18.0.1:6443"
    # a cluster token is never a run token (those are hex), and every name passes topo's checks
    assert not all(c in "0123456789abcdef" for c in L.token)
    naming.check_names(L.token, L.hosts(), [node_link(L, Direction())])


def test_ranges_are_apart():
    node_net = naming.subnet(layout.NODE_LINK)
    for a, b in ((CLUSTER_CIDR, SERVICE_CIDR), (CLUSTER_CIDR, node_net), (SERVICE_CIDR, node_net)):
        assert not a.overlaps(b)
    for net in (CLUSTER_CIDR, SERVICE_CIDR, node_net):
        assert net.subnet_of(ipaddress.IPv4Network("198.18.0.0/15"))
    assert str(layout.API_SERVICE_IP) == "198.19.224.1"


@pytest.mark.parametrize("name,nodes,network", [("Local", 2, "routed"), ("a-b", 2, "routed"), ("x" * 11, 2, "routed"),
                                                ("local", 0, "routed"), ("local", 17, "routed"),
                                                ("local", 2, "calico")])
def test_bad_input_is_refused(name, nodes, network):
    with pytest.raises(ClusterPreflightError):
        make_layout(name, nodes, network)


def test_node_network_run_is_one_link_among_all_hosts():
    L = make_layout("t1", 2)
    d = Direction(rate_bps=100_000_000, loss=0.01)
    link = node_link(L, d)
    assert link.hosts == ("cp", "n1", "n2") and link.shared and link.forward == d == link.reverse
    run = node_run(L, link)
    assert run.host_names() == ["cp", "n1", "n2"] and run.links == (link,)
    one = node_link(make_layout("t1", 1), Direction())
    assert one.hosts == ("cp", "n1") and not one.shared


def test_pod_routes_reach_every_other_node_from_every_namespace():
    L = make_layout("local", 3)
    cidrs = {"node1": "198.19.192.0/24", "node2": "198.19.193.0/24", "node3": "198.19.194.0/24"}
    routes = pod_cidr_routes(L, cidrs)
    assert routes["rn-klocal-cp"] == [(cidrs["node1"], "198.18.0.2"), (cidrs["node2"], "198.18.0.3"),
                                      (cidrs["node3"], "198.18.0.4")]
    assert routes["rn-klocal-n2"] == [(cidrs["node1"], "198.18.0.2"), (cidrs["node3"], "198.18.0.4")]


def _state() -> ClusterState:
    return ClusterState(
        name="local", token="klocal", version="v1.32.13", network="routed", cp_ns="rn-klocal-cp",
        cp_address="198.18.0.1", apiserver="https://198.18.0.1:6443", kubeconfig="/x/admin.kubeconfig",
        kubectl="/k/kubectl", service_cidr=str(SERVICE_CIDR), cluster_cidr=str(CLUSTER_CIDR),
        node_link={"text": "not impaired", "engine": "kernel"},
        nodes=[NodeState("node1", "n1", "rn-klocal-n1", "198.18.0.2", "198.19.192.0/24", "/s.sock", 42)],
        created_at=1.0, up_seconds=9.0, ledger="/run/roughnet/ledger/klocal.jsonl", run_dir="/r", data_dir="/d")


def test_state_round_trip_and_kubectl_argv(tmp_path):
    st = _state()
    state.save(st, tmp_path)
    back = state.load("local", tmp_path)
    assert back == st
    assert back.kubectl_argv() == ["ip", "netns", "exec", "rn-klocal-cp", "/k/kubectl", "--kubeconfig",
                                   "/x/admin.kubeconfig"]
    assert back.node("node1") is back.node("n1")
    assert back.node("n1").ns_argv(["ip", "addr"]) == ["ip", "netns", "exec", "rn-klocal-n1", "ip", "addr"]
    assert back.node("n1").mount_ns_argv(["ls"]) == ["nsenter", "-t", "42", "-m", "-n", "--", "ls"]
    assert [c.name for c in state.list_clusters(tmp_path)] == ["local"]
    with pytest.raises(ClusterNotFound):
        state.load("other", tmp_path)


def test_newer_state_format_is_refused(tmp_path):
    st = _state()
    path = state.save(st, tmp_path)
    data = json.loads(path.read_text())
    data["format"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(state.ClusterError, match="newer"):
        state.load("local", tmp_path)


def test_containerd_config_keeps_everything_in_the_nodes_dirs():
    L = make_layout("local", 2)
    n = L.nodes[0]
    cfg = tomllib.loads(configs.containerd_config(n))
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # root here lacks CAP_SYS_RESOURCE: runc fails without it
    assert cri["sandbox_image"] == "roughnet.local/pause:3.10"
    assert cri["netns_mounts_under_state_dir"] is True and cri["disable_apparmor"] is True
    assert cri["systemd_cgroup"] is False
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": False,
                                                                "Root": str(n.run_dir / "runc")}
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"
    own = (str(n.dir), str(n.run_dir))
    for path in (cfg["root"], cfg["state"], cfg["grpc"]["address"], cfg["ttrpc"]["address"],
                 cfg["plugins"]["io.containerd.internal.v1.opt"]["path"], cri["cni"]["conf_dir"]):
        assert path.startswith(own), path


def test_kubelet_and_kube_proxy_leave_host_settings_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "DATA_ROOT", tmp_path)
    L = make_layout("local", 2)
    from roughnet.cluster.pki import ClusterPki

    p = ClusterPki(tmp_path / "pki", kubeconfigs={"kube-proxy": tmp_path / "kp"})
    k = configs.kubelet_config(L, L.nodes[1], p)
    assert k["cgroupDriver"] == "cgroupfs" and k["cgroupRoot"] == "/rn-klocal-n2"
    assert k["failSwapOn"] is False and k["protectKernelDefaults"] is False and k["oomScoreAdj"] == 0
    assert k["imageGCHighThresholdPercent"] == 100  # imported images cannot be pulled again
    assert k["address"] == "198.18.0.3" and k["maxPods"] == layout.MAX_PODS
    for key in ("podLogsDir", "volumePluginDir", "resolvConf"):
        assert k[key].startswith(str(L.nodes[1].dir)), key
    kp = configs.kube_proxy_config(L.nodes[1], tmp_path / "kp")
    assert kp["mode"] == "iptables" and kp["hostnameOverride"] == "node2"
    assert kp["conntrack"] == {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}
    assert kp["oomScoreAdj"] == 0


def test_boolean_flags_are_written_with_equals(tmp_path):
    # Go's pflag takes `--flag=false` only; `--flag false` ends the options (kube-apiserver then refuses to start).
    L = make_layout("local", 1)
    from roughnet.cluster.pki import ClusterPki

    p = ClusterPki(tmp_path, kubeconfigs={"controller-manager": tmp_path / "cm", "scheduler": tmp_path / "s"})
    for argv in (configs.apiserver_argv(tmp_path, L, p), configs.controller_manager_argv(tmp_path, L, p),
                 configs.scheduler_argv(tmp_path, p), configs.etcd_argv(L)):
        assert "true" not in argv and "false" not in argv, argv
    cm = configs.controller_manager_argv(tmp_path, L, p)
    assert "--allocate-node-cidrs=true" in cm and cm[cm.index("--cluster-cidr") + 1] == str(CLUSTER_CIDR)
    assert cm[cm.index("--flex-volume-plugin-dir") + 1].startswith(str(L.data_dir))


def test_cni_network_is_ptp_with_the_nodes_pod_cidr():
    n = make_layout("local", 1).nodes[0]
    conf = configs.cni_conflist(n, "198.19.192.0/24", 1450)
    plugin = conf["plugins"][0]
    assert plugin["type"] == "ptp" and plugin["mtu"] == 1450 and plugin["ipMasq"] is False
    assert plugin["ipam"]["ranges"] == [[{"subnet": "198.19.192.0/24"}]]
    assert plugin["ipam"]["dataDir"].startswith(str(n.dir))
    assert set(configs.CNI_PLUGINS) >= {"ptp", "host-local", "loopback"}


def test_private_mounts_cover_the_paths_components_hard_code():
    hosts = {h for h, _ in configs.PRIVATE_MOUNTS}
    assert {"/var/lib/cni", "/run/containerd", "/var/log/containers", "/var/lib/kubelet", "/run/mount"} <= hosts
    n = make_layout("local", 1).nodes[0]
    paths = configs.node_paths(n)
    for _, key in configs.PRIVATE_MOUNTS:
        assert str(paths[key]).startswith((str(n.dir), str(n.run_dir)))


def test_certificate_and_kubeconfig_plan():
    L = make_layout("local", 2)
    specs = {s.stem: s for s in cert_specs(L)}
    assert specs["admin"].orgs == ("system:masters",)
    assert specs["kubelet-node2"].cn == "system:node:node2" and specs["kubelet-node2"].orgs == ("system:nodes",)
    assert specs["kubelet-node2-serving"].ips == ("198.18.0.3",)
    assert {"198.18.0.1", "198.19.224.1"} <= set(specs["apiserver"].ips)
    assert "kubernetes.default.svc.cluster.local" in specs["apiserver"].dns
    kcs = kubeconfig_specs(L)
    assert set(kcs) == {"admin", "controller-manager", "scheduler", "kube-proxy", "node1", "node2"}
    assert all(k.server == "https://198.18.0.1:6443" for k in kcs.values())
    assert Path(kcs["admin"].path) == L.admin_kubeconfig
