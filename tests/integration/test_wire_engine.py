"""Fidelity of the wire engine through real runs (root): delay, no-reorder jitter, loss, loss bursts, rate,
half duplex and determinism, each with statistical bounds.

Runs go through ``runner.execute_run`` (topology, WireEngine, agents, counters, validity) where the agent
reports what is checked; loss bursts, half-duplex timing and determinism need which sequence numbers arrived
when, so those use the Python UDP probe of ``roughnet.calibrate`` on a topology with the WireEngine applied.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roughnet.binaries import agent_version, find_binary
from roughnet.calibrate import PROBE_PORT, loss_runs, run_probe
from roughnet.links.wire import WireEngine
from roughnet.run.runner import Preflight, execute_run
from roughnet.runspec import Direction, Host, Link, Run, Workload
from roughnet.topo import Ledger, Topology

from conftest import unique_run_id

WIRE = find_binary("roughnet-wire")
AGENT = find_binary("roughnet-agent")
Z999 = 3.2905

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(WIRE is None, reason="roughnet-wire is not built (make build)"),
    pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)"),
    # run.agents leaves each agent's stdout pipe for the garbage collector (an unclosed-file ResourceWarning
    # when runs execute in-process, as here); reported to its owner, not hidden elsewhere.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def make_run(link: Link, workload: Workload, seed: int = 1) -> Run:
    return Run(scenario="wire-fidelity", sweep_id="wire-fidelity-00000000", run_id=unique_run_id(), index=0,
               params={}, seed=seed, repeat=0, hosts=(Host("a"), Host("b")), links=(link,), workload=workload)


def execute(run: Run, tmp_path: Path) -> dict:
    pf = Preflight(agent_path=AGENT, agent=agent_version(str(AGENT)), caps=None, engines={run.run_id: {0: "wire"}})
    art = tmp_path / run.run_id
    art.mkdir()
    rec = execute_run(run, pf, art)
    assert rec["status"] == "ok", (rec["failure_reason"], rec["stderr_tail"])
    assert rec["engine"] == "wire"
    return rec


def stream(messages: int, rate: float, payload: int = 100, **kw) -> Workload:
    return Workload(pattern="stream", protocol="udp", sender="a", receivers=("b",), payload_bytes=payload,
                    messages=messages, rate_msgs_per_s=rate, timeout_ns=int((messages / rate + 30) * 1e9), **kw)


@pytest.mark.parametrize("threads", [1, 2])
def test_delay_10ms_one_way_p50_within_100us(tmp_path, threads):
    # The delay the wire adds is measured against the same path with no delay configured
    # (veth hops, AF_PACKET, the agents' own send/receive: tens of microseconds here, which
    # are the path's, not the emulated link's).
    base = execute(make_run(Link(index=0, hosts=("a", "b")), stream(2000, 500)), tmp_path)
    path_us = base["metrics"]["lat_actual_p50_us"]
    assert 0 < path_us < 1_000, path_us
    link = Link(index=0, hosts=("a", "b"), forward=Direction(delay_ns=10_000_000), wire_threads=threads)
    rec = execute(make_run(link, stream(2000, 500)), tmp_path)
    assert rec["link_counters"]["0"]["threads"] == threads
    m = rec["metrics"]
    assert m["received"] == 2000 and m["lost"] == 0
    added_us = m["lat_actual_p50_us"] - path_us
    assert abs(added_us - 10_000) <= 100, (m["lat_actual_p50_us"], path_us)
    fwd = rec["link_counters"]["0"]["forward"]
    assert fwd["configured_delay_ns"] == 10_000_000 and fwd["sched_error_count"] >= 2000
    assert fwd["drops_loss"] == 0 and fwd["drops_queue"] == 0


def test_jitter_without_reorder_never_reorders(tmp_path):
    link = Link(index=0, hosts=("a", "b"),
                forward=Direction(delay_ns=10_000_000, jitter_ns=5_000_000, jitter_dist="normal"))
    rec = execute(make_run(link, stream(2000, 1000)), tmp_path)
    m = rec["metrics"]
    assert m["received"] == 2000
    assert m["reordered"] == 0
    # The jitter is there (not a vacuous pass): p99 - p50 of a 5 ms normal is about 11.6 ms before the
    # no-reorder rule compresses it; a plain 10 ms line has a spread of well under 1 ms.
    assert m["lat_actual_p99_us"] - m["lat_actual_p50_us"] > 2_000


def test_loss_10_percent_over_100k_within_binomial_interval(tmp_path):
    n, p = 100_000, 0.10
    link = Link(index=0, hosts=("a", "b"), forward=Direction(loss=p))
    rec = execute(make_run(link, stream(n, 10_000, payload=64)), tmp_path)
    m = rec["metrics"]
    assert m["received"] + m["lost"] == n
    half = Z999 * math.sqrt(p * (1 - p) / n)
    assert abs(m["loss_ratio"] - p) <= half, (m["loss_ratio"], half)
    # Every message the receiver missed was dropped where a counter saw it: the link model, a full queue,
    # the kernel at the wire's socket, a failed send (wire or sender), the receiving host's UDP layer.
    # Those drops exceed the missed messages only by non-data frames among them (ARP, the 5 end markers),
    # and there are exactly as many of those as frames reached the wire beyond the messages sent.
    fwd = rec["link_counters"]["0"]["forward"]
    a, b = rec["tcp_counters"]["a"], rec["tcp_counters"]["b"]
    terms = {k: fwd[k] for k in ("drops_loss", "drops_queue", "drops_too_large", "drops_link_down", "held_packets",
                                 "rx_kernel_drops", "send_errors")}
    terms.update(sender_sndbuf=a["UdpSndbufErrors"], receiver_in_errors=b["UdpInErrors"],
                 receiver_no_ports=b["UdpNoPorts"])
    dropped = sum(terms.values())
    non_data = fwd["rx_packets"] + fwd["rx_kernel_drops"] + a["UdpSndbufErrors"] - m["sent"]
    assert m["sent"] == n and 0 <= non_data <= 20, (m["sent"], fwd["rx_packets"], non_data)
    assert 0 <= dropped - m["lost"] <= non_data, (m["lost"], terms, non_data)


def test_tcp_goodput_at_10mbit_within_5_percent(tmp_path):
    rate = 10_000_000
    link = Link(index=0, hosts=("a", "b"), forward=Direction(rate_bps=rate), reverse=Direction(rate_bps=rate))
    wl = Workload(pattern="bulk", protocol="tcp", sender="a", receivers=("b",), payload_bytes=1024,
                  duration_ns=5_000_000_000, timeout_ns=60_000_000_000)
    rec = execute(make_run(link, wl), tmp_path)
    want = rate * 1448 / 1514  # MSS 1448 (timestamps on) per 1514-byte Ethernet frame
    got = rec["metrics"]["throughput_bps"]
    assert abs(got - want) <= 0.05 * want, (got, want)


class WiredPair:
    """Two hosts on one wire link, for probes that need sequence numbers and arrival times."""

    def __init__(self, link: Link, seed: int = 1):
        self.run = make_run(link, stream(1, 1), seed=seed)
        self.topo = Topology(self.run, Ledger(self.run.run_id[:8], self.run.run_id), engines={0: "wire"})
        self.engine = WireEngine()

    def __enter__(self) -> "WiredPair":
        try:
            self.topo.build()
            self.engine.apply(self.topo, self.run.links[0])
        except BaseException:
            self.topo.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.topo.teardown()
        assert not self.topo.teardown_errors


def test_gilbert_elliott_mean_burst_within_10_percent():
    r = 0.3  # simple Gilbert (h = 0, k = 1): mean loss burst 1 / r = 3.33 frames
    link = Link(index=0, hosts=("a", "b"),
                forward=Direction(loss_model={"model": "gilbert_elliott", "p": 0.05, "r": r}))
    n = 20_000
    with WiredPair(link) as w:
        res = run_probe(w.topo, "a", "b", n, 4000, 100)
    runs = loss_runs(res["seqs"], n)
    assert len(runs) > 500, len(runs)  # about 857 expected
    mean = sum(runs) / len(runs)
    assert abs(mean - 1 / r) <= 0.10 / r, mean


def _lost(seed: int, n: int = 3000) -> set[int]:
    link = Link(index=0, hosts=("a", "b"), forward=Direction(loss=0.1))
    with WiredPair(link, seed=seed) as w:
        res = run_probe(w.topo, "a", "b", n, 2000, 100)
    return set(range(n)) - set(res["seqs"])


def test_same_seed_drops_the_same_sequence_numbers():
    first, second, other = _lost(7), _lost(7), _lost(8)
    assert 150 < len(first) < 450
    assert first == second
    assert first != other  # the seed matters (the check above is not vacuous)


def test_half_duplex_no_overlap_and_turnaround_respected():
    rate, turnaround_ns, payload = 1_000_000, 5_000_000, 458  # 500-byte frames: 4 ms on the medium
    frame = payload + 42
    ser_ns = frame * 8 * 1e9 / rate
    link = Link(index=0, hosts=("a", "b"), forward=Direction(rate_bps=rate), reverse=Direction(rate_bps=rate),
                half_duplex={"turnaround_ns": turnaround_ns})
    n, pps = 60, 60.0  # each side offers 60 % of the medium: the two directions contend
    with WiredPair(link) as w:
        t = w.topo
        py = [sys.executable, "-m", "roughnet.calibrate"]
        rxs = {}
        for dst, src in (("b", "a"), ("a", "b")):
            addr = t.address(dst, src)
            rxs[dst] = t.popen(dst, [*py, "probe-recv", "--bind", f"{addr}:{PROBE_PORT}", "--count", str(n),
                                     "--timeout", "30", "--linger", "3", "--times"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert '"ready"' in rxs[dst].stdout.readline()
        txs = [t.popen(src, [*py, "probe-send", "--to", f"{t.address(dst, src)}:{PROBE_PORT}", "--count", str(n),
                             "--rate", str(pps), "--size", str(payload)], stdout=subprocess.PIPE, text=True)
               for src, dst in (("a", "b"), ("b", "a"))]
        for tx in txs:
            tx.communicate(timeout=60)
        import json

        got = {dst: json.loads(p.communicate(timeout=60)[0].splitlines()[-1]) for dst, p in rxs.items()}
        stats = w.engine.stats(w.run.links[0])
    events = sorted([(ts, "a_to_b") for ts in got["b"]["arrivals_ns"]] + [(ts, "b_to_a") for ts in got["a"]["arrivals_ns"]])
    assert got["a"]["received"] > n // 2 and got["b"]["received"] > n // 2
    # Arrival = end of the frame's transmission (no delay configured).  Two frames cannot be closer than one
    # transmission, and frames of opposite directions not closer than transmission + turnaround; the receiving
    # side's wakeup noise is gone (kernel receive timestamps); the wire's own departure lateness (its scheduling
    # error at p99, which it reports) is allowed as slack, and the rare frame later than that (at most 1 in 50
    # pairs) is not counted against the medium.
    late_ns = 1000 * max(stats[d]["sched_error"]["p99_us"] for d in ("a_to_b", "b_to_a"))
    slack_ns = 500_000 + late_ns
    changes = same = bad = 0
    for (t0, d0), (t1, d1) in zip(events, events[1:]):
        gap = t1 - t0
        if d0 == d1:
            same += 1
            bad += gap < ser_ns - slack_ns
        else:
            changes += 1
            bad += gap < ser_ns + turnaround_ns - slack_ns
    assert bad <= max(1, (same + changes) // 50), (bad, same, changes, late_ns)
    assert changes >= 10, changes  # the directions did alternate
    assert stats["a_to_b"]["drops"]["overrun"] == 0
