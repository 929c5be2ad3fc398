"""The report of timeline runs: the Timeline section per run (plot, workloads, events, recovery) and the CLI
summary's per-workload block and recovery lines."""

from __future__ import annotations

import copy
import re

import pytest
from synthtimeline import Sweep, record

from roughnet.report import build_report, recovery_lines, summary_rows, workload_rows
from roughnet.report import timeline as tlr
from roughnet.results import Store

SWEEP = "outage-0a1b2c3d"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def store(tmp_path):
    recs = [record(SWEEP, "aaaaaaaaaaaa", 0, params={"qos": 1}),
            record(SWEEP, "bbbbbbbbbbbb", 1, broken=True, params={"qos": 0}),
            record(SWEEP, "cccccccccccc", 2, single=True, params={"qos": 2})]
    s = Store(tmp_path / "res")
    s.begin_sweep(Sweep(SWEEP, len(recs), axes={"qos": [1, 0, 2]}))
    for rec in recs:
        s.record_run(copy.deepcopy(rec))
    yield s
    s.close()


def _section(page: str, run_index: int) -> str:
    start = page.index(f"<h2>Timeline of run {run_index}")
    nxt = page.find("<h2>", start + 4)
    return page[start:nxt]


def test_html_has_a_timeline_section_per_run(store, tmp_path):
    out = tmp_path / "report"
    (out).mkdir()
    (out / "timeline-gone.png").write_bytes(b"old")
    path = build_report(store, SWEEP, out)
    page = path.read_text()
    for i, rid in enumerate(["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]):
        assert f"<h2>Timeline of run {i} (qos=" in page
        png = out / f"timeline-{rid}.png"
        assert png.read_bytes().startswith(PNG_MAGIC)
    assert not (out / "timeline-gone.png").exists()
    first = _section(page, 0)
    assert first.count("<img") == 1 and "data:image/png;base64," in first
    # workloads: two, so a table, background marked, the bulk workload suspect
    assert "<h3>Workloads</h3>" in first
    assert "bulk (background)" in first and "pub1, pub2 → sub" in first
    assert re.search(r'<tr class="suspect"><td>bulk \(background\)', first)
    # events: planned time, action, target, took effect, error (escaped, the row marked)
    assert "<h3>Events</h3>" in first
    assert "<td>kill</td><td>service mosquitto</td><td>SIGKILL</td><td>10.002 s</td>" in first
    assert re.search(r'<tr class="invalid"><td class="num">2</td><td>18.000 s</td><td>isolate</td>', first)
    assert "RuntimeError: nft &lt;failed&gt;" in first
    # recovery per fault and flow, promise kept
    assert "<h3>Recovery</h3>" in first
    assert first.count("#0 kill service mosquitto") == 2
    assert "control: pub1 → sub" in first and "control: pub2 → sub" in first
    assert "5.31 s" in first and "✓ kept" in first and "MQTT QoS 1" in first
    assert 'class="broken"' not in first
    # the broken run: red and bold
    second = _section(page, 1)
    assert second.count('<b class="broken">✗ broken</b>') == 2
    assert second.count('<tr class="invalid">') == 3  # two broken flows, one failed event
    assert ".broken {" in page
    # one workload: no workloads table, still plot, events and recovery
    third = _section(page, 2)
    assert "<h3>Workloads</h3>" not in third and "<h3>Recovery</h3>" in third and "<img" in third


def test_a_sweep_without_timelines_has_no_section(tmp_path):
    from test_report import records_fixture

    with Store(tmp_path / "res") as s:
        sweep, records = records_fixture.load()[0]
        s.begin_sweep(sweep)
        for rec in records:
            s.record_run(copy.deepcopy(rec))
        page = build_report(s, sweep.sweep_id, tmp_path / "out").read_text()
        assert "Timeline of" not in page
        assert not list((tmp_path / "out").glob("timeline-*.png"))
        assert workload_rows(s, sweep.sweep_id) == [] and recovery_lines(s, sweep.sweep_id) == []


def test_series_summed_per_workload(store):
    tl = store.timelines(SWEEP)["aaaaaaaaaaaa"]
    per = tlr.series_by_workload(tl)
    assert list(per) == ["control", "bulk"]
    assert len(per["control"]) == 20
    assert per["control"][0]["delivered"] == 200 and per["control"][0]["flows"] == 2
    assert per["control"][12]["delivered"] == 0  # the outage
    assert per["bulk"][0]["sent"] == 0 and per["bulk"][6]["sent"] == 40


def test_a_failing_plot_keeps_the_tables(store, tmp_path, monkeypatch):
    import roughnet.timeline.plot as plot

    def broken(*a, **k):
        raise ValueError("no axis")

    monkeypatch.setattr(plot, "plot_timeline", broken)
    page = build_report(store, SWEEP, tmp_path / "r").read_text()
    assert "The timeline plot could not be drawn: no axis" in page and "<h3>Recovery</h3>" in page


def test_summary_workload_rows_and_recovery_lines(store):
    rows = workload_rows(store, SWEEP)
    assert [(r["#"], r["workload"]) for r in rows] == [("0", "control"), ("0", "bulk (bg)"),
                                                       ("1", "control"), ("1", "bulk (bg)")]  # run 2: one workload
    assert len({tuple(r) for r in rows}) == 1  # same keys in every row
    assert rows[0]["senders → receivers"] == "pub1,pub2 → sub" and rows[0]["protocol"] == "mqtt"
    assert rows[1]["validity"] == "⚠ suspect"
    assert "latency p99" in rows[0] and "throughput" in rows[0]
    lines = recovery_lines(store, SWEEP)
    assert len(lines) == 3  # one fault per run
    text, broken = lines[0]
    assert not broken
    assert text.startswith("run 0 #0 kill service mosquitto 10.001–15.300 s, 2 flows: outage ≤ 5.31 s, back in ≤ 1 s")
    assert "lost 0, dup 6" in text and "backlog 1,000" in text and text.endswith("MQTT QoS 1 kept")
    text, broken = lines[1]
    assert broken and "lost 1,000" in text and text.endswith("MQTT QoS 1 BROKEN (2 of 2 flows)")
    assert lines[2][0].startswith("run 2 #0") and "1 flow:" in lines[2][0]
    # the run table itself is unchanged
    assert [r["#"] for r in summary_rows(store, SWEEP)] == ["0", "1", "2"]


def test_recovery_rows_without_recovery_or_promise():
    rows = tlr.recovery_rows([{"event": 5, "workload": "w", "sender": "a", "receiver": "b", "outage_s": None,
                               "recover_s": None, "pre_rate_msgs_s": 10.0, "lost": 3, "verdict": None}], [])
    assert rows[0]["fault"] == "#5" and rows[0]["recover time"] == "never" and rows[0]["verdict"] == "-"
    assert rows[0]["outage"] == "-" and rows[0]["promise"] == "-"
    (f,) = tlr.fault_summaries([{"event": 5, "recover_s": None, "pre_rate_msgs_s": 10.0, "outage_s": 0.25}], [])
    assert f["not_recovered"] == 1 and f["outage_max_s"] == 0.25
    (line, broken), = tlr.recovery_lines([{"index": 0, "run_id": "x"}], {"x": {"recovery": [
        {"event": 5, "recover_s": None, "pre_rate_msgs_s": 10.0, "outage_s": 0.25}], "events": []}})
    assert "outage ≤ 250 ms, not back (1 flow never)" in line and not broken


def test_cli_summary_prints_the_blocks(store, tmp_path):
    from typer.testing import CliRunner

    from roughnet.cli import app

    root = store.root
    store.close()
    out = CliRunner().invoke(app, ["results", SWEEP, "--results", str(root)], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "workloads" in out.output and "bulk (bg)" in out.output
    assert "run 1 #0 kill service mosquitto" in out.output and "BROKEN (2 of 2 flows)" in out.output
