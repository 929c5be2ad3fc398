"""[report] metric names of results format 3 (sender held / own lag, UDP receive-buffer drops):
accepted by the scenario spec, mapped to the stored columns, plotted from stored runs."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
from pathlib import Path

from roughnet.report import build_report, fmt, shaping
from roughnet.results import Store

from specutil import plan_text

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records", Path(__file__).parent / "fixtures" / "results" / "records.py"
)
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)

QUICK = Path(__file__).parent / "fixtures" / "scenarios" / "quick.toml"
QUICK_METRICS = 'metrics = ["latency_p50", "latency_p99", "loss"]'


def _with_metrics(names: str) -> str:
    text = QUICK.read_text(encoding="utf-8")
    assert QUICK_METRICS in text
    return text.replace(QUICK_METRICS, f"metrics = {names}")


def test_sender_held_is_a_report_metric_of_its_column() -> None:
    sweep = plan_text(_with_metrics('["sender_held"]'))
    assert sweep.report["metrics"] == ["sender_held"]
    assert shaping.metrics_for(["stream"], sweep.report) == ["sched_held_fraction"]
    both = plan_text(_with_metrics('["sender_late", "udp_rcvbuf_drops", "sender_held"]'))
    assert shaping.metrics_for(["stream"], both.report) == [
        "sched_own_late_fraction", "udp_rcvbuf_errors", "sched_held_fraction"]
    assert fmt.metric_title("sched_held_fraction", ["stream"]) == "sender held by the protocol"
    assert fmt.value("sched_held_fraction", 0.125) == "12.5 %"
    assert fmt.value("udp_rcvbuf_errors", 1234) == "1,234"


def test_report_plots_sender_held_from_stored_runs(tmp_path: Path) -> None:
    (sweep, records), *_ = records_fixture.load()
    sweep = dataclasses.replace(sweep, report={**sweep.report, "metrics": ["sender_held"]})
    with Store(tmp_path) as store:
        store.begin_sweep(sweep)
        for i, rec in enumerate(records):
            rec = copy.deepcopy(rec)
            if rec["status"] == "ok":
                rec["metrics"]["sched_held_fraction"] = 0.01 * i
            store.record_run(rec)
        page = build_report(store, sweep.sweep_id, tmp_path / "rep").read_text(encoding="utf-8")
    pngs = sorted(p.name for p in (tmp_path / "rep").glob("*.png"))
    assert "sched_held_fraction.png" in pngs and "lat_p50_us.png" not in pngs
    assert "sender held by the protocol" in page
