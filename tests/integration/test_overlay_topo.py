"""VXLAN overlays on real namespaces: devices, forwarding entries, reach, teardown, root namespace untouched."""

from __future__ import annotations

import json
import subprocess

import pytest

from roughnet.runspec import Link
from roughnet.topo import Ledger, Topology

from conftest import ping_in_ns, root_ns_snapshot

pytestmark = pytest.mark.root


def _ns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _link_info(ns: str, ifname: str) -> dict:
    out = subprocess.run(["ip", "-n", ns, "-j", "-d", "link", "show", "dev", ifname], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)[0]


def _fdb(ns: str, ifname: str) -> set[tuple[str, str]]:
    out = subprocess.run(["ip", "netns", "exec", ns, "bridge", "-j", "fdb", "show", "dev", ifname],
                         capture_output=True, text=True, check=True).stdout
    return {(e["mac"], e.get("dst", "")) for e in json.loads(out or "[]") if e.get("dst")}


def test_vxlan_segment_and_chain_reach_over_the_overlay_and_leave_nothing(tmp_path, make_run):
    before = root_ns_snapshot()
    links = [Link(index=0, hosts=("a", "b", "c"), overlay="vxlan"), Link(index=1, hosts=("c", "d"), overlay="vxlan",
                                                                          mtu=1400)]
    run = make_run(["a", "b", "c", "d"], links)
    topo = Topology(run, Ledger(run.run_id[:8], run.run_id, tmp_path), engines={0: "kernel", 1: "kernel"})
    topo.build()
    names = topo.namespaces()
    try:
        for pos, host in enumerate(("a", "b", "c")):
            info = _link_info(topo.ns(host), "rnv0")
            vx = info["linkinfo"]["info_data"]
            assert info["linkinfo"]["info_kind"] == "vxlan" and info["mtu"] == 1450
            assert vx["id"] == 1 and vx["port"] == 4789 and vx["learning"] is False
            assert vx["local"] == f"198.18.0.{pos + 1}"  # bound to the host's underlay address
        assert _link_info(topo.ns("d"), "rnv1")["mtu"] == 1350  # the link's 1400 less 50
        # a floods to both peers, and knows each peer's device MAC
        macs = {h: _link_info(topo.ns(h), "rnv0")["address"] for h in ("b", "c")}
        assert _fdb(topo.ns("a"), "rnv0") == {("00:00:00:00:00:00", "198.18.0.2"), ("00:00:00:00:00:00", "198.18.0.3"),
                                              (macs["b"], "198.18.0.2"), (macs["c"], "198.18.0.3")}
        # agents are given overlay addresses, and they answer (also two hops away, over two overlays)
        assert topo.address("b", "a") == "198.19.128.2" and topo.address("d", "a") == "198.19.129.2"
        for dst in ("b", "c", "d"):
            assert ping_in_ns(topo.ns("a"), topo.address(dst, "a"), 2) == 2, dst
        assert ping_in_ns(topo.ns("d"), topo.address("b", "d"), 2) == 2
        # the overlay really is encapsulated: the underlay carried UDP to port 4789 (VXLAN) frames
        stats = _link_info(topo.ns("b"), "rn0")
        assert stats["operstate"] == "UP"
        out = subprocess.run(["ip", "-n", topo.ns("b"), "-s", "-j", "link", "show", "dev", "rnv0"],
                             capture_output=True, text=True, check=True).stdout
        assert json.loads(out)[0]["stats64"]["rx"]["packets"] >= 2
    finally:
        topo.teardown()
    assert topo.teardown_errors == []
    assert not set(names) & _ns_list()
    assert root_ns_snapshot() == before


def test_vxlan_relayed_link_on_the_wire_engine_topology(tmp_path, make_run):
    """A link built relayed (a namespace in the middle) carries the overlay too."""
    run = make_run(["a", "b"], [Link(index=0, hosts=("a", "b"), overlay="vxlan")])
    topo = Topology(run, Ledger(run.run_id[:8], run.run_id, tmp_path), engines={0: "wire"})
    topo.build()
    try:
        # no relay runs here: bridge the two relay ends so frames pass, as the relay would
        lns = topo.link_ns(0)
        ra, rb = topo.relay_ifaces(0)
        for cmd in (["link", "add", "rn0br", "type", "bridge"], ["link", "set", ra, "master", "rn0br"],
                    ["link", "set", rb, "master", "rn0br"], ["link", "set", "rn0br", "up"]):
            subprocess.run(["ip", "-n", lns, *cmd], check=True, capture_output=True)
        assert ping_in_ns(topo.ns("a"), topo.address("b", "a"), 2) == 2
    finally:
        topo.teardown()
    assert topo.teardown_errors == []
