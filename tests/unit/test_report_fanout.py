"""The fan-out table: one row per subscriber, only for runs with more than one."""

from roughnet.report import fanout


def _run(index, receivers, params=None):
    return {"index": index, "params": params or {"n": index}, "receivers": receivers}


def _rx(host, received, lost, p50):
    return {"host": host, "metrics": {"received": received, "lost": lost, "loss_ratio": lost / (received + lost),
                                      "lat_p50_us": p50, "lat_p99_us": p50 * 3, "throughput_bps": 4.1e6}}


def test_rows_only_for_runs_with_several_receivers_one_per_subscriber():
    runs = [_run(0, [_rx("b", 300, 0, 20.0)]),
            _run(1, [_rx("b", 300, 0, 20.0), _rx("c", 290, 10, 1500.0), _rx("d", 300, 0, 25.0)])]
    headers, rows = fanout.table(runs, ["n"])
    assert headers[:3] == ["#", "n", "subscriber"]
    assert [r["subscriber"] for r in rows] == ["b", "c", "d"]
    assert all(r["#"] == "1" for r in rows)
    c = rows[1]
    assert c["lost"] == "10" and c["latency p50"] == "1.50 ms"
    assert "3.3" in c["message loss"]


def test_no_section_without_fanout():
    assert fanout.section([_run(0, [_rx("b", 1, 0, 5.0)])], ["n"]) == ""
    html = fanout.section([_run(0, [_rx("b", 1, 0, 5.0), _rx("c", 1, 0, 6.0)])], ["n"])
    assert "Fan-out" in html and html.count("<tr>") == 3
