"""The report: data shaping for plots, perftest lines, summary rows, HTML smoke test."""

from __future__ import annotations

import base64
import copy
import importlib.util
import re
from pathlib import Path

import pytest

from roughnet.report import build_report, fmt, perftest, perftest_lines, plots, shaping, summary_rows
from roughnet.results import Store

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records", Path(__file__).parent / "fixtures" / "results" / "records.py"
)
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def fixture_sweeps():
    return records_fixture.load()


@pytest.fixture(scope="module")
def store(tmp_path_factory, fixture_sweeps):
    root = tmp_path_factory.mktemp("results")
    s = Store(root)
    for sweep, records in fixture_sweeps:
        s.begin_sweep(sweep)
        for rec in records:
            s.record_run(copy.deepcopy(rec))
    yield s
    s.close()


STREAM, PING, RAMP = "stream3-1a2b3c4d", "pingiv-5e6f7a8b", "ramp1-9c0d1e2f"


# ------------------------------------------------------------------ units / ordering


def test_axis_values_sort_numerically_by_unit():
    order, nums = fmt.order_values(["10 KiB", "1 MiB", "512 B", "100 KiB"])
    assert order == ["512 B", "10 KiB", "100 KiB", "1 MiB"]
    assert nums["1 MiB"] == 1024**2
    assert fmt.order_values(["25%", "5%", "0%", "10%"])[0] == ["0%", "5%", "10%", "25%"]
    assert fmt.order_values(["100 Mbit/s", "5 Mbit/s", "1 Gbit/s"])[0] == ["5 Mbit/s", "100 Mbit/s", "1 Gbit/s"]
    assert fmt.order_values(["50 ms", "10 ms", "25 ms"])[0] == ["10 ms", "25 ms", "50 ms"]
    assert fmt.order_values([1436, 536, 1024])[0] == [536, 1024, 1436]


def test_axis_values_fall_back_to_file_order():
    order, nums = fmt.order_values(["zenoh", "mqtt", "kafka"])
    assert order == ["zenoh", "mqtt", "kafka"] and nums is None
    # mixed kinds are not comparable: file order
    assert fmt.order_values(["10 ms", "64 B"]) == (["10 ms", "64 B"], None)


@pytest.mark.parametrize(
    "column, value, text",
    [
        ("lat_p50_us", 812.5, "812 µs"),
        ("lat_p99_us", 1578.0, "1.58 ms"),
        ("lat_p99_us", 217_000.0, "217 ms"),
        ("throughput_bps", 9_470_000.0, "9.47 Mbit/s"),
        ("throughput_bps", 14.6e9, "14.6 Gbit/s"),
        ("loss_ratio", 0.0485, "4.85 %"),
        ("sent", 15000, "15,000"),
        ("lat_p50_us", None, "-"),
    ],
)
def test_metric_values_with_units(column, value, text):
    assert fmt.value(column, value) == text


def test_report_metric_names_map_to_columns():
    assert fmt.metric_column("throughput") == "throughput_bps"
    assert fmt.metric_column("rtt_p99") == "lat_p99_us"
    assert fmt.metric_column("latency_p999999") == "lat_p999999_us"
    assert fmt.metric_column("tcp_retransmits") == "tcp_retrans_segs"
    assert fmt.metric_column("lat_p50_us") == "lat_p50_us"
    assert fmt.metric_column("bogus") is None


# ------------------------------------------------------------------ roles


def test_roles_default_first_three_varying_axes():
    axes = {"loss": ["0%", "5%"], "payload": ["64 B", "1 KiB"], "protocol": ["tcp", "udp"]}
    r = shaping.choose_roles(axes)
    assert (r.x, r.lines, r.panels) == ("loss", "payload", ["protocol"])


def test_roles_skip_single_valued_axes_and_fold_extra_axes_into_panels():
    axes = {"seed": ["1"], "protocol": ["tcp", "udp"], "rate": ["10 Mbit/s", "100 Mbit/s"],
            "loss": ["0%", "10%"], "payload": ["64 B", "1 KiB"]}
    r = shaping.choose_roles(axes)
    assert (r.x, r.lines, r.panels) == ("protocol", "rate", ["loss", "payload"])


def test_roles_follow_report_hints():
    axes = {"protocol": ["tcp", "udp"], "loss": ["0%", "5%"], "payload": ["64 B", "1 KiB"]}
    r = shaping.choose_roles(axes, {"x": "loss", "panels": "protocol", "lines": None})
    assert (r.x, r.lines, r.panels) == ("loss", "payload", ["protocol"])
    r = shaping.choose_roles(axes, {"x": "nope"})  # unknown key: ignored
    assert r.x == "protocol"
    assert shaping.choose_roles({}).x is None


def test_metrics_by_pattern_and_hint():
    assert shaping.metrics_for(["stream"], {}) == ["lat_p50_us", "lat_p99_us", "loss_ratio", "throughput_bps"]
    assert shaping.metrics_for(["ping"], None) == ["lat_p50_us", "lat_p99_us"]
    assert shaping.metrics_for(["bulk"], {}) == ["throughput_bps"]
    assert shaping.metrics_for(["stream"], {"metrics": ["throughput", "tcp_retransmits"]}) == [
        "throughput_bps", "tcp_retrans_segs"]


# ------------------------------------------------------------------ series and panels


def test_three_axis_series_and_panels(store):
    sweep = store.sweep(STREAM)
    runs = store.runs(STREAM)
    axes = shaping.axis_values(sweep["axes"], runs)
    roles = shaping.choose_roles(axes, sweep["report"])
    mp = shaping.metric_plot(runs, "lat_p99_us", roles, axes)
    assert mp.x_axis == "loss" and mp.x_numeric
    assert mp.x_order == ["0%", "5%", "10%"]
    assert [p.title for p in mp.panels] == ["protocol=tcp", "protocol=udp"]
    for panel in mp.panels:
        assert [line.label for line in panel.lines] == ["payload=64 B", "payload=1 KiB"]
        assert [line.index for line in panel.lines] == [0, 1]
    tcp, udp = mp.panels
    # the failed run (loss=10%, 1 KiB, tcp) has no point; every other line has 3
    assert [len(line.points) for line in tcp.lines] == [3, 2]
    assert [len(line.points) for line in udp.lines] == [3, 3]
    # points sorted by the parsed x value and carrying the run's numbers
    pts = udp.lines[0].points
    assert [p.x for p in pts] == ["0%", "5%", "10%"]
    assert [p.x_num for p in pts] == pytest.approx([0.0, 0.05, 0.10])
    by_id = {r["run_id"]: r for r in runs}
    for p in pts:
        assert p.y == by_id[p.run_id]["metrics"]["lat_p99_us"]
        assert by_id[p.run_id]["params"] == {"loss": p.x, "payload": "64 B", "protocol": "udp"}
    assert [p.validity for p in pts] == ["valid", "suspect", "invalid"]
    # property of the fixture: TCP's tail grows with loss (retransmissions), UDP's does not
    tcp64 = [p.y for p in tcp.lines[0].points]
    assert tcp64[0] * 100 < tcp64[1]
    assert max(p.y for p in pts) < 2 * min(p.y for p in pts)


def test_x_axis_sorted_numerically_even_when_file_order_is_not(store):
    runs = copy.deepcopy(store.runs(STREAM))
    axes = {"loss": ["10%", "0%", "5%"], "payload": ["1 KiB", "64 B"], "protocol": ["tcp", "udp"]}
    roles = shaping.choose_roles(axes)
    mp = shaping.metric_plot(runs, "loss_ratio", roles, axes)
    assert mp.x_order == ["0%", "5%", "10%"]
    assert [line.label for line in mp.panels[0].lines] == ["payload=64 B", "payload=1 KiB"]
    for panel in mp.panels:
        for line in panel.lines:
            xs = [p.x_num for p in line.points]
            assert xs == sorted(xs)


def test_repeats_are_averaged_per_x():
    runs = []
    for rep, y in enumerate([100.0, 300.0]):
        runs.append({"run_id": f"r{rep}", "index": rep, "status": "ok", "validity": "valid",
                     "pattern": "ping", "params": {"interval": "1 ms"}, "metrics": {"lat_p50_us": y}})
    runs.append({"run_id": "r2", "index": 2, "status": "ok", "validity": "valid", "pattern": "ping",
                 "params": {"interval": "10 ms"}, "metrics": {"lat_p50_us": 50.0}})
    axes = {"interval": ["1 ms", "10 ms"]}
    mp = shaping.metric_plot(runs, "lat_p50_us", shaping.choose_roles(axes), axes)
    (panel,) = mp.panels
    (line,) = panel.lines
    assert shaping.mean_by_x(line) == [("1 ms", 1e6, 200.0), ("10 ms", 1e7, 50.0)]
    assert mp.title == "round trip p50"


def test_latency_cdfs_from_hdr(store):
    sweep = store.sweep(STREAM)
    runs = store.runs(STREAM)
    axes = shaping.axis_values(sweep["axes"], runs)
    roles = shaping.choose_roles(axes)
    panels = shaping.latency_cdfs(runs, store.histograms(STREAM), roles)
    assert [p.title for p in panels] == ["loss=0%", "loss=5%", "loss=10%"]
    assert [len(p.curves) for p in panels] == [4, 4, 3]  # the failed run has no histogram
    by_id = {r["run_id"]: r for r in runs}
    for panel in panels:
        for c in panel.curves:
            assert c.fractions == sorted(c.fractions) and c.fractions[-1] == pytest.approx(1.0)
            assert c.values_us == sorted(c.values_us)
    # the median read off the CDF matches the stored p50 (HDR bucket precision)
    run = runs[0]
    c = next(c for c in panels[0].curves if c.label == "payload=64 B, protocol=tcp")
    median = next(v for v, f in zip(c.values_us, c.fractions, strict=True) if f >= 0.5)
    assert median == pytest.approx(by_id[run["run_id"]]["metrics"]["lat_p50_us"], rel=0.002)
    # one label keeps one colour index across panels
    idx = {c.label: c.index for p in panels for c in p.curves}
    for p in panels:
        for c in p.curves:
            assert c.index == idx[c.label]


def test_ramp_panels(store):
    runs = store.runs(RAMP)
    roles = shaping.choose_roles({})
    ((title, series),) = shaping.ramp_panels(runs, roles)
    assert title == ""
    (s,) = series
    assert s.sizes[0] == 1024 and s.sizes[-1] == 150 * 1024 and len(s.sizes) == 150
    assert s.sizes == sorted(s.sizes)
    # RTT grows with size in the fixture
    assert sum(s.rtts_us[-10:]) > 3 * sum(s.rtts_us[:10])


# ------------------------------------------------------------------ tables


def test_summary_rows(store):
    rows = summary_rows(store, STREAM)
    assert len(rows) == 12
    keys = list(rows[0])
    assert keys == ["#", "run", "loss", "payload", "protocol", "status", "validity",
                    "latency p50", "latency p99", "msg loss", "throughput"]
    assert all(list(r) == keys for r in rows)
    assert all(isinstance(v, str) for r in rows for v in r.values())
    assert rows[5]["validity"] == "⚠ suspect"
    assert rows[9]["validity"] == "✗ invalid"
    assert rows[10]["status"] == "failed" and rows[10]["latency p50"] == "-"
    assert rows[4]["loss"] == "5%" and rows[4]["latency p99"].endswith(" ms")
    ping = summary_rows(store, PING)
    assert list(ping[0]) == ["#", "run", "interval", "status", "validity", "rtt p50", "rtt p99", "msg loss"]


def test_summary_metric_header_does_not_clobber_a_swept_key():
    runs = [{"run_id": "a", "index": 0, "status": "ok", "pattern": "bulk", "validity": "valid",
             "params": {"throughput": "x"}, "metrics": {"throughput_bps": 1e6}}]
    headers, rows = shaping.run_table(runs, ["throughput"])
    assert rows[0]["throughput"] == "x"
    assert rows[0]["throughput (measured)"] == "1.00 Mbit/s"


# ------------------------------------------------------------------ perftest


def _widths(header: tuple[str, ...]) -> list[int]:
    return [len(h) for h in header]


def test_perftest_layout_matches_rti_csv_format():
    # RTI Perftest's documented CSV summary header lines, verbatim
    assert ",".join(perftest.LATENCY_HEADER) == (
        "Length (Bytes), Ave (us), Std (us), Min (us), Max (us), 50% (us), 90% (us), 99% (us), "
        "99.99% (us), 99.9999% (us), CPU %")
    assert ",".join(perftest.THROUGHPUT_HEADER) == (
        "Length (Bytes), Total Samples, Ave Samples/s,    Ave Mbps, Lost Samples, Lost Samples (%), CPU %")
    metrics = {"lat_mean_us": 98.2, "lat_std_us": 129.34, "lat_min_us": 45, "lat_max_us": 544,
               "lat_p50_us": 55, "lat_p90_us": 88, "lat_p99_us": 544, "lat_p9999_us": 544,
               "lat_p999999_us": 544, "cpu_agents_s": 0.2664}
    line = perftest.latency_line(100, metrics, 1.0)
    # the example line from the Perftest documentation, byte for byte
    assert line == ("           100,       98,    129.3,       45,      544,       55,       88,      544,"
                    "         544,           544, 26.64")
    tp = perftest.throughput_line(
        100, {"received": 9772745, "lost": 0, "throughput_bps": 1563.3e6,
              "bytes": 9772745 * 100, "cpu_agents_s": 0.2034}, 1.0)
    cells = tp.split(",")
    assert [len(c) for c in cells] == _widths(perftest.THROUGHPUT_HEADER)
    # samples/s over the receiver's own active time, bytes * 8 / throughput
    rate = round(9772745 / (9772745 * 100 * 8 / 1563.3e6))
    assert [c.strip() for c in cells] == ["100", "9772745", str(rate), "1563.3", "0", "0.00", "20.34"]


def test_perftest_lines_for_a_sweep(store):
    lines = perftest_lines(store, STREAM)
    runs = store.runs(STREAM)
    assert sum(1 for ln in lines if ln == "One-way Latency Summary:") == 11
    assert sum(1 for ln in lines if ln == "Throughput Summary:") == 11
    assert any(ln.startswith("Run 10 (") and "failed: agent on b exited" in ln for ln in lines)
    assert any(ln.startswith("Run 5 (") and "[SUSPECT: sender behind schedule" in ln for ln in lines)
    # every value line lines up with its header and parses back
    for i, ln in enumerate(lines):
        if ln.startswith("Length (Bytes)"):
            value = lines[i + 1]
            assert [len(c) for c in value.split(",")] == [len(h) for h in ln.split(",")]
    i = lines.index("One-way Latency Summary:")
    values = [float(c) for c in lines[i + 2].split(",")]
    m = runs[0]["metrics"]
    assert values[0] == 64
    assert values[5] == round(m["lat_p50_us"]) and values[7] == round(m["lat_p99_us"])
    j = lines.index("Throughput Summary:")
    tvals = [float(c) for c in lines[j + 2].split(",")]
    assert tvals[1] == m["received"] and tvals[3] == pytest.approx(m["throughput_bps"] / 1e6, abs=0.05)
    # UDP at 10 % loss: the lost column and its percentage
    k = next(n for n, ln in enumerate(lines) if ln.startswith("Run 11 ("))
    tp = lines[lines.index("Throughput Summary:", k) + 2].split(",")
    r11 = runs[11]["metrics"]
    assert int(tp[4]) == r11["lost"] and float(tp[5]) == pytest.approx(100 * r11["loss_ratio"], abs=0.01)


def test_perftest_round_trip_for_ping(store):
    lines = perftest_lines(store, PING)
    assert lines.count("Round-trip Latency Summary:") == 2
    assert "Throughput Summary:" not in lines


# ------------------------------------------------------------------ HTML


@pytest.mark.parametrize("sweep_id", [STREAM, PING, RAMP])
def test_html_report_is_self_contained(store, sweep_id, tmp_path):
    path = build_report(store, sweep_id, tmp_path / "rep")
    assert path == tmp_path / "rep" / "index.html"
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    # nothing fetched from elsewhere: no external src/href, no stylesheet links
    assert not re.search(r'(src|href)="(?!data:)', page)
    # no stylesheet or script fetched: the interactive section's scripts are inline (report/explore.py)
    assert "<link" not in page and not re.search(r"<script[^>]*\bsrc=", page)
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert images, "no embedded images"
    for b64 in images:
        assert base64.b64decode(b64).startswith(PNG_MAGIC)
    pngs = sorted(p.name for p in path.parent.glob("*.png"))
    assert len(pngs) == len(images)
    for p in path.parent.glob("*.png"):
        assert p.read_bytes().startswith(PNG_MAGIC)
    assert sweep_id in page
    assert "Every run" in page


def test_html_report_content_for_stream(store):
    path = build_report(store, STREAM)  # default folder
    assert path == store.root / "reports" / STREAM / "index.html"
    page = path.read_text(encoding="utf-8")
    names = sorted(p.name for p in path.parent.glob("*.png"))
    assert names == ["lat_p50_us.png", "lat_p99_us.png", "latency_cdf.png", "loss_ratio.png", "throughput_bps.png"]
    assert "Failed runs (1)" in page and "address in use" in page
    assert "Suspect and invalid runs (2)" in page and "receivers incomplete at timeout" in page
    assert "kernel 6.18.44" in page and "link engines</dt><dd>kernel" in page
    assert page.count('<tr class="') == 12


def test_html_report_for_a_single_run_lists_its_metrics(store):
    page = build_report(store, RAMP).read_text(encoding="utf-8")
    assert "no sweep (one run)" in page
    assert "<h2>Metrics</h2>" in page and "round trip p99" in page


def test_html_escapes_user_text(tmp_path, fixture_sweeps):
    import dataclasses

    sweep, records = fixture_sweeps[1]
    sweep = dataclasses.replace(sweep, description="<script>alert(1)</script>")
    rec = copy.deepcopy(records[0])
    rec["validity"] = "suspect"
    rec["validity_reasons"] = ["<img src=x onerror=alert(1)>"]
    with Store(tmp_path) as s:
        s.begin_sweep(sweep)
        s.record_run(rec)
        page = build_report(s, sweep.sweep_id).read_text(encoding="utf-8")
    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;" in page


def _synthetic_quickstart_runs():
    axes = {"protocol": ["tcp", "udp"], "rate": ["10 Mbit/s", "100 Mbit/s"],
            "loss": ["0%", "2%"], "payload": ["256 B", "1 KiB"]}
    runs, i = [], 0
    for proto in axes["protocol"]:
        for rate in axes["rate"]:
            for loss in axes["loss"]:
                for payload in axes["payload"]:
                    runs.append({
                        "run_id": f"{i:012x}", "index": i, "status": "ok", "validity": "valid",
                        "pattern": "stream", "params": {"protocol": proto, "rate": rate, "loss": loss,
                                                        "payload": payload},
                        "metrics": {"lat_p50_us": 100.0 + i, "loss_ratio": 0.02 if loss == "2%" else 0.0},
                    })
                    i += 1
    return axes, runs


def test_quickstart_shape_with_hints_folds_fourth_axis_into_panels():
    axes, runs = _synthetic_quickstart_runs()
    hints = {"title": "TCP vs UDP", "x": "loss", "lines": "payload", "panels": "protocol"}
    roles = shaping.choose_roles(axes, hints)
    assert (roles.x, roles.lines, roles.panels) == ("loss", "payload", ["protocol", "rate"])
    mp = shaping.metric_plot(runs, "lat_p50_us", roles, axes)
    assert [p.title for p in mp.panels] == [
        "protocol=tcp, rate=10 Mbit/s", "protocol=tcp, rate=100 Mbit/s",
        "protocol=udp, rate=10 Mbit/s", "protocol=udp, rate=100 Mbit/s"]
    for panel in mp.panels:
        assert [line.label for line in panel.lines] == ["payload=256 B", "payload=1 KiB"]
        for line in panel.lines:
            assert [p.x for p in line.points] == ["0%", "2%"]
    # each of the 16 runs appears exactly once
    ids = [p.run_id for panel in mp.panels for line in panel.lines for p in line.points]
    assert sorted(ids) == sorted(r["run_id"] for r in runs)
    assert plots.metric_png(mp).startswith(PNG_MAGIC)


def test_perftest_bulk_prints_throughput_only():
    runs = [{"run_id": "b0", "index": 0, "status": "ok", "validity": "valid", "pattern": "bulk",
             "params": {}, "duration_s": 5.0, "run": {"workload": {"payload_bytes": 1436}},
             "metrics": {"throughput_bps": 9.47e6, "bytes": 5_918_750, "cpu_agents_s": 0.5},
             "receivers": []}]
    lines = perftest.lines_for_runs(runs)
    assert lines[0] == "Run 0 (b0)"
    assert lines[1:3] == ["Throughput Summary:", ",".join(perftest.THROUGHPUT_HEADER)]
    cells = [c.strip() for c in lines[3].split(",")]
    assert cells[0] == "1436" and cells[3] == "9.5" and cells[6] == "10.00"
    assert "Latency" not in "\n".join(lines)


def test_rebuilding_a_report_replaces_only_its_own_pngs(store, tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "throughput_bps.png").write_bytes(b"stale")
    (out / "mine.png").write_bytes(b"keep")
    build_report(store, PING, out)  # ping plots no throughput
    assert not (out / "throughput_bps.png").exists()
    assert (out / "mine.png").read_bytes() == b"keep"
    assert (out / "lat_p50_us.png").exists()


def test_report_of_captured_runner_records(tmp_path):
    """The report and perftest lines from real runner output (no sweeps row: begin_sweep
    rebuilt from the records' params)."""
    import json

    captured = json.loads((Path(__file__).parent / "fixtures" / "results" / "captured"
                           / "quickstart-2runs.json").read_text())
    sweep_id = captured[0]["sweep_id"]

    class _Sweep:  # what begin_sweep reads of a runspec.Sweep
        scenario = "quickstart"
        source = "scenarios/quickstart.toml"
        description = ""
        axes = {"protocol": ["tcp", "udp"], "loss": ["2%"]}
        report: dict = {}
        runs = tuple(captured)

    _Sweep.sweep_id = sweep_id
    with Store(tmp_path) as s:
        s.begin_sweep(_Sweep)
        for rec in captured:
            s.record_run(copy.deepcopy(rec))
        page = build_report(s, sweep_id).read_text(encoding="utf-8")
        lines = perftest_lines(s, sweep_id)
    assert "latency_cdf.png" in {p.name for p in (tmp_path / "reports" / sweep_id).iterdir()}
    assert page.count("data:image/png;base64,") >= 2
    # TCP at 2 % loss: p99 in the hundreds of ms (retransmission timeouts); UDP loses ~2 %
    tcp, udp = sorted(captured, key=lambda r: r["protocol"])
    assert tcp["metrics"]["lat_p99_us"] > 50_000
    i = lines.index(next(ln for ln in lines if ln.startswith(f"Run {udp['index']} (")))
    tp = lines[lines.index("Throughput Summary:", i) + 2].split(",")
    assert int(tp[4]) == udp["metrics"]["lost"] > 0


def test_run_table_shows_repeat_only_with_repetitions():
    base = {"status": "ok", "pattern": "ping", "validity": "valid", "params": {"interval": "1 ms"},
            "metrics": {"lat_p50_us": 50.0}}
    runs = [dict(base, run_id="a", index=0, repeat=0), dict(base, run_id="b", index=1, repeat=1)]
    headers, rows = shaping.run_table(runs, ["interval"])
    assert headers[:5] == ["#", "run", "interval", "repeat", "status"]
    assert [r["repeat"] for r in rows] == ["0", "1"]
    headers, _ = shaping.run_table(runs[:1], ["interval"])
    assert "repeat" not in headers
