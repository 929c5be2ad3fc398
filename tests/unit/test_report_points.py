"""Points of a sweep with repeats: intervals per metric, flags (bistable, disagree), the points
table, points.json, intervals on the plots; stored through the real Store API (synthruns)."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

import pytest
from synthruns import PointSpec, SweepSpec, store_sweep

from roughnet.report import build_report, plots, point_rows, points, shaping, summary_rows
from roughnet.results import Store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SWEEP = "mqrep-0000a001"
AXES = {"loss": ["1%", "5%", "10%"], "protocol": ["mqtt", "nats"]}

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records", Path(__file__).parent / "fixtures" / "results" / "records.py"
)
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)


def _spec_points() -> list[PointSpec]:
    return [
        PointSpec({"loss": "1%", "protocol": "mqtt"}, 100.0, loss=0.01),
        PointSpec({"loss": "5%", "protocol": "mqtt"}, 200.0, loss=0.05, levels=[1, 60, 1, 60, 60, 1]),  # bistable
        PointSpec({"loss": "10%", "protocol": "mqtt"}, 300.0, loss=0.10, levels=[1, 40], repeats=2),  # 2 disagree
        PointSpec({"loss": "1%", "protocol": "nats"}, 80.0, loss=0.01, repeats=2),  # 2 that agree
        PointSpec({"loss": "5%", "protocol": "nats"}, 90.0, loss=0.05),
        PointSpec({"loss": "10%", "protocol": "nats"}, 95.0, loss=0.10),
    ]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("points")
    spec = SweepSpec("mqrep", SWEEP, AXES, _spec_points(), repeats=6, seed=3)
    with Store(root) as s:
        recs = store_sweep(s, spec)
        # one failed and one invalid run of the last point: left out, and said so
        failed = copy.deepcopy(next(r for r in recs if r["params"] == {"loss": "10%", "protocol": "nats"}))
        failed.update(run_id="f00000000001", repeat=6, index=100, status="failed", failure_reason="agent died",
                      metrics={}, receivers=[], histograms=[])
        invalid = copy.deepcopy(failed)
        invalid.update(run_id="f00000000002", repeat=7, index=101, status="ok", validity="invalid",
                       validity_reasons=["receivers incomplete at timeout"],
                       metrics={"lat_p50_us": 1e7, "loss_ratio": 0.9, "lost": 900, "received": 100})
        s.record_run(failed)
        s.record_run(invalid)
    store = Store(root, create=False, read_only=True)
    yield store
    store.close()


@pytest.fixture(scope="module")
def stats(stored):
    runs = stored.runs(SWEEP)
    return {points.point_key(p.params): p
            for p in points.aggregate(runs, stored.histograms(SWEEP), points.columns_for(runs))}


def _point(stats, loss, protocol):
    return stats[points.point_key({"loss": loss, "protocol": protocol})]


def test_a_steady_point_has_intervals_around_the_truth_and_no_flag(stats):
    p = _point(stats, "1%", "mqtt")
    assert p.repeats == 6 and not p.flags and not p.excluded
    p50 = p.metrics["lat_p50_us"]
    assert p50.method == "bootstrap" and p50.n == 6
    assert p50.lo < p50.value < p50.hi and 85 < p50.lo and p50.hi < 120  # true median 100 µs, 5 % run spread
    loss = p.metrics["loss_ratio"]
    assert loss.method == "wilson" and loss.lo <= 0.01 <= loss.hi  # 6000 messages, p = 1 %
    assert loss.value == pytest.approx(sum(loss.values) / 6)  # equal message counts: pooled = mean
    tp = p.metrics["throughput_bps"]
    assert tp.lo <= tp.value <= tp.hi and tp.vmin <= tp.value <= tp.vmax


def test_a_bistable_point_is_flagged_naming_both_groups(stats):
    p = _point(stats, "5%", "mqtt")
    kinds = {(f.kind, f.column) for f in p.flags}
    assert ("bistable", "lat_p50_us") in kinds and ("bistable", "lat_p99_us") in kinds
    reason = next(f.reason for f in p.flags if f.column == "lat_p50_us")
    assert re.search(r"latency p50 is bistable: 3 runs at .* µs \(repeats 0, 2, 5\) and 3 at .* ms "
                     r"\(repeats 1, 3, 4\), [\d.]+× apart", reason), reason
    # loss and throughput do not split
    assert not any(f.column in ("loss_ratio", "throughput_bps") for f in p.flags)


def test_two_repeats_that_disagree_beyond_their_own_intervals_are_flagged(stats):
    p = _point(stats, "10%", "mqtt")
    assert p.repeats == 2
    flags = [f for f in p.flags if f.column == "lat_p50_us"]
    assert [f.kind for f in flags] == ["disagree"]
    assert re.search(r"latency p50: repeats disagree beyond their own 95 % intervals \(Q = \S+ on 1 degree of "
                     r"freedom, p < 0.0001\): lowest repeat 0 \d+ µs \[\d+ µs, \d+ µs\], highest repeat 1 "
                     r"[\d.]+ ms \[", flags[0].reason), flags[0].reason
    # two repeats that agree: no flag
    assert not _point(stats, "1%", "nats").flags


def test_failed_and_invalid_runs_are_left_out_and_listed(stats):
    p = _point(stats, "10%", "nats")
    assert p.repeats == 6
    assert [rid for rid, _ in p.excluded] == ["f00000000001", "f00000000002"]
    assert p.excluded[0][1] == "failed: agent died"
    assert p.excluded[1][1].startswith("invalid: receivers incomplete")
    assert p.metrics["lat_p50_us"].vmax < 1e6  # the invalid run's 10 s is not in


def test_interval_text_units():
    from roughnet.analysis.stats import Estimate

    est = Estimate(5, 12_300.0, 10_100.0, 15_200.0, 0.95, "bootstrap", 2000.0, 9800.0, 16_000.0, ())
    assert points.interval_text("lat_p99_us", est) == "12.3 ms [10.1, 15.2]"
    assert points.spread_text("lat_p99_us", est) == "runs 9.80 to 16.0 ms, sd 16.3 %"
    loss = Estimate(5, 0.015, 0.012, 0.0188, 0.95, "wilson", 0.002, 0.011, 0.02, (), 1.4)
    assert points.interval_text("loss_ratio", loss) == "1.50 % [1.20, 1.88]"
    assert points.spread_text("loss_ratio", loss) == "runs 1.10 to 2.00 %, sd 0.20 points"
    one = Estimate(1, 9.47e6, None, None, 0.95, "single", None, 9.47e6, 9.47e6, (9.47e6,))
    assert points.interval_text("throughput_bps", one) == "9.47 Mbit/s"
    assert points.interval_text("throughput_bps", None) == "-"


def test_point_rows_for_the_cli_summary(stored):
    rows = point_rows(stored, SWEEP)
    assert list(rows[0]) == ["loss", "protocol", "runs", "latency p50", "latency p99", "msg loss", "throughput",
                             "flags"]
    by = {(r["loss"], r["protocol"]): r for r in rows}
    assert re.fullmatch(r"\d+ µs \[\d+(\.\d+)?, \d+(\.\d+)?\]", by[("1%", "mqtt")]["latency p50"])
    assert by[("5%", "mqtt")]["flags"] == "bistable: latency p50, latency p99"
    assert by[("10%", "mqtt")]["flags"].startswith("disagree: latency p50")
    assert by[("10%", "nats")]["runs"] == "6 of 8"
    # the per-run summary is unchanged
    assert len(summary_rows(stored, SWEEP)) == 4 * 6 + 2 * 2 + 2


def test_no_repeats_no_points_table(tmp_path):
    (sweep, recs), *_ = records_fixture.load()
    with Store(tmp_path) as s:
        s.begin_sweep(sweep)
        for rec in recs:
            s.record_run(copy.deepcopy(rec))
        assert point_rows(s, sweep.sweep_id) == []
        page = build_report(s, sweep.sweep_id).read_text(encoding="utf-8")
        doc = json.loads((tmp_path / "reports" / sweep.sweep_id / "points.json").read_text())
    assert "<h2>Points" not in page and "bars and bands" not in page
    assert len(doc["points"]) == 12 and all(p["metrics"]["lat_p50_us"]["method"] == "single"
                                            for p in doc["points"] if p["metrics"])


def test_report_shows_points_flags_and_writes_points_json(stored, tmp_path):
    out = tmp_path / "rep"
    page = build_report(stored, SWEEP, out).read_text(encoding="utf-8")
    assert "<h2>Points: 6, 2 to 6 runs each</h2>" in page
    assert "<h2>Flagged points (2)</h2>" in page
    assert "latency p50 is bistable: 3 runs at" in page
    assert "repeats disagree beyond their own 95 % intervals" in page
    assert "bars and bands: 95 % interval over the repeats" in page
    assert (out / "lat_p50_us.png").read_bytes().startswith(PNG_MAGIC)
    doc = json.loads((out / "points.json").read_text())
    assert doc["sweep_id"] == SWEEP and doc["confidence"] == 0.95 and doc["unit"] == "run"
    (bi,) = [p for p in doc["points"] if p["params"] == {"loss": "5%", "protocol": "mqtt"}]
    assert bi["repeats"] == [0, 1, 2, 3, 4, 5] and len(bi["runs"]) == 6
    p50 = bi["metrics"]["lat_p50_us"]
    assert p50["lo"] < p50["value"] < p50["hi"] and p50["n"] == 6 and len(p50["values"]) == 6
    assert {f["kind"] for f in bi["flags"]} == {"bistable"}


def test_plot_intervals_attached_per_line_and_x(stored):
    runs = stored.runs(SWEEP)
    axes = shaping.axis_values(AXES, runs)
    roles = shaping.choose_roles(axes)
    stats = points.aggregate(runs, stored.histograms(SWEEP), ["lat_p50_us"])
    mp = shaping.metric_plot(runs, "lat_p50_us", roles, axes)
    points.attach_intervals(mp, stats)
    (panel,) = mp.panels
    lines = {ln.label: ln for ln in panel.lines}
    mqtt = lines["protocol=mqtt"]
    assert set(mqtt.intervals) == {"1%", "5%", "10%"}
    assert mqtt.flagged == {"5%", "10%"}
    est, lo, hi = mqtt.intervals["1%"]
    assert lo < est < hi
    assert plots.metric_png(mp).startswith(PNG_MAGIC)
