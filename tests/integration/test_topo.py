"""Topology on real namespaces: build, reach, tear down, and leave the root namespace alone."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from roughnet.errors import TopologyError
from roughnet.runspec import Link
from roughnet.topo import Ledger, Topology

from conftest import ping_in_ns, root_ns_snapshot

pytestmark = pytest.mark.root


def _ns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _build(run, tmp_path, **kw) -> Topology:
    topo = Topology(run, Ledger(run.run_id[:8], run.run_id, tmp_path), **kw)
    topo.build()
    return topo


def _iface(topo, ns, ifname) -> dict:
    out = subprocess.run(["ip", "-n", ns, "-j", "-d", "link", "show", "dev", ifname], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)[0]


def _sysctl(ns, key) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", key], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_two_hosts_build_reach_and_teardown(tmp_path, make_run, ping):
    run = make_run(["a", "b"], [Link(index=0, hosts=("a", "b"), mtu=1400)])
    topo = _build(run, tmp_path)
    ledger_file = topo.ledger.path
    try:
        assert {topo.ns("a"), topo.ns("b")} <= _ns_list()
        for host, ifname in (("a", "rn0-b"), ("b", "rn0-a")):
            ns = topo.ns(host)
            info = _iface(topo, ns, ifname)
            assert info["mtu"] == 1400 and info["operstate"] == "UP"
            feats = subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-k", ifname], capture_output=True,
                                   text=True, check=True).stdout
            for feat in ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload",
                         "large-receive-offload"):
                assert f"{feat}: off" in feats, feat
            assert _sysctl(ns, "net.ipv6.conf.all.disable_ipv6") == "1"
            assert _sysctl(ns, "net.ipv4.ip_forward") == "1"
            lo = _iface(topo, ns, "lo")
            assert "UP" in lo["flags"]
        assert topo.address("b", "a") == "198.18.0.2" and topo.address("a", "b") == "198.18.0.1"
        assert ping(topo, "a", "b", 2) == 2
        assert ping(topo, "b", "a", 2) == 2
        kinds = [e["kind"] for e in topo.ledger.entries()]
        assert kinds[:3] == ["owner", "netns", "netns"] and "veth" in kinds
    finally:
        topo.teardown()
    assert topo.teardown_errors == []
    assert not {topo.ns("a"), topo.ns("b")} & _ns_list()
    assert not ledger_file.exists()
    topo.teardown()  # idempotent, never raises for what is already gone
    assert topo.teardown_errors == []


def test_three_host_chain_routes_end_to_end(tmp_path, make_run, ping):
    run = make_run(["a", "b", "c"], [("a", "b"), ("b", "c")])
    topo = _build(run, tmp_path)
    try:
        assert topo.address("c", "a") == "198.18.1.2"
        assert ping(topo, "a", "c", 2) == 2
        assert ping(topo, "c", "a", 2) == 2
        routes = subprocess.run(["ip", "-n", topo.ns("a"), "-j", "route"], capture_output=True, text=True,
                                check=True).stdout
        assert {"dst": "198.18.1.0/24", "gateway": "198.18.0.2"}.items() <= next(
            r for r in json.loads(routes) if r["dst"] == "198.18.1.0/24").items()
    finally:
        topo.teardown()
    assert topo.teardown_errors == []


def test_shared_segment_of_three_hosts_reaches_all_pairs(tmp_path, make_run, ping):
    run = make_run(["a", "b", "c"], [("a", "b", "c")])
    topo = _build(run, tmp_path)
    try:
        assert topo.segment_ns(0) in _ns_list()
        for src in "abc":
            for dst in "abc":
                if src != dst:
                    assert ping(topo, src, dst) == 1, (src, dst)
        br = _iface(topo, topo.segment_ns(0), "rn0br")
        assert br["linkinfo"]["info_kind"] == "bridge"
        assert br["linkinfo"]["info_data"]["stp_state"] == 0
    finally:
        topo.teardown()
    assert topo.segment_ns(0) not in _ns_list()


def test_relayed_link_has_a_middle_namespace_that_carries_frames_once_bridged(tmp_path, make_run, ping):
    run = make_run(["a", "b"], [("a", "b")])
    topo = _build(run, tmp_path, engines={0: "wire"})
    try:
        lns = topo.link_ns(0)
        ra, rb = topo.relay_ifaces(0)
        assert (ra, rb) == ("rn0a", "rn0b")
        for ifname, peer_host in ((ra, "a"), (rb, "b")):
            info = _iface(topo, lns, ifname)
            assert info["operstate"] == "UP" and "PROMISC" in info["flags"]
            assert info["link_netnsid"] is not None  # its peer lives in a host namespace
        # same host-side names and addresses as a direct link
        assert _iface(topo, topo.ns("a"), "rn0-b")["mtu"] == 1500
        assert topo.address("b", "a") == "198.18.0.2"
        assert ping(topo, "a", "b") == 0  # nothing relays yet
        # Stand in for roughnet-wire with a Linux bridge inside the link namespace.
        for argv in (["ip", "link", "add", "rn0rel", "type", "bridge", "stp_state", "0", "forward_delay", "0"],
                     ["ip", "link", "set", ra, "master", "rn0rel"], ["ip", "link", "set", rb, "master", "rn0rel"],
                     ["ip", "link", "set", "rn0rel", "up"]):
            assert topo.run_ns(lns, argv).returncode == 0, argv
        for h in "ab":  # forget the failed ARP lookups of the unrelayed ping
            assert topo.run(h, ["ip", "neigh", "flush", "all"]).returncode == 0
        assert ping(topo, "a", "b", 2) == 2
        assert ping(topo, "b", "a", 2) == 2
    finally:
        topo.teardown()
    assert topo.teardown_errors == []
    assert lns not in _ns_list()


def test_popen_records_the_process_and_teardown_stops_it(tmp_path, make_run):
    run = make_run(["a", "b"], [("a", "b")])
    topo = _build(run, tmp_path)
    try:
        # one process that ignores SIGTERM (so SIGKILL after the grace is exercised), one that does not
        stubborn = topo.popen("a", ["python3", "-c", "import signal,time; signal.signal(signal.SIGTERM, "
                                    "signal.SIG_IGN); print('up', flush=True); time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
        polite = topo.popen("b", ["sleep", "600"])
        assert stubborn.stdout.readline().strip() == "up"
        procs = {e["pid"]: e for e in topo.ledger.entries() if e["kind"] == "process"}
        assert set(procs) == {stubborn.pid, polite.pid}
        assert procs[polite.pid]["ns"] == topo.ns("b") and procs[polite.pid]["start_time"] > 0
        netns_pids = subprocess.run(["ip", "netns", "pids", topo.ns("b")], capture_output=True, text=True,
                                    check=True).stdout.split()
        assert str(polite.pid) in netns_pids
        done = topo.run("a", ["cat", "/proc/net/snmp"], capture_output=True, text=True)
        assert done.returncode == 0 and "Tcp:" in done.stdout
    finally:
        t0 = time.monotonic()
        topo.teardown()
        stubborn.stdout.close()
    assert stubborn.poll() == -9 and polite.poll() == -15
    assert time.monotonic() - t0 < 30  # generous: SIGKILL came after the 2 s grace, not never
    assert topo.teardown_errors == []


def test_root_namespace_unchanged_by_build_teardown_and_by_a_failed_build(tmp_path, make_run):
    before = root_ns_snapshot()
    run = make_run(["a", "b", "c", "d"], [("a", "b"), ("b", "c", "d"), ("d", "a")])
    topo = _build(run, tmp_path, engines={2: "wire"})
    topo.teardown()
    assert root_ns_snapshot() == before
    # veth MTU is at most 65535: this fails half-way, after namespaces and a veth exist
    bad = make_run(["a", "b", "c"], [("a", "b"), Link(index=1, hosts=("b", "c"), mtu=70000)])
    topo = Topology(bad, Ledger(bad.run_id[:8], bad.run_id, tmp_path))
    with pytest.raises(TopologyError, match="MTU 70000") as e:
        topo.build()
    assert "exited" in str(e.value)
    assert not set(topo.namespaces()) & _ns_list()
    assert not topo.ledger.path.exists()
    assert root_ns_snapshot() == before


def test_a_namespace_that_is_not_ours_is_never_deleted(tmp_path, make_run):
    run = make_run(["a", "b"], [("a", "b")])
    topo = Topology(run, Ledger(run.run_id[:8], run.run_id, tmp_path))
    squatter = topo.ns("b")
    subprocess.run(["ip", "netns", "add", squatter], check=True)
    try:
        with pytest.raises(TopologyError, match="already exists"):
            topo.build()
        assert squatter in _ns_list()  # ours (a) is gone, theirs (b) stays
        assert topo.ns("a") not in _ns_list()
    finally:
        subprocess.run(["ip", "netns", "delete", squatter], check=True)


def test_ping_helper_reports_no_reply_outside_the_topology(tmp_path, make_run):
    run = make_run(["a", "b"], [("a", "b")])
    topo = _build(run, tmp_path)
    try:
        assert ping_in_ns(topo.ns("a"), "198.18.77.1") == 0  # no route: the helper can fail
    finally:
        topo.teardown()


def test_two_hundred_hosts_on_one_segment_build_reach_and_go(tmp_path, make_run, ping):
    """Issue 17's largest size: every host set up as a two-host link's are (MTU, offloads, sysctls, a
    static neighbour for each of the 199 others), reachable, and nothing left after teardown."""
    hosts = [f"h{i}" for i in range(200)]
    run = make_run(hosts, [tuple(hosts)])
    topo = _build(run, tmp_path)
    ns_made = set(topo.namespaces())
    try:
        assert len(ns_made) == 201 and ns_made <= _ns_list()
        for host in ("h0", "h137", "h199"):
            ns = topo.ns(host)
            info = _iface(topo, ns, "rn0")
            assert info["operstate"] == "UP" and info["address"].startswith("02:")
            feats = subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-k", "rn0"], capture_output=True,
                                   text=True, check=True).stdout
            assert "tcp-segmentation-offload: off" in feats and "generic-receive-offload: off" in feats
            assert _sysctl(ns, "net.ipv4.conf.all.rp_filter") == "0"
            neigh = json.loads(subprocess.run(["ip", "-n", ns, "-j", "neigh", "show", "dev", "rn0", "nud",
                                               "permanent"], capture_output=True, text=True, check=True).stdout)
            assert len(neigh) == 199, host
        macs = {_iface(topo, topo.ns(h), "rn0")["address"] for h in hosts[:50]}
        assert len(macs) == 50  # the MACs roughnet chose differ
        for src, dst in (("h0", "h199"), ("h199", "h0"), ("h57", "h142")):
            assert ping(topo, src, dst) == 1, (src, dst)
    finally:
        topo.teardown()
    assert not topo.teardown_errors
    assert not (ns_made & _ns_list())
    assert not topo.ledger.path.exists()
