"""Link engines on real namespaces, measured with independent tools (iperf3, a tiny UDP counter).

Properties with generous bounds, not exact numbers: a 10 Mbit/s tbf link
carries 8.5-10 Mbit/s of TCP; 10 % random loss over 20000 datagrams lands in
the 99.9 % binomial interval; each direction gets its own settings.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from roughnet.links import engine_for, probe_capabilities
from roughnet.runspec import Direction, Link
from roughnet.topo import Ledger, Topology

pytestmark = pytest.mark.root

MBIT = 1_000_000
Z_999 = 3.2905  # two-sided 99.9 % normal quantile

UDP_RECEIVER = r"""
import socket, sys
addr, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 33, 64 * 1024 * 1024)  # SO_RCVBUFFORCE: no drops at the socket
s.bind((addr, port))
print("ready", flush=True)
seen = set()
s.settimeout(15)
while True:
    try:
        data = s.recv(4096)
    except socket.timeout:
        break
    if data.startswith(b"END"):
        break
    seen.add(int.from_bytes(data[:4], "little"))
    s.settimeout(3)
print(len(seen), flush=True)
"""

UDP_SENDER = r"""
import socket, sys, time
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
pad = b"x" * 196
for i in range(n):
    s.sendto(i.to_bytes(4, "little") + pad, (addr, port))
    if i % 100 == 99:
        time.sleep(0.004)  # about 20k datagrams/s: far below what the path and receiver take
time.sleep(0.2)
for _ in range(40):
    s.sendto(b"END", (addr, port))
    time.sleep(0.01)
"""


def _build(run, tmp_path, engines=None) -> Topology:
    topo = Topology(run, Ledger(run.run_id[:8], run.run_id, tmp_path), engines=engines)
    topo.build()
    return topo


def _warm_arp(topo, src, dst, ping) -> None:
    """Resolve neighbours first, so an ARP request lost to the link cannot drop queued datagrams."""
    for _ in range(10):
        if ping(topo, src, dst) and ping(topo, dst, src):
            return
    raise AssertionError(f"{src} and {dst} never reached each other")


def udp_burst(topo, src: str, dst: str, n: int, port: int = 9000) -> int:
    """Send ``n`` numbered datagrams from ``src`` to ``dst``; how many distinct ones arrived."""
    addr = topo.address(dst, src)
    rx = topo.popen(dst, [sys.executable, "-c", UDP_RECEIVER, addr, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout.readline().strip() == "ready"
        tx = topo.run(src, [sys.executable, "-c", UDP_SENDER, addr, str(port), str(n)], capture_output=True,
                      text=True, timeout=120)
        assert tx.returncode == 0, tx.stderr
        out, _ = rx.communicate(timeout=60)
        return int(out.strip())
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
        rx.stdout.close()


def udp_rcvbuf_errors(topo, host: str) -> int:
    snmp = topo.run(host, ["cat", "/proc/net/snmp"], capture_output=True, text=True).stdout.splitlines()
    names, values = [line.split() for line in snmp if line.startswith("Udp:")][:2]
    return int(dict(zip(names, values))["RcvbufErrors"])


def iperf3(topo, server: str, client: str, seconds: int, reverse: bool = False, port: int = 5201) -> float:
    """TCP throughput (bits/s) measured by iperf3's receiver; the server is ended by its pid."""
    addr = topo.address(server, client)
    srv = topo.popen(server, ["iperf3", "-s", "-1", "-B", addr, "-p", str(port)], stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    try:
        argv = ["iperf3", "-c", addr, "-p", str(port), "-t", str(seconds), "-J"] + (["-R"] if reverse else [])
        for _ in range(50):  # until the server listens: a refused connection fails at once
            cl = topo.run(client, argv, capture_output=True, text=True, timeout=seconds + 60)
            if "Connection refused" not in cl.stdout + cl.stderr:  # (iperf3 3.12 -J exits 0 even then)
                break
            time.sleep(0.1)
        assert cl.returncode == 0, cl.stdout[-500:] + cl.stderr[-500:]
        end = json.loads(cl.stdout)["end"]
        assert "sum_received" in end, cl.stdout[-1500:]
        return float(end["sum_received"]["bits_per_second"])
    finally:
        if srv.poll() is None:
            srv.terminate()
        srv.wait(timeout=10)


def binomial_bounds(n: int, p: float) -> tuple[float, float]:
    half = Z_999 * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


def test_probe_finds_tbf_and_nftables_and_leaves_nothing(tmp_path):
    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    caps = probe_capabilities(ledger_dir=tmp_path, refresh=True)
    assert caps.root and caps.netns and caps.tbf and caps.htb and caps.nft
    assert caps.notes["tbf"] == "ok"
    if not caps.netem:
        assert "sch_netem" in caps.notes["netem"]
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert "rn-probe" not in after and before.count("\n") >= after.count("\n") - 5
    assert list(tmp_path.iterdir()) == []


def test_tbf_10_mbit_carries_8_5_to_10_mbit_of_tcp(tmp_path, make_run):
    run = make_run(["a", "b"], [Link(index=0, hosts=("a", "b"), forward=Direction(rate_bps=10 * MBIT))])
    topo = _build(run, tmp_path)
    try:
        eng = engine_for("kernel")
        eng.apply(topo, run.links[0])
        bps = iperf3(topo, "b", "a", seconds=5)
        assert 8.5 * MBIT <= bps <= 10 * MBIT, bps
        c = eng.counters(topo, run.links[0])
        assert c["engine"] == "kernel"
        assert c["forward"]["tx_packets"] > 5 * 10 * MBIT / 8 / 1514 * 0.8  # about 4000 full frames
        assert c["forward"]["overlimits"] > 0  # the bucket did hold frames back
        assert c["forward"]["drops_loss"] == 0 and c["reverse"]["drops_loss"] == 0
    finally:
        topo.teardown()
    assert topo.teardown_errors == []


def test_ten_percent_loss_lands_in_the_binomial_interval(tmp_path, make_run, ping):
    n, p = 20000, 0.10
    run = make_run(["a", "b"], [Link(index=0, hosts=("a", "b"), forward=Direction(loss=p))])
    topo = _build(run, tmp_path)
    try:
        eng = engine_for("kernel")
        eng.apply(topo, run.links[0])
        _warm_arp(topo, "a", "b", ping)
        before = eng.counters(topo, run.links[0])["forward"]["drops_loss"]
        received = udp_burst(topo, "a", "b", n)
        assert udp_rcvbuf_errors(topo, "b") == 0  # every missing datagram was lost on the link
        lost = (n - received) / n
        lo, hi = binomial_bounds(n, p)
        assert lo <= lost <= hi, (lost, lo, hi)
        c = eng.counters(topo, run.links[0])
        dropped = c["forward"]["drops_loss"] - before
        # the link's own count of datagrams dropped (+ a few END markers and ARP frames)
        assert n - received <= dropped <= n - received + 45, (dropped, n - received)
        assert c["reverse"]["drops_loss"] == 0
    finally:
        topo.teardown()
    assert topo.teardown_errors == []


def test_each_direction_gets_its_own_rate(tmp_path, make_run):
    link = Link(index=0, hosts=("a", "b"), forward=Direction(rate_bps=4 * MBIT),
                reverse=Direction(rate_bps=16 * MBIT))
    run = make_run(["a", "b"], [link])
    topo = _build(run, tmp_path)
    try:
        engine_for("kernel").apply(topo, link)
        fwd = iperf3(topo, "b", "a", seconds=4)  # a sends to b: forward
        rev = iperf3(topo, "b", "a", seconds=4, reverse=True, port=5202)  # b sends to a: reverse
        assert 0.85 * 4 * MBIT <= fwd <= 4 * MBIT, fwd
        assert 0.85 * 16 * MBIT <= rev <= 16 * MBIT, rev
        qa = topo.run("a", ["tc", "-j", "qdisc", "show", "dev", "rn0-b"], capture_output=True, text=True).stdout
        qb = topo.run("b", ["tc", "-j", "qdisc", "show", "dev", "rn0-a"], capture_output=True, text=True).stdout
        assert json.loads(qa)[0]["options"]["rate"] == 4 * MBIT // 8
        assert json.loads(qb)[0]["options"]["rate"] == 16 * MBIT // 8
    finally:
        topo.teardown()


def test_shared_segment_uplink_loss_and_shaping(tmp_path, make_run, ping):
    n, p = 4000, 0.20
    seg = Link(index=0, hosts=("a", "b", "c"), forward=Direction(loss=p, rate_bps=50 * MBIT),
               reverse=Direction(rate_bps=40 * MBIT))
    run = make_run(["a", "b", "c"], [seg])
    topo = _build(run, tmp_path)
    try:
        eng = engine_for("kernel")
        eng.apply(topo, seg)
        sns = topo.segment_ns(0)
        # uplink shaped on every host's egress, downlink on every bridge port's egress
        for h in "abc":
            q = json.loads(topo.run(h, ["tc", "-j", "qdisc", "show", "dev", "rn0"], capture_output=True,
                                    text=True).stdout)[0]
            assert q["kind"] == "tbf" and q["options"]["rate"] == 50 * MBIT // 8
        for j in range(3):
            q = json.loads(topo.run_ns(sns, ["tc", "-j", "qdisc", "show", "dev", f"rn0p{j}"], capture_output=True,
                                       text=True).stdout)[0]
            assert q["kind"] == "tbf" and q["options"]["rate"] == 40 * MBIT // 8
        # uplink loss sits on the bridge ports, none at the hosts (downlink has no loss)
        assert topo.run_ns(sns, ["nft", "list", "table", "netdev", "rn0"], capture_output=True).returncode == 0
        assert topo.run("b", ["nft", "list", "table", "netdev", "rn0"], capture_output=True).returncode != 0
        _warm_arp(topo, "a", "b", ping)
        received = udp_burst(topo, "a", "b", n)
        lo, hi = binomial_bounds(n, p)
        assert lo <= (n - received) / n <= hi
        c = eng.counters(topo, seg)
        assert c["forward"]["drops_loss"] >= n - received
        assert c["reverse"]["drops_loss"] == 0
    finally:
        topo.teardown()
    assert topo.teardown_errors == []


def test_netem_engine_delays_and_shapes(tmp_path, make_run, ping):
    caps = probe_capabilities(ledger_dir=tmp_path)
    if not caps.netem:
        pytest.skip(f"the netem engine needs sch_netem: {caps.notes.get('netem')}")
    link = Link(index=0, hosts=("a", "b"), engine="netem", forward=Direction(delay_ns=100_000_000),
                reverse=Direction(rate_bps=10 * MBIT))
    run = make_run(["a", "b"], [link])
    topo = _build(run, tmp_path)
    try:
        engine_for("netem").apply(topo, link)
        t0 = time.monotonic()
        assert ping(topo, "a", "b", 3) == 3
        assert time.monotonic() - t0 >= 0.3  # three round trips of at least 100 ms each
        bps = iperf3(topo, "a", "b", seconds=4)  # b sends to a: the 10 Mbit/s reverse
        assert 8.5 * MBIT <= bps <= 10 * MBIT
    finally:
        topo.teardown()
