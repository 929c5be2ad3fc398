"""The report's "Processes" section ([[process]]): the table of every process (a mismatch with its reason), the
per-run TCP plots with the events, the app latency against the sweep axis; none without process rows."""

from __future__ import annotations

import copy
import re

import pytest
from synthtimeline import Sweep, record

from roughnet.report import build_report
from roughnet.report import processes as pr
from roughnet.results import Store

SWEEP = "procs-0a1b2c3d"
RUN_IDS = ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _processes(delay_ms: int, broken: bool) -> list[dict]:
    server = {
        "name": "server", "host": "h1", "kind": "command", "run_as": "roughnet (1000:1000)", "started_s": 0.0,
        "ready_s": 0.412, "ended_s": 20.05, "final": {"signal": "SIGTERM"}, "expected": "default", "ok": True,
        "reason": None, "restarts": 0, "cpu_s": 1.25, "rss_max_bytes": 12 * 1024 * 1024, "tcp_connections": 3,
        "tcp_retrans": 7, "tcp_bytes_sent": 5_000_000, "tcp_bytes_acked": 4_900_000, "tcp_bytes_received": 1000,
        "tcp_rtt_us": 2000.0 * delay_ms / 10, "app_count": 100, "lat_p50_us": 1000.0 * delay_ms,
        "lat_p90_us": 1100.0 * delay_ms, "lat_p99_us": 1500.0 * delay_ms, "lat_max_us": 2000.0 * delay_ms,
        "command": ["./server", "--port", "9000"], "stop_sent": "SIGTERM",
    }  # fmt: skip
    client = {
        "name": "client", "host": "h2", "kind": "image", "run_as": "root (0:0)", "started_s": 1.0, "ready_s": None,
        "ended_s": None if broken else 12.5, "final": {"running": True} if broken else {"exit": 0},
        "expected": {"exit": 0}, "ok": not broken,
        "reason": "still running at the run's end; expected exit 0" if broken else None, "restarts": 0,
        "cpu_s": 0.3, "rss_max_bytes": 3000, "tcp_connections": 1, "tcp_retrans": 0, "tcp_bytes_sent": 1000,
        "tcp_bytes_acked": 1000, "tcp_bytes_received": 4_900_000, "tcp_rtt_us": None, "app_count": None,
        "lat_p50_us": None, "lat_p90_us": None, "lat_p99_us": None, "lat_max_us": None,
    }  # fmt: skip
    return [server, client]


def _series(delay_ms: int) -> list[dict]:
    rows = []
    for i in range(20):
        t = float(i)
        rows.append({"process": "server", "source": "tcp", "name": "rtt_us", "t_s": t, "interval_s": 1.0,
                     "value": 1000.0 * delay_ms * (3 if 10 <= i < 13 else 1)})
        rows.append({"process": "server", "source": "tcp", "name": "retrans", "t_s": t, "interval_s": 1.0,
                     "value": 2.0 if 10 <= i < 13 else 0.0})
        rows.append({"process": "server", "source": "app", "name": "requests", "t_s": t, "interval_s": 1.0,
                     "value": 50.0})
    return rows


def _record(run_id: str, index: int, delay_ms: int, broken: bool) -> dict:
    rec = record(SWEEP, run_id, index, single=True, params={"delay": f"{delay_ms} ms"})
    rec["processes"] = _processes(delay_ms, broken)
    rec["process_series"] = _series(delay_ms)
    rec["events"].append({"index": 3, "at_s": 11.0, "kind": "process", "target": "process server",
                          "action": "signal", "detail": "SIGSTOP", "started_s": 11.0, "took_effect_s": 11.0,
                          "ends": None, "error": None})  # fmt: skip
    return rec


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "res")
    s.begin_sweep(Sweep(SWEEP, 2, axes={"delay": ["10 ms", "50 ms"]}))
    s.record_run(copy.deepcopy(_record(RUN_IDS[0], 0, 10, False)))
    s.record_run(copy.deepcopy(_record(RUN_IDS[1], 1, 50, True)))
    yield s
    s.close()


def _section(page: str) -> str:
    start = page.index("<h2>Processes</h2>")
    nxt = page.find("<h2>", start + 4)
    return page[start:] if nxt < 0 else page[start:nxt]


def test_store_gives_json_columns_as_text_or_parsed(store):
    rows = store.processes(SWEEP)
    assert [(r["run_id"], r["name"]) for r in rows] == [(RUN_IDS[0], "server"), (RUN_IDS[0], "client"),
                                                        (RUN_IDS[1], "server"), (RUN_IDS[1], "client")]
    assert pr.state_text(rows[0]["final"]) == "signal SIGTERM" and pr.state_text(rows[0]["expected"]) == "default"
    assert pr.state_text(rows[3]["final"]) == "running" and pr.state_text({"exit": 0}) == "exit 0"


def test_html_has_the_processes_section(store, tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "processes-gone.png").write_bytes(b"old")
    page = build_report(store, SWEEP, out).read_text()
    assert page.count("<h2>Processes</h2>") == 1
    sec = _section(page)
    # one table with a run column: four rows
    assert "<th>run</th><th>process</th><th>host</th>" in sec
    assert "<th>app p50</th><th>app p99</th>" in sec
    assert sec.count("<tr><td class=\"num\">") + sec.count('<tr class="invalid">') == 4
    assert ("<td>server</td><td>h1</td><td>command</td><td>default</td><td>signal SIGTERM</td><td>✓ ok</td>"
            in sec)
    assert '<td class="num">0.412 s</td>' in sec and '<td class="num">12.0 MiB</td>' in sec
    assert '<td class="num">4.67 MiB</td>' in sec and '<td class="num">2.00 ms</td>' in sec  # acked, mean RTT
    assert '<td class="num">10.0 ms</td><td class="num">15.0 ms</td>' in sec  # app p50, p99 of run 0
    # the mismatch: marked, with its reason
    assert len(re.findall(r'<tr class="invalid"><td class="num">1</td><td>client</td>', sec)) == 1
    assert ('<b class="broken">✗ mismatch: still running at the run&#x27;s end; expected exit 0</b>' in sec)
    assert "1 not in the expected final state" in sec
    # a TCP plot per run, the latency plot against the axis; stale PNGs gone
    for rid in RUN_IDS:
        assert (out / f"processes-{rid}.png").read_bytes().startswith(PNG_MAGIC)
    assert (out / "processes-latency.png").read_bytes().startswith(PNG_MAGIC)
    assert not (out / "processes-gone.png").exists()
    assert sec.count("<img") == 3 and "against delay" in sec
    assert "run 1 (delay=50 ms): per process" in sec


def test_run_figure_draws_rtt_retrans_and_events(store):
    series = pr.tcp_series(store.process_series(SWEEP, RUN_IDS[0]))
    assert list(series) == ["server"] and set(series["server"]) == {"rtt_us", "retrans"}
    events = store.events(SWEEP, RUN_IDS[0])
    fig = pr.run_figure(series, events, title="t")
    gids = {a.get_gid() for ax in fig.axes for a in [*ax.lines, *ax.patches] if a.get_gid()}
    assert {"rtt-server", "retrans-server", "event-0", "event-3"} <= gids
    red = [ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == "event-3"]
    assert red and red[0].get_color() == "C3"  # aimed at the process
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "signal process server" in texts and "kill service mosquitto" in texts


def test_plots_are_capped(store, tmp_path, monkeypatch):
    monkeypatch.setattr(pr, "MAX_RUN_PLOTS", 1)
    out = tmp_path / "r"
    page = build_report(store, SWEEP, out).read_text()
    assert "Plots of the first 1 of the 2 runs with TCP series." in page
    assert (out / f"processes-{RUN_IDS[0]}.png").exists() and not (out / f"processes-{RUN_IDS[1]}.png").exists()


def test_many_runs_get_a_table_each(store, tmp_path, monkeypatch):
    monkeypatch.setattr(pr, "ONE_TABLE_RUNS", 1)
    sec = _section(build_report(store, SWEEP, tmp_path / "r").read_text())
    assert "<h3>run 0 (delay=10 ms)</h3>" in sec and "<h3>run 1 (delay=50 ms)</h3>" in sec
    assert "<th>run</th>" not in sec


def test_a_failing_plot_keeps_the_table(store, tmp_path, monkeypatch):
    def broken(*a, **k):
        raise ValueError("no axis")

    monkeypatch.setattr(pr, "run_figure", broken)
    sec = _section(build_report(store, SWEEP, tmp_path / "r").read_text())
    assert "could not be drawn: no axis" in sec and "<td>client</td>" in sec


def test_a_sweep_without_processes_has_no_section(tmp_path):
    from test_report import records_fixture

    with Store(tmp_path / "res") as s:
        sweep, records = records_fixture.load()[0]
        s.begin_sweep(sweep)
        for rec in records:
            s.record_run(copy.deepcopy(rec))
        page = build_report(s, sweep.sweep_id, tmp_path / "out").read_text()
        assert "<h2>Processes</h2>" not in page
        assert not list((tmp_path / "out").glob("processes-*.png"))


def test_section_is_empty_without_rows(tmp_path):
    assert pr.section([], [], [], {}, [], tmp_path, lambda png, alt: "") == ""


def test_cli_summary_rows_name_each_process_and_a_mismatch(store):
    from roughnet.report import process_rows

    rows = process_rows(store, SWEEP)
    assert [(r["#"], r["process"]) for r in rows] == [("0", "server"), ("0", "client"), ("1", "server"),
                                                       ("1", "client")]
    assert rows[0]["ended"] == "signal SIGTERM" and rows[0]["as expected"] == "yes"
    assert rows[0]["retrans"] == "7" and rows[0]["CPU"] == "1.25 s"
    broken = [r for r in rows if r["as expected"] != "yes"]
    assert broken and all(r["as expected"] == "no: still running at the run's end; expected exit 0" for r in broken)
