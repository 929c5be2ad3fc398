"""`cluster up` preflight: every refusal is a ClusterPreflightError (exit 2) naming what is missing; nothing is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from roughnet.cluster import up
from roughnet.cluster.state import ClusterPreflightError
from roughnet.errors import PreflightError


@pytest.fixture
def as_root(monkeypatch):
    monkeypatch.setattr(up.os, "geteuid", lambda: 0)


def test_not_root_is_refused(monkeypatch):
    monkeypatch.setattr(up.os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterPreflightError, match="needs root"):
        up.prepare(up.UpOptions())


def test_missing_kubernetes_binaries_name_make_cluster(as_root, monkeypatch, tmp_path):
    monkeypatch.setattr(up, "KUBE_BIN_DIR", tmp_path)
    with pytest.raises(ClusterPreflightError, match="make cluster") as e:
        up.prepare(up.UpOptions())
    assert str(tmp_path / "kubelet") in str(e.value) and e.value.exit_code == 2
    assert isinstance(e.value, PreflightError)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("network", ["flannel-vxlan", "flannel-host-gw"])
def test_flannel_without_flanneld_says_so(as_root, monkeypatch, tmp_path, network):
    for b in up.KUBE_BINARIES:
        (tmp_path / b).write_text("#!/bin/sh\n")
        (tmp_path / b).chmod(0o755)
    monkeypatch.setattr(up, "KUBE_BIN_DIR", tmp_path)
    with pytest.raises(ClusterPreflightError, match="flanneld was not built"):
        up.prepare(up.UpOptions(network=network))


def test_flannel_net_conf_names_the_backend():
    from roughnet.cluster import configs

    assert configs.flannel_net_conf("vxlan")["Backend"] == {"Type": "vxlan", "VNI": 1, "Port": 8472}
    host_gw = configs.flannel_net_conf("host-gw")
    assert host_gw["Backend"] == {"Type": "host-gw"} and host_gw["Network"] == "198.19.192.0/19"
    ipsec = configs.flannel_net_conf("ipsec", "k" * 96)["Backend"]
    assert ipsec == {"Type": "ipsec", "PSK": "k" * 96, "UDPEncap": False}
    with pytest.raises(ValueError, match="96 characters"):
        configs.flannel_net_conf("ipsec", "short")
    with pytest.raises(ValueError, match="wireguard"):
        configs.flannel_net_conf("wireguard")


def test_flanneld_with_ipsec_gets_a_run_of_its_own():
    from roughnet.cluster import configs
    from roughnet.cluster.layout import make_layout

    node = make_layout("t", 2, "flannel-ipsec").nodes[0]
    argv = configs.flanneld_argv("/bin/flanneld", node, Path("/k"), "ipsec")
    assert argv[:3] == ["unshare", "--mount", "--propagation"] and "tmpfs" in argv[7] and "/run &&" in argv[7]
    assert argv[argv.index("/bin/flanneld") - 1] == "flanneld"  # sh's $0: "$@" is flanneld and its arguments
    assert configs.flanneld_argv("/bin/flanneld", node, Path("/k"), "vxlan")[0] == "/bin/flanneld"
    # the subnet file where flanneld's private /run does not hide it
    assert not str(configs.node_paths(node)["flannel_subnet_env"]).startswith("/run/")


def test_flannel_ipsec_without_charon_names_the_package(as_root, monkeypatch, tmp_path):
    for b in [*up.KUBE_BINARIES, "flanneld"]:
        (tmp_path / b).write_text("#!/bin/sh\n")
        (tmp_path / b).chmod(0o755)
    monkeypatch.setattr(up, "KUBE_BIN_DIR", tmp_path)
    monkeypatch.setattr(up, "CHARON", str(tmp_path / "no-charon"))
    with pytest.raises(ClusterPreflightError, match="strongswan-charon") as e:
        up.prepare(up.UpOptions(network="flannel-ipsec"))
    assert e.value.exit_code == 2


@pytest.mark.parametrize("opts,match", [
    (up.UpOptions(name="No"), "cluster name"),
    (up.UpOptions(nodes=0), "--nodes 0"),
    (up.UpOptions(network="weave"), "--network"),
    (up.UpOptions(rate="fast"), "node link"),
    (up.UpOptions(delay="5 parsecs"), "node link"),
    (up.UpOptions(loss="200%"), "node link"),
])
def test_bad_options_are_refused(as_root, opts, match):
    with pytest.raises(ClusterPreflightError, match=match):
        up.prepare(opts)


def test_node_link_text_and_values():
    d, info = up._direction(up.UpOptions(rate="100 Mbit/s", delay="1 ms", loss="1%"))
    assert (d.rate_bps, d.delay_ns, d.loss) == (100_000_000, 1_000_000, 0.01)
    assert info["text"] == "100 Mbit/s, delay 1 ms, loss 1%"
    d, info = up._direction(up.UpOptions())
    assert d.is_clean and info["text"] == "not impaired"
    assert up._choose_engine(up.node_link(up.make_layout("x", 1), d)) == "kernel"  # nothing to apply: no probe


def test_missing_programs_and_images_are_named(monkeypatch):
    monkeypatch.setattr(up.shutil, "which", lambda name, path=None: None)
    missing = up.missing_host_tools()
    assert any(m.startswith("containerd ") for m in missing) and any("etcd-server" in m for m in missing)
    monkeypatch.setenv("ROUGHNET_IMAGES_DIR", "/nonexistent")
    from roughnet.kube import image

    monkeypatch.setattr(image, "IMAGES_DIR", Path("/nonexistent"))
    found, lacking = up.image_archives()
    assert found == [] and len(lacking) == 2 and "roughnet.local/pause:3.10" in lacking[0]


def test_flannel_ipsec_on_a_kernel_without_esp_is_refused(as_root, monkeypatch, tmp_path):
    for b in [*up.KUBE_BINARIES, "flanneld"]:
        (tmp_path / b).write_text("#!/bin/sh\n")
        (tmp_path / b).chmod(0o755)
    monkeypatch.setattr(up, "KUBE_BIN_DIR", tmp_path)
    monkeypatch.setattr(up, "CHARON", "/bin/sh")
    monkeypatch.setattr(up, "missing_host_tools", lambda: [])
    monkeypatch.setattr(up, "kernel_esp_refusal", lambda: "Error: Requested type not found.")
    with pytest.raises(ClusterPreflightError, match="ESP with AES-GCM.*Requested type not found") as e:
        up.prepare(up.UpOptions(network="flannel-ipsec"))
    assert e.value.exit_code == 2


def test_kube_router_without_its_binary_says_so(as_root, monkeypatch, tmp_path):
    for b in up.KUBE_BINARIES:
        (tmp_path / b).write_text("#!/bin/sh\n")
        (tmp_path / b).chmod(0o755)
    monkeypatch.setattr(up, "KUBE_BIN_DIR", tmp_path)
    with pytest.raises(ClusterPreflightError, match="kube-router was not built") as e:
        up.prepare(up.UpOptions(network="kube-router"))
    assert e.value.exit_code == 2 and "kube-router-build.log" in str(e.value)


def test_kube_router_runs_its_router_only():
    from roughnet.cluster import configs
    from roughnet.cluster.layout import make_layout

    node = make_layout("t", 2, "kube-router").nodes[1]
    argv = configs.kube_router_argv("/bin/kube-router", node, Path("/k"))
    assert "--run-router=true" in argv and "--run-firewall=false" in argv and "--run-service-proxy=false" in argv
    assert argv[argv.index("--hostname-override") + 1] == node.name == "node2"
    assert argv[argv.index("--router-id") + 1] == node.address


def test_network_refusals_name_what_each_network_lacks(monkeypatch, tmp_path):
    for b in up.KUBE_BINARIES:
        (tmp_path / b).write_text("#!/bin/sh\n")
        (tmp_path / b).chmod(0o755)
    monkeypatch.setattr(up, "KUBE_BIN_DIR", tmp_path)
    got = up.network_refusals()
    assert got["routed"] is None
    assert "flanneld not built" in got["flannel-vxlan"] and "flanneld not built" in got["flannel-ipsec"]
    assert "kube-router not built" in got["kube-router"]
    (tmp_path / "flanneld").write_text("#!/bin/sh\n")
    (tmp_path / "flanneld").chmod(0o755)
    monkeypatch.setattr(up, "CHARON", "/bin/sh")
    monkeypatch.setattr(up.os, "geteuid", lambda: 0)
    monkeypatch.setattr(up, "kernel_esp_refusal", lambda: "Error: Requested type not found.")
    got = up.network_refusals()
    assert got["flannel-host-gw"] is None and "no ESP" in got["flannel-ipsec"]

