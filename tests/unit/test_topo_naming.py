"""Naming, addressing, routing plan, ledger format and direction points: no root needed."""

from __future__ import annotations

import ipaddress
import json
import os

import pytest

from roughnet.errors import LinkError, TopologyError
from roughnet.links.points import egress_points, ingress_points
from roughnet.runspec import Link
from roughnet.topo import Ledger, Topology, naming
from roughnet.topo.ledger import owner_alive, process_alive, process_start_time, read_ledger


def test_namespace_names():
    assert naming.host_ns("ab12cd34", "car1") == "rn-ab12cd34-car1"
    assert naming.segment_ns("ab12cd34", 3) == "rn-ab12cd34-s3"
    assert naming.link_ns("ab12cd34", 7) == "rn-ab12cd34-l7"
    assert naming.run_token("0123abcdef99") == "0123abcd"


def test_interface_names_fit_ifnamsiz_for_the_largest_index_and_longest_peer():
    pair = Link(index=511, hosts=("abcdefgh", "zyxwvuts"))
    assert naming.host_ifname(pair, "abcdefgh") == "rn511-zyxwvuts"
    assert naming.host_ifname(pair, "zyxwvuts") == "rn511-abcdefgh"
    seg = Link(index=511, hosts=("a", "b", "c"))
    names = [naming.host_ifname(seg, "a"), naming.bridge_name(511), naming.port_ifname(511, 253),
             *naming.relay_ifnames(511), naming.host_ifname(pair, "abcdefgh")]
    assert names[0] == "rn511" and names[2] == "rn511p253"
    assert all(len(n) <= naming.IFNAME_MAX and n.startswith("rn") for n in names)


def test_subnets_and_addresses():
    assert naming.subnet(0) == ipaddress.IPv4Network("198.18.0.0/24")
    assert naming.subnet(255) == ipaddress.IPv4Network("198.18.255.0/24")
    assert naming.subnet(256) == ipaddress.IPv4Network("198.19.0.0/24")
    assert naming.subnet(511) == ipaddress.IPv4Network("198.19.255.0/24")
    assert str(naming.host_address(0, 0)) == "198.18.0.1"
    assert str(naming.host_address(300, 2)) == "198.19.44.3"
    bench = ipaddress.IPv4Network("198.18.0.0/15")
    assert all(naming.subnet(i).subnet_of(bench) for i in (0, 100, 256, 511))
    with pytest.raises(TopologyError, match="0..511"):
        naming.subnet(512)
    with pytest.raises(TopologyError, match="0..253"):
        naming.host_address(0, 254)


@pytest.mark.parametrize("bad", ["", "A", "1abc", "a;rm -rf", "a b", "abcdefghi", "a-b", "$(x)", "a\n"])
def test_host_names_outside_the_pattern_are_refused(bad):
    with pytest.raises(TopologyError, match="expected"):
        naming.host_ns("ab12cd34", bad)


def test_check_names_refuses_collisions_and_unknown_hosts():
    ok = [Link(0, ("a", "b")), Link(1, ("b", "c", "d"))]
    naming.check_names("ab12cd34", ["a", "b", "c", "d"], ok)
    with pytest.raises(TopologyError, match="collide"):
        naming.check_names("ab12cd34", ["a", "s1", "b", "c", "d"], ok)
    with pytest.raises(TopologyError, match="collide"):
        naming.check_names("ab12cd34", ["l0", "b"], [Link(0, ("l0", "b"))])
    with pytest.raises(TopologyError, match="unknown host 'x'"):
        naming.check_names("ab12cd34", ["a", "b"], [Link(0, ("a", "x"))])
    with pytest.raises(TopologyError, match="twice"):
        naming.check_names("ab12cd34", ["a", "a"], [])
    with pytest.raises(TopologyError, match="names a host twice"):
        naming.check_names("ab12cd34", ["a", "b"], [Link(0, ("a", "a"))])
    with pytest.raises(TopologyError, match="token"):
        naming.check_names("AB;", ["a"], [])


CHAIN = [Link(0, ("a", "b")), Link(1, ("b", "c")), Link(2, ("c", "d"))]


def test_routes_of_a_chain_go_via_the_next_hop():
    routes = {(r.host, str(r.dest)): (str(r.gateway), r.ifname) for r in naming.plan_routes("abcd", CHAIN)}
    assert routes[("a", "198.18.1.0/24")] == ("198.18.0.2", "rn0-b")
    assert routes[("a", "198.18.2.0/24")] == ("198.18.0.2", "rn0-b")
    assert routes[("b", "198.18.2.0/24")] == ("198.18.1.2", "rn1-c")
    assert routes[("d", "198.18.0.0/24")] == ("198.18.2.1", "rn2-c")
    # no route for a directly attached subnet, one per (host, foreign subnet)
    assert ("a", "198.18.0.0/24") not in routes
    assert len(routes) == 6  # a:2, b:1, c:1, d:2


def test_routes_take_the_shortest_path_through_a_segment():
    links = [Link(0, ("a", "b")), Link(1, ("b", "c")), Link(2, ("c", "d")), Link(3, ("a", "x", "d"))]
    routes = {(r.host, str(r.dest)): str(r.gateway) for r in naming.plan_routes(["a", "b", "c", "d", "x"], links)}
    assert routes[("a", "198.18.2.0/24")] == "198.18.3.3"  # via d on the segment, 1 hop, not a-b-c
    assert routes[("x", "198.18.0.0/24")] == "198.18.3.1"


def test_address_seen_from_uses_the_last_link_of_the_path():
    hosts = "abcd"
    assert str(naming.address_seen_from("b", "a", hosts, CHAIN)) == "198.18.0.2"
    assert str(naming.address_seen_from("b", "c", hosts, CHAIN)) == "198.18.1.1"
    assert str(naming.address_seen_from("d", "a", hosts, CHAIN)) == "198.18.2.2"
    assert str(naming.address_seen_from("a", "a", hosts, CHAIN)) == "198.18.0.1"
    with pytest.raises(TopologyError, match="cannot be reached"):
        naming.address_seen_from("z", "a", ["a", "b", "y", "z"], [Link(0, ("a", "b")), Link(1, ("y", "z"))])


def test_ledger_writes_owner_first_and_objects_in_order(tmp_path):
    led = Ledger("ab12cd34", "ab12cd34ef56", tmp_path)
    led.add("netns", name="rn-ab12cd34-a")
    led.add("process", pid=1, start_time=5)
    lines = [json.loads(x) for x in (tmp_path / "ab12cd34.jsonl").read_text().splitlines()]
    assert lines[0] == {"kind": "owner", "pid": os.getpid(), "start_time": process_start_time(os.getpid()),
                        "run_id": "ab12cd34ef56"}
    assert [x["kind"] for x in lines] == ["owner", "netns", "process"]
    assert owner_alive(lines)
    led.remove_file()
    led.remove_file()
    assert not (tmp_path / "ab12cd34.jsonl").exists()


def test_ledger_refuses_a_token_owned_by_a_live_process(tmp_path):
    Ledger("ab12cd34", "ab12cd34ef56", tmp_path)
    with pytest.raises(TopologyError, match="live process"):
        Ledger("ab12cd34", "ab12cd34ef56", tmp_path)


def test_torn_last_line_is_skipped_and_reused_pid_counts_as_gone(tmp_path):
    p = tmp_path / "x.jsonl"
    me = os.getpid()
    p.write_text(json.dumps({"kind": "owner", "pid": me, "start_time": process_start_time(me) + 1}) + "\n"
                 + '{"kind":"netns","name":"rn-x-a"}\n{"kind":"netns","na')
    entries = read_ledger(p)
    assert [e["kind"] for e in entries] == ["owner", "netns"]
    assert not owner_alive(entries)  # same pid, other start time: another process
    assert process_start_time(2**22 + 12345) is None
    assert not process_alive(me, None)


def test_topology_plan_without_building(tmp_path, make_run):
    run = make_run(["a", "b", "c"], [("a", "b"), ("a", "b", "c")], run_id="ab12cd34ef56")
    topo = Topology(run, Ledger("ab12cd34", run.run_id, tmp_path), engines={0: "wire", 1: "kernel"})
    roles = {(i.ns, i.ifname): (i.link, i.role, i.address) for i in topo.interfaces()}
    assert roles[("rn-ab12cd34-a", "rn0-b")] == (0, "a", "198.18.0.1")
    assert roles[("rn-ab12cd34-b", "rn0-a")] == (0, "b", "198.18.0.2")
    assert roles[("rn-ab12cd34-l0", "rn0a")] == (0, "relay-a", None)
    assert roles[("rn-ab12cd34-l0", "rn0b")] == (0, "relay-b", None)
    assert roles[("rn-ab12cd34-c", "rn1")] == (1, "member", "198.18.1.3")
    assert roles[("rn-ab12cd34-s1", "rn1p2")] == (1, "port", None)
    assert topo.link_ns(0) == "rn-ab12cd34-l0" and topo.relay_ifaces(0) == ("rn0a", "rn0b")
    assert topo.namespaces() == ["rn-ab12cd34-a", "rn-ab12cd34-b", "rn-ab12cd34-c", "rn-ab12cd34-l0",
                                 "rn-ab12cd34-s1"]
    with pytest.raises(TopologyError, match="not relayed"):
        topo.link_ns(1)
    with pytest.raises(TopologyError, match="unknown host"):
        topo.ns("zz")
    with pytest.raises(TopologyError, match="not part of this topology"):
        topo.run_ns("rn-someone-else", ["true"])


def test_wire_on_a_shared_segment_is_relayed_in_the_segment_namespace(tmp_path, make_run):
    run = make_run(["a", "b", "c"], [("a", "b", "c")], run_id="ab12cd34ef56")
    topo = Topology(run, Ledger("ab12cd34", run.run_id, tmp_path), engines={0: "wire"})
    assert topo.link_ns(0) == topo.segment_ns(0) == "rn-ab12cd34-s0"
    assert topo.namespaces() == ["rn-ab12cd34-a", "rn-ab12cd34-b", "rn-ab12cd34-c", "rn-ab12cd34-s0"]
    ports = [(i.ifname, i.host) for i in topo.interfaces() if i.role == "port"]
    assert ports == [("rn0p0", "a"), ("rn0p1", "b"), ("rn0p2", "c")]
    with pytest.raises(TopologyError, match="relay_ports"):
        topo.relay_ifaces(0)


def test_direction_points(tmp_path, make_run):
    run = make_run(["a", "b", "c"], [("a", "b"), ("a", "b", "c")], run_id="ab12cd34ef56")
    topo = Topology(run, Ledger("ab12cd34", run.run_id, tmp_path))
    ifs = topo.interfaces()
    pair, seg = run.links

    def names(points):
        return [(p.ns.rsplit("-", 1)[1], p.ifname) for p in points]

    assert names(egress_points(ifs, pair, "forward")) == [("a", "rn0-b")]
    assert names(ingress_points(ifs, pair, "forward")) == [("b", "rn0-a")]
    assert names(egress_points(ifs, pair, "reverse")) == [("b", "rn0-a")]
    assert names(ingress_points(ifs, pair, "reverse")) == [("a", "rn0-b")]
    assert names(egress_points(ifs, seg, "forward")) == [("a", "rn1"), ("b", "rn1"), ("c", "rn1")]
    assert names(ingress_points(ifs, seg, "forward")) == [("s1", "rn1p0"), ("s1", "rn1p1"), ("s1", "rn1p2")]
    assert names(egress_points(ifs, seg, "reverse")) == [("s1", "rn1p0"), ("s1", "rn1p1"), ("s1", "rn1p2")]
    assert names(ingress_points(ifs, seg, "reverse")) == [("a", "rn1"), ("b", "rn1"), ("c", "rn1")]
    with pytest.raises(LinkError, match="forward or reverse"):
        egress_points(ifs, pair, "sideways")
