"""Run-record shaping and the validity verdict (no root): real /proc captures, agent-like results."""

from pathlib import Path

import pytest

from roughnet.run import collect
from roughnet.run.counters import counter_delta, parse_proc_table

FIX = Path(__file__).parent / "fixtures" / "proc"


def test_parse_proc_tables_from_real_capture():
    tables = parse_proc_table((FIX / "snmp_netstat_root.txt").read_text())
    assert {"Ip", "Tcp", "Udp", "TcpExt"} <= set(tables)
    tcp = tables["Tcp"]
    assert tcp["OutSegs"] > 0 and "RetransSegs" in tcp
    assert "TCPLostRetransmit" in tables["TcpExt"]


def test_fresh_namespace_counters_are_zero():
    tables = parse_proc_table((FIX / "snmp_netstat_idle_ns.txt").read_text())
    assert tables["Tcp"]["OutSegs"] == 0 and tables["Tcp"]["RetransSegs"] == 0


def test_counter_delta():
    assert counter_delta({"A": 3, "B": 1}, {"A": 10, "B": 1}) == {"A": 7, "B": 0}


def _lat(p50, p99=None):
    return {"count": 100, "min_us": p50 / 2, "mean_us": p50, "std_us": 1.0, "p50_us": p50, "p90_us": p50,
            "p99_us": p99 or p50 * 2, "p999_us": p50 * 3, "p9999_us": p50 * 3, "p999999_us": p50 * 3,
            "max_us": p50 * 3, "hdr": "HISTFAAAx"}


def _rx(received=990, lost=10, end="end_marker", complete=False, p50=100.0):
    return {"type": "result", "role": "receiver", "expected": received + lost, "received": received,
            "lost": lost, "duplicates": 0, "reordered": 0, "bytes": received * 1024,
            "throughput_bps": 8e6, "end_reason": end, "complete": complete,
            "latency_intended": _lat(p50), "latency_actual": _lat(p50 - 1)}


def test_receiver_metrics_and_loss_ratio():
    m = collect.receiver_metrics("stream", _rx(990, 10))
    assert m["loss_ratio"] == pytest.approx(0.01)
    assert m["lat_p50_us"] == 100.0 and m["lat_actual_p50_us"] == 99.0


def test_aggregate_two_receivers_sums_counts_and_keeps_worst_latency():
    a = collect.receiver_metrics("stream", _rx(990, 10, p50=100.0))
    b = collect.receiver_metrics("stream", _rx(1000, 0, p50=300.0))
    m = collect.aggregate("stream", [a, b], {"sent": 1000, "schedule": {"behind_max_us": 5.0, "late_fraction": 0.0}})
    assert m["received"] == 1990 and m["lost"] == 10
    assert m["lat_p50_us"] == 300.0
    assert m["sent"] == 1000 and m["sched_behind_max_us"] == 5.0


@pytest.mark.parametrize(
    "rx,sched,cpu,expected",
    [
        (_rx(end="complete", complete=True), {"late_fraction": 0.0, "behind_max_us": 10}, {"saturated_fraction": 0}, "valid"),
        (_rx(end="timeout"), {"late_fraction": 0.0, "behind_max_us": 10}, {"saturated_fraction": 0}, "invalid"),
        (_rx(end="complete", complete=True), {"late_fraction": 0.2, "behind_max_us": 9000}, {"saturated_fraction": 0}, "suspect"),
        (_rx(end="complete", complete=True), {"late_fraction": 0.0, "behind_max_us": 10}, {"saturated_fraction": 0.5, "max": 1.0}, "suspect"),
        # UDP with loss ends by end marker, incomplete but properly ended: the loss is a result, not a flaw
        (_rx(end="end_marker"), {"late_fraction": 0.0, "behind_max_us": 10}, {"saturated_fraction": 0}, "valid"),
    ],
)
def test_verdict_matrix(rx, sched, cpu, expected):
    v, reasons = collect.verdict("stream", [("b", rx)], {"schedule": sched}, cpu)
    assert v == expected
    assert (v == "valid") == (reasons == [])
    for r in reasons:
        assert r and r[0].isalpha()


def test_verdict_reason_names_receiver_and_counts():
    v, reasons = collect.verdict("stream", [("b", _rx(500, 500, end="timeout"))], {}, {})
    assert v == "invalid" and "receiver b" in reasons[0] and "500/1000" in reasons[0]


@pytest.mark.parametrize("end", ["timeout", "signal"])
def test_links_that_lose_by_distance_excuse_a_receiver_that_never_heard_the_end(end):
    """A fleet receiver out of range when its sender ended ends at its own timeout, or is stopped by the run's
    budget (a host agent's stream receivers' own timeout also covers the fleet's readiness: run.timeline
    plan_flows): with distance_loss neither is a reason, without it both are."""
    rx = [("b", _rx(500, 500, end=end)), ("c", _rx(end="complete", complete=True))]
    assert collect.verdict("stream", rx, {}, {}, distance_loss=True) == ("valid", [])
    v, reasons = collect.verdict("stream", rx, {}, {})
    assert v == "invalid" and reasons == ["receiver b incomplete at timeout (500/1000 messages)"]


def test_a_fleets_incomplete_receivers_are_named_once_per_host_and_at_most_a_dozen():
    """A host agent's receivers: one per flow (99 at 100 cars). Each host is named once with its flows' counts, and
    the list stops at MAX_RECEIVER_REASONS hosts, saying how many more."""
    rx = [(f"c{h}", _rx(500, 500, end="timeout")) for h in range(20) for _ in range(3)]
    v, reasons = collect.verdict("stream", rx, {}, {})
    assert v == "invalid"
    assert reasons[0] == "receiver c0 incomplete at timeout in 3 flows (1500/3000 messages)"
    assert len(reasons) == collect.MAX_RECEIVER_REASONS + 1
    assert reasons[-1] == f"and {20 - collect.MAX_RECEIVER_REASONS} more receivers incomplete at timeout"


def test_a_producer_that_gave_up_explains_an_incomplete_run():
    """Kafka's sender reports what its producer still held when the flush at the end timed out."""
    tx = {"sent": 1000, "unacked": 412}
    v, reasons = collect.verdict("stream", [("b", _rx(500, 500, end="timeout"))], tx, {})
    assert v == "invalid" and "gave up on 412 message(s)" in reasons[1]
    assert collect.aggregate("stream", [collect.receiver_metrics("stream", _rx(500, 500))], tx)["sender_unacked"] == 412
    # all delivered (only acknowledgements missing), or nothing held back: no reason
    complete = _rx(end="complete", complete=True)
    assert collect.verdict("stream", [("b", complete)], tx, {}) == ("valid", [])
    v, reasons = collect.verdict("stream", [("b", _rx(500, 500, end="timeout"))], {"unacked": 0}, {})
    assert len(reasons) == 1
    assert "sender_unacked" not in collect.aggregate("stream", [], {"sent": 1})


def test_link_drop_metrics():
    m = collect.link_drop_metrics({0: {"forward": {"drops_loss": 7, "drops_queue": 2}, "reverse": {"drops_loss": 1}}})
    assert m == {"link_drops": 10, "link_drops_loss": 8, "link_drops_queue": 2}
    assert collect.link_drop_metrics({})["link_drops"] is None


def test_histograms_extracted_per_kind():
    hs = collect.histograms("b", _rx())
    assert {h["kind"] for h in hs} == {"latency_intended", "latency_actual"}
    assert all(h["host"] == "b" for h in hs)


def test_udp_rcvbuf_drops_on_a_receiving_host_make_a_udp_run_suspect():
    from roughnet.run.counters import UDP_KEYS

    tables = parse_proc_table((FIX / "snmp_netstat_root.txt").read_text())
    assert set(UDP_KEYS) <= set(tables["Udp"])  # the kept names are the kernel's
    ns = {"a": {"UdpRcvbufErrors": 9}, "b": {"UdpRcvbufErrors": 3, "UdpInErrors": 3}}
    assert collect.udp_metrics(ns) == {"udp_rcvbuf_errors": 12}
    rx = [("b", {"end_reason": "end_marker", "complete": True})]
    validity, why = collect.verdict("stream", rx, {}, {}, None, "udp", ns)
    assert validity == "suspect" and len(why) == 1  # host a is the sender: its drops are not the receiver's
    assert why[0].startswith("receiver b:") and "3 datagram(s)" in why[0]
    # Protocols that recover pay them as retransmissions: recorded, not a verdict.
    assert collect.verdict("stream", rx, {}, {}, None, "zenoh", ns) == ("valid", [])
    assert collect.verdict("stream", rx, {}, {}, None, "udp", {"b": {"UdpRcvbufErrors": 0}}) == ("valid", [])


def test_a_sender_held_back_by_its_protocol_is_not_suspect():
    # Zenoh reliable over 10 % drop: the publisher blocks, so 7 % of sends leave > 1 ms late,
    # but each only after the previous send returned late: the protocol's doing.
    held = {"late_fraction": 0.07, "behind_max_us": 43_900.0, "own_late_fraction": 0.0,
            "own_behind_max_us": 180.0, "held_fraction": 0.07, "held_s": 0.9}
    assert collect.schedule_reasons(held) == []
    own = dict(held, own_late_fraction=0.05, own_behind_max_us=12_000.0)
    (reason,) = collect.schedule_reasons(own)
    assert "5.0 %" in reason and "after the previous send had returned" in reason and "12.0 ms" in reason
    # An older agent's result (whole lag only) is judged on the whole lag.
    (old,) = collect.schedule_reasons({"late_fraction": 0.07, "behind_max_us": 43_900.0})
    assert "7.0 %" in old and "after" not in old
    assert collect.verdict("stream", [], {"schedule": held}, {}) == ("valid", [])
    m = collect.aggregate("stream", [], {"sent": 10, "schedule": held})
    assert m["sched_held_fraction"] == 0.07 and m["sched_own_late_fraction"] == 0.0
