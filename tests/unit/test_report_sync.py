"""The report of sync sweeps (SEEDS S3): figures, run table and CLI summary from sync records.

Records: the two real runner records of tests/unit/fixtures/results/captured/hf-sync-2runs.json
(tcp, window 1 and 4, both full sync) plus two derived from them as a second protocol would give:
mqtt window 4 reaching full sync more slowly, and mqtt window 1 ending at the sync window with
bundles missing (as tests/integration/test_sync.py's short-window run does).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from roughnet.report import build_report, shaping, summary_rows, sync
from roughnet.results import Store

CAPTURED = Path(__file__).parent / "fixtures" / "results" / "captured" / "hf-sync-2runs.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _records() -> list[dict]:
    tcp1, tcp4 = json.loads(CAPTURED.read_text())
    out = [tcp1, tcp4]
    for i, (base, full) in enumerate(((tcp1, False), (tcp4, True))):
        r = copy.deepcopy(base)
        r["index"] = 2 + i
        r["run_id"] = f"mqtt{i:08x}"
        r["params"] = {"protocol": "mqtt", "window": base["params"]["window"]}
        r["protocol"] = r["run"]["workload"]["protocol"] = "mqtt"
        m = r["metrics"]
        if full:
            m["time_to_full_sync_s"] = m["sync_elapsed_s"] = 31.5
            m["goodput_bps"] = m["throughput_bps"] = round(2400 * 8 / 31.5, 3)
        else:  # the 90 s window ran out: 4 of 6 one way, 3 of 6 the other
            m.update(bundles_from_to=4, bundles_to_from=3, received=7, full_sync=False, time_to_full_sync_s=None,
                     goodput_bytes=1400, sync_elapsed_s=90.0, goodput_bps=round(1400 * 8 / 90, 3))
            m["throughput_bps"] = m["goodput_bps"]
            for side in r["receivers"]:
                side["metrics"].update(full_sync=False, complete=False, time_to_full_sync_s=None,
                                       end_reason="window")
        m["goodput_fraction"] = round(m["goodput_bps"] / m["channel_capacity_bps"], 4)
        out.append(r)
    return out


def _sweep(records: list[dict]):
    class _Sweep:  # what begin_sweep reads of a runspec.Sweep
        sweep_id = records[0]["sweep_id"]
        scenario = "hf-sync"
        source = "scenarios/hf-sync.toml"
        description = "CI-sized S3"
        axes = {"protocol": ["tcp", "mqtt"], "window": [1, 4]}
        report = {"x": "window", "lines": "protocol", "title": "Bundle sync over an HF modem (SEEDS S3)"}
        runs = tuple(records)

    return _Sweep


@pytest.fixture(scope="module")
def sync_store(tmp_path_factory):
    records = _records()
    s = Store(tmp_path_factory.mktemp("sync"))
    s.begin_sweep(_sweep(records))
    for rec in records:
        s.record_run(copy.deepcopy(rec))
    yield s, records
    s.close()


def test_summary_rows_show_bundles_goodput_and_full_sync_not_latency(sync_store):
    store, records = sync_store
    rows = summary_rows(store, records[0]["sweep_id"])
    assert list(rows[0]) == ["#", "run", "protocol", "window", "status", "validity", "bundles ship→shore",
                             "bundles shore→ship", "goodput", "of capacity", "full sync", "time to sync"]
    assert not any("latency" in h or "p99" in h for h in rows[0])
    by_run = {r["run"]: r for r in rows}
    tcp1 = by_run[records[0]["run_id"]]
    assert tcp1["bundles ship→shore"] == "6" and tcp1["bundles shore→ship"] == "6"
    assert tcp1["goodput"] == "998 bit/s"  # 997.996 bit/s from the runner
    assert tcp1["of capacity"] == "16.6 %"  # 0.1663 of 6000 bit/s
    assert tcp1["full sync"] == "yes" and tcp1["time to sync"] == "19.2 s"
    short = by_run["mqtt00000000"]
    assert (short["bundles ship→shore"], short["bundles shore→ship"]) == ("4", "3")
    assert short["full sync"] == "no" and short["time to sync"] == "-"


def test_sync_figures_per_direction_goodput_against_capacity_and_time(sync_store):
    store, records = sync_store
    runs = store.runs(records[0]["sweep_id"])
    axes = shaping.axis_values(_sweep(records).axes, runs)
    roles = shaping.choose_roles(axes, _sweep(records).report)
    assert (roles.x, roles.lines) == ("window", "protocol")

    bp = sync.bundles_plot(runs, roles, axes)
    assert [p.title for p in bp.panels] == ["ship→shore", "shore→ship"]
    ys = {p.title: {(ln.label, pt.x): pt.y for ln in p.lines for pt in ln.points} for p in bp.panels}
    assert ys["ship→shore"] == {("protocol=tcp", 1): 6, ("protocol=tcp", 4): 6,
                                ("protocol=mqtt", 1): 4, ("protocol=mqtt", 4): 6}
    assert ys["shore→ship"][("protocol=mqtt", 1)] == 3

    mp, refs = sync.goodput_plot(runs, roles, axes)
    assert mp.column == "goodput_bps"  # one capacity for every run: goodput in bit/s, capacity drawn
    assert refs == [(6000.0, "channel capacity (6.00 kbit/s)")]
    points = [pt for p in mp.panels for ln in p.lines for pt in ln.points]
    assert len(points) == 4 and all(0 < pt.y < 6000 for pt in points)

    mp, refs = sync.time_plot(runs, roles, axes)
    timed = {(ln.label, pt.x): pt.y for p in mp.panels for ln in p.lines for pt in ln.points}
    assert set(timed) == {("protocol=tcp", 1), ("protocol=tcp", 4), ("protocol=mqtt", 4)}  # mqtt 1: no full sync
    assert timed[("protocol=tcp", 1)] == pytest.approx(records[0]["metrics"]["time_to_full_sync_s"])
    assert refs == [(90.0, "sync window (90.0 s)")]

    figs = sync.figures(runs, roles, axes)
    assert [name for name, _, _ in figs] == ["sync_bundles", "sync_goodput", "sync_time"]
    assert all(png.startswith(PNG_MAGIC) for _, png, _ in figs)


def test_goodput_as_fraction_when_capacities_differ(sync_store):
    store, records = sync_store
    runs = store.runs(records[0]["sweep_id"])
    runs[1]["metrics"]["channel_capacity_bps"] = 1475.0
    axes = shaping.axis_values(_sweep(records).axes, runs)
    roles = shaping.choose_roles(axes, _sweep(records).report)
    mp, refs = sync.goodput_plot(runs, roles, axes)
    assert mp.column == "goodput_fraction" and refs == [(1.0, "channel capacity (100 %)")]


def test_sync_report_page(sync_store, tmp_path):
    store, records = sync_store
    page = build_report(store, records[0]["sweep_id"], tmp_path).read_text(encoding="utf-8")
    names = {p.name for p in tmp_path.iterdir()}
    assert {"sync_bundles.png", "sync_goodput.png", "sync_time.png"} <= names
    assert "latency_cdf.png" not in names and "lat_p50_us.png" not in names
    assert page.count("data:image/png;base64,") == 3
    assert "3 of 4 sync run(s) reached full sync." in page
    assert re.search(r"run 2 \(mqtt00000000\) protocol=mqtt, window=1: 4 bundles ship→shore, 3 shore→ship, "
                     r"goodput 124 bit/s; ended by window", page)
    # the run table has the sync columns
    head = page[page.index("<h2>Every run"):]
    for h in ("bundles ship→shore", "bundles shore→ship", "goodput", "of capacity", "full sync", "time to sync"):
        assert f"<th>{h}</th>" in head


def test_single_sync_run_lists_its_sync_metrics(tmp_path):
    (rec,) = _records()[:1]

    class _One:
        sweep_id = rec["sweep_id"]
        scenario = "hf-sync"
        source = "x.toml"
        description = ""
        axes: dict = {}
        report: dict = {}
        runs = (rec,)

    with Store(tmp_path) as s:
        s.begin_sweep(_One)
        s.record_run(copy.deepcopy(rec))
        page = build_report(s, rec["sweep_id"]).read_text(encoding="utf-8")
    metrics = page[page.index("<h2>Metrics</h2>"):]
    for label, value in (("full sync", "yes"), ("goodput", "998 bit/s"), ("bundles delivered from -&gt; to", "6"),
                         ("time to full sync", "19.2 s"), ("overhead (bytes sent / goodput bytes)", "1.51 ×")):
        assert f"<td>{label}</td><td class=\"num\">{value}</td>" in metrics, label
