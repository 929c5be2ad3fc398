"""The report's packet-analysis table and payload section (best payload range, drop rates)."""

from __future__ import annotations

import copy

import pytest

from roughnet.report import build_report, packets, payload
from roughnet.results import Store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PAYLOADS = ["1 KB", "4 KB", "16 KB", "64 KB"]


def _run(index, protocol, size, mean_us, lost=0, validity="valid", pcap=True):
    m = {"lat_mean_us": mean_us, "lat_p99_us": mean_us * 3, "lost": lost, "loss_ratio": lost / 100,
         "sent": 100, "received": 100 - lost, "tcp_retrans_segs": 5, "tcp_out_segs": 95}
    if pcap:
        m.update({"pcap_packets": 400, "pcap_tcp_segments": 200, "pcap_tcp_retrans": 20, "pcap_tcp_retrans_ratio": 0.1,
                  "pcap_dup_acks": 7, "pcap_zero_window": 0, "pcap_udp_datagrams": 0, "pcap_ip_fragments": 0,
                  "pcap_segments_per_message": 2.0, "pcap_capture_drops": 0, "pcap_sender_data_packets": 200})
    return {"index": index, "run_id": f"{index:012x}", "status": "ok", "validity": validity, "pattern": "stream",
            "protocol": protocol, "params": {"protocol": protocol, "payload": size}, "metrics": m,
            "link_counters": {"0": {"engine": "kernel",
                                    "forward": {"drops_loss": 9, "drops_queue": 1, "seen_at_loss_hook": 100},
                                    "reverse": {"drops_loss": 0, "drops_queue": 0, "seen_at_loss_hook": 0}}}}


AXES = {"protocol": ["mqtt", "kafka"], "payload": PAYLOADS}


def test_best_range_is_lowest_mean_delay_widened_within_tolerance():
    # mean delay 1300, 1000, 1200, 3840 µs -> best 4 KB; 1 KB (30 % above) out, 16 KB (20 % above) in;
    # per KB (1300, 250, 75, 60 µs/KB) the largest payload is cheapest, named separately
    mqtt = [_run(i, "mqtt", p, mean) for i, (p, mean) in enumerate(zip(PAYLOADS, [1300, 1000, 1200, 3840]))]
    (g,) = payload.groups(AXES, mqtt)
    b = payload.best_range(g)
    assert [p.payload for p in b.range] == ["4 KB", "16 KB"]
    assert b.best.payload == "4 KB" and b.cheapest.payload == "64 KB"
    text = b.sentence()
    assert text.startswith("protocol=mqtt: payloads of 4 KB to 16 KB did best (lowest mean delay: 4 KB")
    assert "lowest delay per KB was at 64 KB" in text
    # a tighter tolerance keeps only the best one; a looser one reaches 1 KB but not past the 3.8 ms point
    assert [p.payload for p in payload.best_range(g, tolerance=0.1).range] == ["4 KB"]
    assert [p.payload for p in payload.best_range(g, tolerance=0.5).range] == ["1 KB", "4 KB", "16 KB"]


def test_runs_that_lost_messages_or_are_invalid_do_not_count():
    runs = [_run(0, "kafka", "1 KB", 2000), _run(1, "kafka", "4 KB", 1000),
            _run(2, "kafka", "16 KB", 10, lost=3), _run(3, "kafka", "64 KB", 10, validity="invalid")]
    (g,) = payload.groups(AXES, runs)
    b = payload.best_range(g)
    assert b.best.payload == "4 KB" and b.cheapest.payload == "4 KB"  # the faster runs do not count
    assert [p.payload for p in b.excluded] == ["16 KB", "64 KB"]
    assert "not counted (messages lost or invalid): 16 KB, 64 KB" in b.sentence()
    (g2,) = payload.groups(AXES, [_run(0, "kafka", "1 KB", 10, lost=1)])
    assert "no payload delivered every message" in payload.best_range(g2).sentence()


def test_three_drop_rates_and_repeats_averaged():
    a, b = _run(0, "mqtt", "4 KB", 1000), _run(1, "mqtt", "4 KB", 3000)
    b["metrics"]["pcap_tcp_retrans_ratio"] = 0.2
    (g,) = payload.groups(AXES, [a, b])
    (p,) = g.points
    assert p.runs == 2 and p.delay_mean_us == pytest.approx(2000)
    assert p.link_drop_rate == pytest.approx(0.1)
    assert p.retrans_rate == pytest.approx(0.15) and p.retrans_source == "pcap"
    (g,) = payload.groups(AXES, [_run(0, "mqtt", "4 KB", 1000, pcap=False)])
    assert g.points[0].retrans_rate == pytest.approx(5 / 100) and g.points[0].retrans_source == "kernel"


def test_section_only_when_payload_is_the_x_axis():
    runs = [_run(i, proto, p, 1000 + i) for i, (proto, p) in enumerate((x, y) for x in AXES["protocol"] for y in PAYLOADS)]
    html, png = payload.section(AXES, runs, "payload")
    assert png.startswith(PNG_MAGIC)
    assert html.count("<li>") == 2 and "protocol=mqtt:" in html and "protocol=kafka:" in html
    assert html.index("protocol=mqtt") < html.index("protocol=kafka")  # sweep order
    assert payload.section(AXES, runs, "protocol") == ("", None)
    assert payload.section({"payload": ["1 KB"]}, runs, "payload") == ("", None)


def test_packet_table_rows_only_for_captured_runs():
    runs = [_run(0, "mqtt", "1 KB", 10), _run(1, "mqtt", "4 KB", 10, pcap=False)]
    headers, rows = packets.table(runs, ["protocol", "payload"])
    assert len(rows) == 1
    row = rows[0]
    assert row["retransmissions"] == "20" and row["retrans. share"] == "10.0 %" and row["dup ACKs"] == "7"
    assert row["sender held"] == "-"  # an agent that does not report it
    runs[0]["metrics"]["sched_held_fraction"] = 0.125
    assert packets.table(runs, ["protocol"])[1][0]["sender held"] == "12.5 %"
    assert headers[:3] == ["#", "protocol", "payload"]
    assert "Packet analysis (1 captured run(s))" in packets.section(runs, ["protocol", "payload"])
    assert packets.section(runs[1:], ["protocol"]) == ""


def test_html_report_of_a_payload_sweep_through_the_store(tmp_path):
    runs = [_run(i, proto, p, 1000 * (j + 1)) for i, (proto, j, p) in
            enumerate((x, j, y) for x in AXES["protocol"] for j, y in enumerate(PAYLOADS))]
    store = Store(tmp_path / "res")
    sweep = {"scenario": "v2v-payload", "sweep_id": "v2v-payload-00000001", "source": "x.toml", "axes": AXES,
             "runs": [], "report": {"x": "payload", "lines": "protocol"}, "description": ""}
    try:
        store.begin_sweep(_sweep_obj(sweep, len(runs)))
        for r in runs:
            rec = copy.deepcopy(r)
            rec.update({"sweep_id": sweep["sweep_id"], "scenario": "v2v-payload", "repeat": 0, "seed": 1,
                        "failure_reason": None, "stderr_tail": None, "started_at": None, "duration_s": 1.0,
                        "engine": "kernel", "versions": {}, "run": {}, "validity_reasons": [], "receivers": [],
                        "histograms": [], "points": None, "tcp_counters": {}})
            store.record_run(rec)
        page = build_report(store, sweep["sweep_id"], tmp_path / "rep").read_text()
    finally:
        store.close()
    assert "Best payload range" in page and "Packet analysis (8 captured run(s))" in page
    assert (tmp_path / "rep" / "payload.png").read_bytes().startswith(PNG_MAGIC)
    # mean delay = 1, 2, 3, 4 ms at 1, 4, 16, 64 KB: 1 KB is best for both protocols, 64 KB cheapest per KB
    assert page.count("payloads of 1 KB did best") == 2
    assert page.count("lowest delay per KB was at 64 KB") == 2


def _sweep_obj(d, n):
    from roughnet.runspec import Sweep

    return Sweep(scenario=d["scenario"], sweep_id=d["sweep_id"], source=d["source"], axes=d["axes"], runs=(),
                 report=d["report"], description=d["description"])
