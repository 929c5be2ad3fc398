"""S1's efficiency tables (report.efficiency) and the spec rule that lets one file sweep UDP streams against
TCP bulk (bulk accepts rate = "max")."""

from __future__ import annotations

import pytest

from roughnet.plan import sweep_from_scenario
from roughnet.report import efficiency
from roughnet.report.html import render
from roughnet.spec import ScenarioError, loads


def _run(index: int, proto: str, pattern: str, link: tuple[str, float, int], size: int, tp: float,
         sent: int | None = None, received: int | None = None, lost: int = 0, status: str = "ok") -> dict:
    name, rate, delay_ns = link
    return {
        "index": index, "run_id": f"r{index:011d}", "status": status, "validity": "valid", "pattern": pattern,
        "protocol": proto, "params": {"link": name, "protocol": proto, "size": f"{size} B"},
        "metrics": {"throughput_bps": tp, "bytes": int(tp * 3 / 8), "sent": sent, "received": received, "lost": lost,
                    "loss_ratio": (lost / (lost + received)) if received is not None else None},
        "run": {"links": [{"forward": {"rate_bps": rate, "delay_ns": delay_ns}}],
                "workload": {"payload_bytes": size, "duration_ns": 3_000_000_000}},
    }  # fmt: skip


L5 = ("5M-2ms", 5e6, 2_000_000)
L1G = ("1G-0.5us", 1e9, 500)


def test_efficiency_is_throughput_over_the_links_rate():
    runs = [_run(0, "tcp", "bulk", L5, 1436, 4.8e6), _run(1, "udp", "stream", L1G, 1024, 2.5e8, 3000, 2900, 100)]
    assert efficiency.efficiency(runs[0]) == pytest.approx(0.96)
    assert efficiency.efficiency(runs[1]) == pytest.approx(0.25)
    no_rate = _run(2, "tcp", "bulk", L5, 1436, 4.8e6)
    no_rate["run"]["links"][0]["forward"]["rate_bps"] = None
    assert efficiency.efficiency(no_rate) is None


def test_tables_are_shaped_like_the_originals():
    runs = [
        _run(0, "tcp", "bulk", L5, 1436, 4.8e6),
        _run(1, "tcp", "bulk", L1G, 1436, 9.0e8),
        _run(2, "udp", "stream", L5, 1024, 4.1e6, sent=1500, received=1500),
        _run(3, "udp", "stream", L1G, 1436, 5.7e6, sent=1500, received=1400, lost=100),
        _run(4, "udp", "stream", L1G, 1436, 0.0, status="failed"),  # failed runs are left out
    ]
    t = efficiency.tables(runs, ["link", "protocol", "size"])
    assert list(t) == ["tcp", "udp"]
    headers, rows = t["tcp"]
    assert headers == ["#", "link", "link rate", "delay", "bytes received", "throughput", "efficiency", "validity"]
    assert [r["efficiency"] for r in rows] == ["0.960", "0.900"]
    assert [r["delay"] for r in rows] == ["2 ms", "500 ns"]
    headers, rows = t["udp"]
    assert headers == ["#", "link", "size", "link rate", "delay", "Tx packets", "Tx bytes", "Tx rate",
                       "packets received", "Rx rate", "loss", "efficiency", "validity"]
    assert len(rows) == 2
    assert rows[0]["Tx bytes"] == "1,536,000" and rows[0]["Tx rate"] == "4.10 Mbit/s"
    assert rows[1]["packets received"] == "1,400" and rows[1]["loss"] == "6.67 %"
    assert rows[1]["efficiency"] == "0.006"


def test_section_only_when_the_link_setting_varies(tmp_path):
    one_link = [_run(0, "tcp", "bulk", L5, 1436, 4.8e6), _run(1, "udp", "bulk", L5, 1436, 4.7e6, 100, 100)]
    assert efficiency.section(one_link, ["protocol"]) == ""
    both = [*one_link, _run(2, "tcp", "bulk", L1G, 1436, 9e8)]
    html = efficiency.section(both, ["link", "protocol"])
    assert "Link efficiency" in html and html.count("<table>") == 2
    # through the page: the tables appear in the report
    sweep = {"sweep_id": "s1-00000000", "scenario": "s1", "axes": {"link": ["5M-2ms", "1G-0.5us"],
             "protocol": ["tcp", "udp"]}, "report": {}}  # fmt: skip
    page = render(sweep, both, [], tmp_path).read_text()
    assert "Link efficiency (throughput / link rate)" in page


BULK = """\
[scenario]
name = "t"

[[host]]
name = "a"
[[host]]
name = "b"

[[link]]
between = ["a", "b"]
rate = "10 Mbit/s"

[workload]
pattern = "bulk"
protocol = "tcp"
from = "a"
to = ["b"]
payload = "1 KiB"
duration = "2 s"
"""


def test_bulk_accepts_rate_max_only():
    sweep_from_scenario(loads(BULK + 'rate = "max"\n', "bulk.toml"), "bulk.toml")
    with pytest.raises(ScenarioError) as info:
        sweep_from_scenario(loads(BULK + 'rate = "100 msg/s"\n', "bulk.toml"), "bulk.toml")
    assert info.value.problems[0].path == "workload.rate"
    assert 'not used by pattern "bulk"' in info.value.problems[0].problem


def test_s1_file_sweeps_tcp_bulk_and_udp_streams():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scenarios" / "tcp-udp-link.toml"
    sweep = sweep_from_scenario(loads(path.read_text(), str(path)), str(path))
    tcp = [r for r in sweep.runs if r.workload.protocol == "tcp"]
    udp = [r for r in sweep.runs if r.workload.protocol == "udp"]
    assert tcp and all(r.workload.pattern == "bulk" and r.workload.rate_msgs_per_s is None for r in tcp)
    streams = [r for r in udp if r.workload.pattern == "stream"]
    assert {r.workload.rate_msgs_per_s for r in streams} == {250.0, 500.0, 10000.0}
    assert {r.workload.payload_bytes for r in udp} == {1024, 1436}
    assert len({r.params["link"] for r in streams}) == 4
