"""roughnet.api (issue 29): a results folder as pandas DataFrames, against the stored fixture sweeps
(tests/unit/fixtures/results/records.py) and the store's own reading of them."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

import roughnet.api as rn  # noqa: E402
from roughnet.errors import ResultsError  # noqa: E402
from roughnet.results import Store, schema  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "results_fixture_records_api", Path(__file__).parent / "fixtures" / "results" / "records.py")
records_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_fixture)

#: A repeat of the stream sweep's first point (same params, another run id): the point then has two runs.
REPEAT_RUN_ID = "0123456789ab"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("api") / "res"
    sweeps = records_fixture.load()
    with Store(root) as store:
        for sweep, records in sweeps:
            store.begin_sweep(sweep)
            for rec in records:
                store.record_run(copy.deepcopy(rec))
        sweep, records = sweeps[0]
        again = copy.deepcopy(records[0])
        again.update(run_id=REPEAT_RUN_ID, repeat=1, seed=again["seed"] + 1)
        store.record_run(again)
    return root


@pytest.fixture
def res(folder):
    with rn.open(folder) as r:
        yield r


def test_runs_have_parameters_with_units_parsed_then_the_metrics(res, folder):
    df = res.runs("stream3")  # a scenario name: its latest sweep
    assert df.attrs["sweep_id"] == "stream3-1a2b3c4d" and df.attrs["params"] == ["loss", "payload", "protocol"]
    assert len(df) == 13
    assert list(df.columns[:13]) == [c for c in rn.RUN_FIRST if c != "protocol"]  # the swept protocol follows
    # quantities as numbers in base units, the values as written beside them; other parameters as they are
    assert sorted(set(df["loss"])) == [0.0, 0.05, 0.1] and df["loss"].dtype == "float64"
    assert sorted(set(df["payload"])) == [64.0, 1024.0]
    assert set(df["payload_label"]) == {"64 B", "1 KiB"} and set(df["loss_label"]) == {"0%", "5%", "10%"}
    assert set(df["protocol"]) == {"tcp", "udp"} and "protocol_label" not in df.columns
    assert df.attrs["units"]["loss"] == "fraction" and df.attrs["units"]["payload"] == "bytes"
    assert df.attrs["units"]["lat_p99_us"] == "us"
    assert set(schema.METRIC_NAMES) <= set(df.columns)
    # the same figures as the store's own reading, run by run
    with Store(folder, create=False, read_only=True) as store:
        want = {r["run_id"]: r for r in store.runs("stream3-1a2b3c4d")}
    for _, row in df.iterrows():
        w = want[row["run_id"]]
        assert (row["status"], row["validity"], row["repeat"]) == (w["status"], w["validity"], w["repeat"])
        for m in ("received", "lost", "lat_p99_us", "throughput_bps"):
            got, exp = row[m], w["metrics"][m]
            assert pd.isna(got) if exp is None else got == exp, (m, got, exp)  # NaN or NA where the store has None
    assert df.loc[df["status"] == "failed", "failure_reason"].str.contains("address in use").all()
    assert isinstance(df["validity_reasons"].iloc[0], list)


def test_points_estimate_over_the_usable_repeats_and_name_what_they_leave_out(res):
    p = res.points("stream3", "lat_p99_us")
    assert len(p) == 12 and list(p.columns[:6]) == ["loss", "loss_label", "payload", "payload_label", "protocol",
                                                    "metric"]
    runs = res.runs("stream3")
    first = p.iloc[0]
    two = runs[(runs["loss_label"] == first["loss_label"]) & (runs["payload_label"] == first["payload_label"])
               & (runs["protocol"] == first["protocol"])]
    assert len(two) == 2 and first["n"] == 2
    assert first["value"] == pytest.approx(two["lat_p99_us"].mean())
    assert first["lo"] is not None and first["lo"] <= first["value"] <= first["hi"]
    # the invalid run and the failed one are left out of their points, with why
    left = p[p["n"] == 0]
    assert len(left) == 2
    reasons = [why for ex in left["excluded"] for _, why in ex]
    assert any(w.startswith("invalid:") for w in reasons) and any(w.startswith("failed:") for w in reasons)
    with pytest.raises(ResultsError, match="unknown metric 'p99'"):
        res.points("stream3", "p99")


def test_latency_merges_the_repeats_histograms(res):
    lat = res.latency("stream3")
    assert lat.attrs["kind"] == "latency_intended"
    runs = res.runs("stream3")
    first = lat.iloc[0]
    assert first["runs"] == 2
    assert first["count"] == 2 * runs.iloc[0]["received"]  # the repeat is a copy: twice the values
    one = lat.iloc[1]
    (run,) = [r for _, r in runs.iterrows() if (r["loss_label"], r["payload_label"], r["protocol"])
              == (one["loss_label"], one["payload_label"], one["protocol"])]
    assert one["runs"] == 1 and one["count"] == run["received"]
    # HdrHistogram's percentiles within its precision of the record's own p50 / p99
    assert one["p50_us"] == pytest.approx(run["lat_p50_us"], rel=0.01)
    assert one["p99_us"] == pytest.approx(run["lat_p99_us"], rel=0.01)
    assert (lat["p50_us"].dropna() <= lat["p99_us"].dropna()).all()
    assert res.latency("pingiv").attrs["kind"] == "rtt_intended"  # a ping sweep: the round trip
    with pytest.raises(ResultsError, match="unknown histogram kind"):
        res.latency("stream3", kind="latency")


def test_plot_draws_one_line_per_value_of_lines_and_refuses_what_is_not_swept(res):
    fig = res.plot("lat_p99_us", x="loss", lines="protocol", sweep="stream3")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "loss (fraction)"
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["protocol=tcp", "protocol=udp"]
    with pytest.raises(ResultsError, match="x='rate' is not a swept parameter.*loss, payload, protocol"):
        res.plot("lat_p99_us", x="rate", sweep="stream3")


def test_sweeps_and_the_latest_sweep_by_default(res):
    s = res.sweeps()
    assert list(s["scenario"])[:1] == ["stream3"] and len(s) >= 3
    assert res.sweep_id() == s["sweep_id"].iloc[-1]
    assert str(s["created_at"].dtype).startswith("datetime64")
    assert res.sql("SELECT count(*) AS n FROM runs")["n"].iloc[0] == 13 + sum(
        len(r) for _, r in records_fixture.load()[1:])


def test_a_folder_without_results_is_refused(tmp_path):
    with pytest.raises(ResultsError, match="no results database"):
        rn.open(tmp_path)
