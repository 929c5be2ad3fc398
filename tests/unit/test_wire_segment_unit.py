"""The wire engine on a shared segment, without namespaces: engine choice, and the counters of a real segment
stats line (tests/unit/fixtures/wire_segment_stats.json: roughnet-wire serving 3 hosts, forward 2 ms + 10 %
loss, reverse 1 ms, pings a->b and c->a, 20 broadcasts from a, then SIGTERM; captured with the helpers of
tests/integration/test_wire_segment.py)."""

from __future__ import annotations

import json
from pathlib import Path

from roughnet.links import Capabilities, choose_engines
from roughnet.links.wire import counters_from_stats
from roughnet.run import collect
from roughnet.runspec import Direction, Link

FIXTURES = Path(__file__).parent / "fixtures"
MS = 1_000_000


def caps(**kw) -> Capabilities:
    base = dict(root=True, netns=True, netem=False, tbf=True, htb=True, nft=True, wire=True, notes={})
    base.update(kw)
    return Capabilities(**base)


def test_auto_picks_wire_for_a_segment_that_needs_delay():
    seg = Link(index=0, hosts=("a", "b", "c"), forward=Direction(delay_ns=5 * MS))
    assert choose_engines([seg], caps()) == {0: "wire"}
    # Rate and loss only: the kernel engine still does it (no reason to relay).
    plain = Link(index=1, hosts=("a", "b", "c"), forward=Direction(rate_bps=10_000_000, loss=0.01))
    assert choose_engines([plain], caps()) == {1: "kernel"}
    explicit = Link(index=2, hosts=("a", "b", "c", "d"), engine="wire")
    assert choose_engines([explicit], caps()) == {2: "wire"}


def _stats() -> dict:
    return json.loads((FIXTURES / "wire_segment_stats.json").read_text())


def test_segment_counters_from_a_real_stats_line():
    stats = _stats()
    config = {"a_to_b": {"delay_ns": 2 * MS}, "b_to_a": {"delay_ns": MS}}
    c = counters_from_stats(stats, config, ("a", "b", "c"))
    assert stats["segment"] is True and c["engine"] == "wire"
    fwd, rev = c["forward"], c["reverse"]
    # forward = every uplink together, reverse = every downlink together; each port's own under its host.
    assert sorted(c["ports"]) == ["a", "b", "c"]
    ports = c["ports"].values()
    assert fwd["rx_packets"] == stats["a_to_b"]["packets_in"] == sum(p["uplink"]["rx_packets"] for p in ports)
    assert rev["tx_packets"] == stats["b_to_a"]["packets_out"] == sum(p["downlink"]["tx_packets"] for p in ports)
    assert fwd["drops_loss"] == stats["a_to_b"]["drops"]["loss"] > 0
    assert rev["drops_loss"] == 0
    # Departures are downlink departures: the scheduling error is under reverse (and per port).
    assert rev["sched_error_count"] == stats["b_to_a"]["sched_error"]["count"] > 0
    assert fwd["sched_error_count"] == 0
    assert sum(p["downlink"]["sched_error_count"] for p in c["ports"].values()) == rev["sched_error_count"]
    assert c["ports"]["a"]["uplink"]["configured_delay_ns"] == 2 * MS
    assert c["ports"]["a"]["downlink"]["configured_delay_ns"] == MS
    f = c["forwarding"]
    assert f["flooded"] >= 20 and f["unicast"] > 0
    assert f["copies"] == f["unicast"] + 2 * f["flooded"]
    # The collector's link drops count each frame once (the per-port breakdown is not added again).
    m = collect.link_drop_metrics({0: c})
    assert m["link_drops_loss"] == fwd["drops_loss"]
    # The validity verdict judges a segment's lateness on its departures: this capture's p99 was 1.07 ms,
    # past the 1 ms limit of a link with 1-2 ms of delay.
    reasons = collect.wire_reasons({0: c})
    assert len(reasons) == 1 and "link 0 reverse" in reasons[0], reasons


def test_segment_stats_line_carries_the_drain_report():
    stop = _stats()["stop"]
    assert stop["left_at_exit"] == 0 and stop["drain_limit_ms"] == 2000
    assert set(stop) == {"held_at_signal", "sent_while_draining", "left_at_exit", "drain_ms", "drain_limit_ms"}


def test_two_host_counters_have_no_ports():
    stats = json.loads((FIXTURES / "wire_stats.json").read_text())
    c = counters_from_stats(stats, {"a_to_b": {}, "b_to_a": {}}, ("a", "b"))
    assert "ports" not in c and "forwarding" not in c
