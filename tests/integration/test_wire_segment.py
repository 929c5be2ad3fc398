"""roughnet-wire serving a shared segment of three hosts (root): round trips through the uplink delay, broadcast
and multicast reaching every other host and never the sender, unicast reaching only its host, a DDS run with
multicast discovery delivering to both subscribers; and the drain of queued frames on SIGTERM (two-host link).

Bounds are generous (a shared 2-vCPU machine): a 5 ms uplink delay makes every frame at least 5 ms late, so
a round trip is at least 10 ms and, unless the machine stalls, not much more.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from itertools import permutations
from pathlib import Path

import pytest

from roughnet.binaries import agent_version, find_binary
from roughnet.links.wire import WireEngine
from roughnet.run.runner import Preflight, execute_run
from roughnet.runspec import Direction, Host, Link, Run, Workload
from roughnet.topo import Ledger, Topology

from conftest import unique_run_id

WIRE = find_binary("roughnet-wire")
AGENT = find_binary("roughnet-agent")
HOSTS = ("a", "b", "c")
MS = 1_000_000

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(WIRE is None, reason="roughnet-wire is not built (make build)"),
    # run.agents leaves each agent's stdout pipe for the garbage collector (see test_wire_engine.py).
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

#: ICMP echo round trips (ms) with a raw socket, as a JSON list; lost echoes are left out.
RTT_SCRIPT = r"""
import json, os, socket, struct, sys, time
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xFFFF); s += s >> 16
    return ~s & 0xFFFF
dst, n = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
ident, rtts = os.getpid() & 0xFFFF, []
for seq in range(n):
    body = struct.pack("!HH", ident, seq) + b"roughnet"
    t0 = time.monotonic()
    s.sendto(struct.pack("!BBH", 8, 0, csum(struct.pack("!BBH", 8, 0, 0) + body)) + body, (dst, 0))
    end = t0 + 1.0
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            data, _ = s.recvfrom(2048)
        except socket.timeout:
            break
        icmp = data[(data[0] & 15) * 4:]
        if icmp[0] == 0 and struct.unpack("!HH", icmp[4:8]) == (ident, seq):
            rtts.append((time.monotonic() - t0) * 1000)
            break
    time.sleep(0.02)
print(json.dumps(rtts))
"""

#: Counts UDP datagrams on a port (joining a multicast group on the given local address) until `idle` s
#: pass without one; prints "ready" first and the count of each distinct payload prefix at the end.
RECV_SCRIPT = r"""
import json, socket, struct, sys
port, group, local, idle = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
first_s = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(local))
print("ready", flush=True)
counts, first = {}, True
while True:
    s.settimeout(first_s if first else idle)
    try:
        data, _ = s.recvfrom(2048)
    except socket.timeout:
        break
    first = False
    key = data.split(b":")[0].decode()
    counts[key] = counts.get(key, 0) + 1
print(json.dumps(counts), flush=True)
"""

#: Sends `n` datagrams to each destination (a broadcast and a multicast address need SO_BROADCAST and
#: IP_MULTICAST_IF: the hosts have no default route).
SEND_SCRIPT = r"""
import socket, sys, time
port, local, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(local))
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
for dst in sys.argv[4:]:
    for i in range(n):
        s.sendto(f"{dst}:{i}".encode(), (dst, port))
        time.sleep(0.002)
"""


def make_run(hosts: tuple[str, ...], link: Link, workload: Workload | None = None, seed: int = 1) -> Run:
    wl = workload or Workload(pattern="stream", protocol="udp", sender=hosts[0], receivers=(hosts[-1],),
                              payload_bytes=100)
    return Run(scenario="wire-segment", sweep_id="wire-segment-00000000", run_id=unique_run_id(), index=0,
               params={}, seed=seed, repeat=0, hosts=tuple(Host(h) for h in hosts), links=(link,), workload=wl)


class Wired:
    """A topology whose only link runs on the wire engine (a segment of 3 hosts, or a pair)."""

    def __init__(self, hosts: tuple[str, ...], link: Link):
        self.run = make_run(hosts, link)
        self.link = link
        self.topo = Topology(self.run, Ledger(self.run.run_id[:8], self.run.run_id), engines={0: "wire"})
        self.engine = WireEngine()

    def __enter__(self) -> "Wired":
        try:
            self.topo.build()
            self.engine.apply(self.topo, self.link)
        except BaseException:
            self.topo.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.topo.teardown()
        assert not self.topo.teardown_errors

    def stats(self) -> dict:
        return self.engine.stats(self.link)

    def rtts(self, src: str, dst: str, n: int) -> list[float]:
        out = self.topo.run(src, [sys.executable, "-c", RTT_SCRIPT, self.topo.address(dst, src), str(n)],
                            capture_output=True, text=True, timeout=30 + 2 * n)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def receivers(self, hosts: list[str], port: int, group: str, idle_s: float,
                  first_s: float = 30.0) -> dict[str, subprocess.Popen]:
        """Receivers that end ``idle_s`` after their last datagram, or ``first_s`` after the start if none came."""
        procs = {}
        for h in hosts:
            p = self.topo.popen(h, [sys.executable, "-c", RECV_SCRIPT, str(port), group,
                                    self.topo.address(h, h), str(idle_s), str(first_s)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
            procs[h] = p
        return procs

    def send(self, host: str, port: int, n: int, *dsts: str) -> None:
        out = self.topo.run(host, [sys.executable, "-c", SEND_SCRIPT, str(port), self.topo.address(host, host),
                                   str(n), *dsts], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr


def collect(procs: dict[str, subprocess.Popen]) -> dict[str, dict[str, int]]:
    out = {}
    for h, p in procs.items():
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode == 0, stderr
        out[h] = json.loads(stdout.strip().splitlines()[-1])
    return out


def segment(forward: Direction = Direction(), reverse: Direction = Direction()) -> Link:
    return Link(index=0, hosts=HOSTS, forward=forward, reverse=reverse)


def test_round_trips_cross_two_uplinks_and_unicast_reaches_one_port():
    with Wired(HOSTS, segment(forward=Direction(delay_ns=5 * MS))) as w:
        # a <-> b first: c's port must see none of it (unicast is not flooded; ARP entries are static).
        ab = w.rtts("a", "b", 10)
        st = w.stats()
        assert st["segment"] is True and [p["ifname"] for p in st["ports"]] == ["rn0p0", "rn0p1", "rn0p2"]
        assert st["ports"][2]["downlink"]["packets_out"] == 0, st["ports"][2]
        assert st["ports"][1]["downlink"]["packets_out"] >= 10 and st["ports"][0]["downlink"]["packets_out"] >= 10
        assert st["forwarding"]["unicast"] >= 20 and st["forwarding"]["flooded"] == 0, st["forwarding"]
        medians = {("a", "b"): statistics.median(ab)}
        for src, dst in permutations(HOSTS, 2):
            if (src, dst) != ("a", "b"):
                medians[(src, dst)] = statistics.median(w.rtts(src, dst, 10))
        # Every echo and reply waits 5 ms in its sender's uplink: at least 10 ms; a stall-free machine adds
        # well under a few ms.
        for pair, m in medians.items():
            assert 9.9 <= m <= 16.0, (pair, m, medians)
        counters = w.engine.counters(w.topo, w.link)
        assert set(counters["ports"]) == set(HOSTS)
        assert counters["forward"]["configured_delay_ns"] == 5 * MS
        assert counters["reverse"]["sched_error_count"] >= 60
        assert all(c["uplink"]["rx_packets"] >= 20 for c in counters["ports"].values())


def test_broadcast_and_multicast_reach_both_other_hosts_and_never_the_sender():
    port, group, n = 7400, "239.255.0.1", 20
    with Wired(HOSTS, segment(forward=Direction(delay_ns=5 * MS))) as w:
        procs = w.receivers(["b", "c"], port, group, idle_s=1.5)
        w.send("a", port, n, "198.18.0.255", group)
        got = collect(procs)
        st = w.stats()
    for h in ("b", "c"):
        assert got[h] == {"198.18.0.255": n, group: n}, got
    # Each datagram crossed a's uplink once and was copied to the two other ports, never back to a: what a's
    # port delivered came from b and c (their IGMP reports for the group, flooded), not a's 40 datagrams.
    ports = st["ports"]
    assert st["forwarding"]["flooded"] >= 2 * n and ports[0]["uplink"]["packets_in"] >= 2 * n
    from_others = ports[1]["uplink"]["packets_in"] + ports[2]["uplink"]["packets_in"]
    assert ports[0]["downlink"]["packets_in"] <= from_others < n, ports
    assert st["ports"][1]["downlink"]["packets_out"] >= 2 * n and st["ports"][2]["downlink"]["packets_out"] >= 2 * n


@pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)")
def test_dds_with_multicast_discovery_delivers_to_both_subscribers(tmp_path):
    protocols = set(agent_version(str(AGENT)).get("protocols", []))
    if "dds" not in protocols:
        pytest.skip("roughnet-agent built without dds (make build)")
    n = 300
    wl = Workload(pattern="stream", protocol="dds", sender="a", receivers=("b", "c"), payload_bytes=256,
                  messages=n, rate_msgs_per_s=200, timeout_ns=90 * 1_000_000_000,
                  options={"multicast": True, "reliability": "reliable"})
    run = make_run(HOSTS, segment(forward=Direction(delay_ns=5 * MS)), wl)
    pf = Preflight(agent_path=AGENT, agent=agent_version(str(AGENT)), caps=None, engines={run.run_id: {0: "wire"}})
    art = tmp_path / run.run_id
    art.mkdir()
    rec = execute_run(run, pf, art)
    assert rec["status"] == "ok", (rec["failure_reason"], rec["stderr_tail"])
    assert rec["engine"] == "wire"
    per_rx = {r["host"]: r["metrics"] for r in rec["receivers"]}
    assert sorted(per_rx) == ["b", "c"]
    for h, m in per_rx.items():
        assert m["received"] == n and m["lost"] == 0, (h, m)
        # One uplink of 5 ms on the way: at least 5 ms one way.
        assert m["lat_actual_p50_us"] >= 5_000, (h, m["lat_actual_p50_us"])
    lc = rec["link_counters"]["0"]
    assert lc["engine"] == "wire" and lc["forwarding"]["flooded"] > 0  # multicast discovery crossed the wire
    assert set(lc["ports"]) == set(HOSTS)


# ---- drain on stop (a two-host link) --------------------------------------------------------------------


def _udp_burst_then_stop(delay_ms: int, n: int = 50, first_s: float = 30.0) -> tuple[dict, dict]:
    port = 7410
    link = Link(index=0, hosts=("a", "b"), forward=Direction(delay_ns=delay_ms * MS))
    with Wired(("a", "b"), link) as w:
        procs = w.receivers(["b"], port, "239.255.0.2", idle_s=1.0, first_s=first_s)
        w.send("a", port, n, w.topo.address("b", "a"))
        final = w.engine.stop(link)
        got = collect(procs)
    assert final is not None and final["type"] == "stats"
    return final, got


def test_sigterm_delivers_frames_already_queued():
    # 1 s of delay: when the wire is told to stop, the datagrams are still inside it; they still arrive.
    final, got = _udp_burst_then_stop(1000)
    stop = final["stop"]
    assert stop["held_at_signal"] >= 1, stop  # the drain had something to do (not a vacuous pass)
    assert stop["left_at_exit"] == 0 and stop["sent_while_draining"] >= stop["held_at_signal"], stop
    assert sum(got["b"].values()) == 50, got
    assert final["a_to_b"]["packets_out"] == final["a_to_b"]["packets_in"], final["a_to_b"]


def test_sigterm_does_not_wait_past_the_drain_limit():
    # 5 s of delay: nothing queued can leave within the 2 s limit, so the wire exits at once and says so.
    # The receiver waits 8 s for a first datagram (not 30): the wire has exited when stop() returns (within
    # the 2 s limit, after a send of well under a second), and nothing reaches b after that.
    final, got = _udp_burst_then_stop(5000, first_s=8.0)
    stop = final["stop"]
    assert stop["held_at_signal"] >= 50 and stop["left_at_exit"] == stop["held_at_signal"], stop
    assert stop["drain_ms"] <= stop["drain_limit_ms"] == 2000, stop
    assert got["b"] == {}, got


def test_control_socket_isolates_one_port():
    with Wired(HOSTS, segment()) as w:
        assert len(w.rtts("a", "c", 3)) == 3
        assert w.engine.control(w.link, {"cmd": "down", "port": 2})["type"] == "ok"
        assert w.rtts("a", "c", 3) == []  # c is cut off both ways
        assert len(w.rtts("a", "b", 3)) == 3  # the others still talk
        st = w.stats()
        assert st["ports"][2]["downlink"]["up"] is False and st["ports"][1]["downlink"]["up"] is True
        assert st["ports"][2]["downlink"]["drops"]["link_down"] >= 3
        assert w.engine.control(w.link, {"cmd": "up", "port": 2})["type"] == "ok"
        assert len(w.rtts("a", "c", 3)) == 3
        # A port number past the segment is refused with what was expected.
        with pytest.raises(Exception, match="expected 0 to 2"):
            w.engine.control(w.link, {"cmd": "down", "port": 3})
