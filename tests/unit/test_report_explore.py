"""The report's "Explore" section (issue 29) without a browser: the data it embeds for the fixture sweeps
(tests/unit/fixtures/results/records.py), the page staying self-contained, and a value that could end the
script block early. tests/integration/test_report_browser.py uses the section in Chromium."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from roughnet.report import explore, shaping
from roughnet.results import Store

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records_explore", Path(__file__).parent / "fixtures" / "results" / "records.py")
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("explore") / "res"
    sweep, records = records_fixture.load()[0]
    with Store(root) as store:
        store.begin_sweep(sweep)
        for rec in records:
            store.record_run(copy.deepcopy(rec))
        yield store.sweep(sweep.sweep_id), store.runs(sweep.sweep_id), store.histograms(sweep.sweep_id)


def _data(stored, href=lambda r: f"../../runs/x/{r['run_id']}/"):
    sweep, runs, hists = stored
    axes = shaping.axis_values(sweep.get("axes") or {}, runs)
    return explore.data(sweep, runs, hists, shaping.choose_roles(axes, sweep.get("report")), axes, href)


def test_every_run_with_its_parameters_verdict_metrics_and_link(stored):
    sweep, runs, _ = stored
    d = _data(stored)
    assert d["sweep"] == sweep["sweep_id"] and len(d["runs"]) == len(runs)
    assert [p["name"] for p in d["params"]] == ["loss", "payload", "protocol"]
    numeric = {p["name"]: p["numeric"] for p in d["params"]}
    assert numeric == {"loss": True, "payload": True, "protocol": False}
    for r, src in zip(d["runs"], runs):
        assert r["id"] == src["run_id"] and r["i"] == src["index"] and r["status"] == src["status"]
        assert r["href"] == f"../../runs/x/{src['run_id']}/"
        assert r["x"]["protocol"] is None and r["x"]["loss"] in (0.0, 0.05, 0.1)
        if src["status"] != "ok":
            assert r["m"] == {} and r["pct"] == [] and r["validity"] == "invalid" and r["reasons"]
    ok = [r for r in d["runs"] if r["status"] == "ok"]
    assert all("lat_p50_us" in r["m"] for r in ok)
    assert not any(k.endswith("_pid") for r in d["runs"] for k in r["m"])


def test_the_metrics_offered_first_are_the_reports_and_latency_is_logarithmic(stored):
    d = _data(stored)
    cols = [m["col"] for m in d["metrics"]]
    assert d["first"]["metric"] == cols[0] and cols[0] in shaping.metrics_for(["stream"], None)
    meta = {m["col"]: m for m in d["metrics"]}
    assert meta["lat_p99_us"]["log"] and meta["lat_p99_us"]["unit"] == "us" and meta["lat_p99_us"]["title"]
    assert meta["throughput_bps"]["unit"] == "bit/s" and not meta["throughput_bps"]["log"]
    assert meta["loss_ratio"]["unit"] == "fraction"


def test_percentiles_come_from_the_stored_histograms(stored):
    _, runs, hists = stored
    d = _data(stored)
    with_hist = {h["run_id"] for h in hists if h["kind"] == "latency_intended"}
    for r in d["runs"]:
        if r["status"] == "ok" and r["id"] in with_hist:
            qs = [q for q, _ in r["pct"]]
            vals = [v for _, v in r["pct"]]
            assert qs == list(explore.PERCENTILES) and vals == sorted(vals) and vals[0] > 0, r["pct"]
    assert any(r["pct"] for r in d["runs"])


def test_the_section_is_self_contained_and_a_value_cannot_close_its_script(stored):
    sweep, runs, hists = stored
    runs = copy.deepcopy(runs)
    runs[0]["failure_reason"] = "</script><script>alert(1)</script>"
    runs[0]["status"] = "failed"
    axes = shaping.axis_values(sweep.get("axes") or {}, runs)
    html = explore.section(sweep, runs, hists, shaping.choose_roles(axes, sweep.get("report")), axes, lambda r: None)
    blob = html.split('<script type="application/json" id="rn-data">')[1].split("</script>")[0]
    assert "<" not in blob and json.loads(blob)["runs"][0]["reasons"][-1] == "</script><script>alert(1)</script>"
    assert "<noscript>" in html and "https://" not in html and explore.SCRIPT.read_text() in html


def test_no_runs_no_section():
    assert explore.section({"sweep_id": "s"}, [], [], shaping.Roles(None, None, []), {}, lambda r: None) == ""
