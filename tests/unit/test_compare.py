"""`roughnet compare`: stored sweeps that differ by a known amount and sweeps that do not, the
verdict rule over many synthetic draws, matching across folders, formats, versions and protocols,
the exit codes (0 / 1 regression / 2 bad input), the JSON and the plot."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import typer
from synthruns import PointSpec, SweepSpec, store_sweep
from typer.testing import CliRunner

from roughnet.analysis import compare as cmp
from roughnet.cli.compare import register
from roughnet.results import Store, schema

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
AXES = {"loss": ["1%", "5%", "10%"], "protocol": ["mqtt"]}
FACTOR = 1.3  # B's latency against A's, every point


def _points(latency_factor: float = 1.0, protocol: str = "mqtt") -> list[PointSpec]:
    return [PointSpec({"loss": loss, "protocol": protocol}, median * latency_factor, loss=p)
            for loss, median, p in (("1%", 100.0, 0.01), ("5%", 200.0, 0.05), ("10%", 300.0, 0.10))]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One folder: A, B slower by FACTOR, C like A (other seed), N = nats like A (another protocol)."""
    root = tmp_path_factory.mktemp("cmp")
    with Store(root) as s:
        store_sweep(s, SweepSpec("mq", "mq-a0000001", AXES, _points(), repeats=5, seed=1))
        store_sweep(s, SweepSpec("mq", "mq-b0000002", AXES, _points(FACTOR), repeats=5, seed=2))
        store_sweep(s, SweepSpec("mq", "mq-c0000003", AXES, _points(), repeats=5, seed=3))
        store_sweep(s, SweepSpec("nt", "nt-d0000004", {"loss": AXES["loss"], "protocol": ["nats"]},
                                 _points(1.0, "nats"), repeats=5, seed=4))  # fmt: skip
    return root


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _main() -> None:
        pass

    register(app)
    return app


def _run(*args: str):
    return CliRunner().invoke(_app(), ["compare", *args])


# ------------------------------------------------------------------ stored sweeps


def test_a_known_slowdown_is_found_at_every_point_with_the_right_size(results, tmp_path):
    out = _run("mq-a0000001", "mq-b0000002", "--results", str(results), "--out", str(tmp_path),
               "--json", str(tmp_path / "c.json"), "--fail-if-worse", "10")
    assert out.exit_code == 1, out.output
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc == json.loads((tmp_path / "compare.json").read_text())
    assert (tmp_path / "compare.png").read_bytes().startswith(PNG_MAGIC)
    assert [m["metric"] for m in doc["metrics"]] == ["lat_p50_us", "lat_p99_us", "loss_ratio", "throughput_bps"]
    assert [m["better"] for m in doc["metrics"]] == ["lower", "lower", "lower", "higher"]
    assert len(doc["points"]) == 3 and doc["only_in_a"] == [] and doc["only_in_b"] == []
    for p in doc["points"]:
        assert (p["a_runs"], p["b_runs"]) == (5, 5)
        for col in ("lat_p50_us", "lat_p99_us"):
            m = p["metrics"][col]
            assert m["kind"] == "ratio" and m["verdict"] == "worse" and m["regression"]
            assert m["lo"] <= FACTOR <= m["hi"] and m["lo"] > 1.10, (p["params"], m)
        assert p["metrics"]["loss_ratio"]["kind"] == "points"
    assert doc["summary"]["regressions"] == 6 and doc["exit_code"] == 1
    assert "regression: loss=1%, protocol=mqtt: latency p50 +" in out.output
    # a threshold above the slowdown: worse, but not a regression
    out = _run("mq-a0000001", "mq-b0000002", "--results", str(results), "--out", str(tmp_path),
               "--metric", "latency_p50", "--fail-if-worse", "50")
    assert out.exit_code == 0, out.output
    assert "3 worse; 0 regression(s)" in out.output


def test_two_sweeps_of_the_same_configuration_show_no_regression(results, tmp_path):
    out = _run("mq-a0000001", "mq-c0000003", "--results", str(results), "--out", str(tmp_path),
               "--fail-if-worse", "10", "--fail-if-worse-pp", "1")
    assert out.exit_code == 0, out.output
    doc = json.loads((tmp_path / "compare.json").read_text())
    verdicts = [m["verdict"] for p in doc["points"] for m in p["metrics"].values()]
    assert len(verdicts) == 12 and verdicts.count("no detectable difference") >= 10
    for p in doc["points"]:  # "no detectable difference" exactly when the interval holds no change
        for col in ("lat_p50_us", "lat_p99_us", "throughput_bps"):
            m = p["metrics"][col]
            assert (m["lo"] <= 1.0 <= m["hi"]) == (m["verdict"] == "no detectable difference")
    assert doc["summary"]["regressions"] == 0


def test_two_protocols_of_two_sweeps_and_two_sets_of_one_sweep(results, tmp_path):
    # points differ in protocol: nothing in common until protocol is ignored
    out = _run("mq-a0000001", "nt-d0000004", "--results", str(results), "--out", str(tmp_path))
    assert out.exit_code == 2
    assert "no point of A (sweep mq-a0000001) has the parameters of a point of B (sweep nt-d0000004)" in out.output
    assert "--ignore KEY" in out.output
    out = _run("mq-a0000001", "nt-d0000004", "--results", str(results), "--out", str(tmp_path),
               "--ignore", "protocol", "--json", "-")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["ignore"] == ["protocol"] and len(doc["points"]) == 3
    assert doc["points"][0]["params"] == {"loss": "1%"}
    assert doc["points"][0]["b_params"] == {"loss": "1%", "protocol": "nats"}
    assert doc["a"]["protocols"] == ["mqtt"] and doc["b"]["protocols"] == ["nats"]
    # two sets of runs of one sweep: loss=1% against loss=10%, loss ignored
    out = _run("mq-a0000001", "mq-a0000001", "--results", str(results), "--out", str(tmp_path),
               "--where-a", "loss=1%", "--where-b", "loss=10 %", "--ignore", "loss", "--metric", "loss",
               "--json", "-")
    assert out.exit_code == 1, out.output  # 9 percentage points more loss: worse, threshold 0
    doc = json.loads(out.stdout)
    (p,) = doc["points"]
    m = p["metrics"]["loss_ratio"]
    assert m["verdict"] == "worse" and m["lo"] <= 0.09 <= m["hi"]
    assert doc["a"]["where"] == {"loss": "1%"} and doc["a"]["runs"] == 5


def test_across_folders_formats_and_versions(results, tmp_path, monkeypatch):
    """A in an older results folder (format 3, older roughnet and broker versions), B in this one."""
    old_root = tmp_path / "old"
    spec = SweepSpec("mq", "mq-e0000005", AXES, _points(), repeats=5, seed=5,
                     versions={"roughnet": "0.0.9", "agent": "0.0.9", "mosquitto": "2.0.11"})
    with monkeypatch.context() as m:  # the Store of format 3, as test_results_store builds old files
        old = schema.metrics_of(3)
        m.setattr(schema, "FORMAT_VERSION", 3)
        m.setattr(schema, "METRICS", old)
        m.setattr(schema, "METRIC_NAMES", tuple(x.name for x in old))
        m.setattr(schema, "METRIC_BY_NAME", {x.name: x for x in old})
        with Store(old_root) as s:
            assert s.format_version() == 3
            store_sweep(s, spec)
    out = _run("mq-e0000005", "mq-b0000002", "--results", str(old_root), "--results-b", str(results),
               "--out", str(tmp_path / "o"), "--json", "-", "--metric", "latency_p99")
    assert out.exit_code == 1, out.output
    doc = json.loads(out.stdout)
    assert doc["a"]["versions"]["roughnet"] == ["0.0.9"] and doc["a"]["versions"]["mosquitto"] == ["2.0.11"]
    assert doc["b"]["versions"]["roughnet"] == ["0.1.0"]
    assert doc["a"]["results"] == str(old_root) and doc["b"]["results"] == str(results)
    assert all(p["metrics"]["lat_p99_us"]["verdict"] == "worse" for p in doc["points"])
    assert (old_root / "results.duckdb.v3.bak").exists()  # upgraded once to be read


def test_points_only_on_one_side_are_listed(results, tmp_path):
    root = tmp_path / "r"
    with Store(root) as s:
        store_sweep(s, SweepSpec("mq", "mq-f0000006", AXES, _points()[:2], repeats=3, seed=6))
        store_sweep(s, SweepSpec("mq", "mq-f0000007", AXES,
                                 _points()[1:] + [PointSpec({"loss": "20%", "protocol": "mqtt"}, 400.0, 0.2)],
                                 repeats=1, seed=7))  # fmt: skip
    out = _run("mq-f0000006", "mq-f0000007", "--results", str(root), "--out", str(tmp_path), "--json", "-")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert [p["params"]["loss"] for p in doc["points"]] == ["5%"]
    assert doc["only_in_a"] == [{"loss": "1%", "protocol": "mqtt"}]
    assert [p["loss"] for p in doc["only_in_b"]] == ["10%", "20%"]
    # one run on B's side: no interval for latency, "too few runs"; loss still judged on messages
    ms = doc["points"][0]["metrics"]
    assert ms["lat_p50_us"]["verdict"] == "too few runs" and ms["lat_p50_us"]["lo"] is None
    assert ms["loss_ratio"]["kind"] == "points" and ms["loss_ratio"]["lo"] is not None


@pytest.mark.parametrize("args, needle", [
    (["nope", "mq-a0000001"], "side A: no sweep matches 'nope'"),
    (["mq-a0000001", "mq-b0000002", "--metric", "latency_p42"], "--metric 'latency_p42' is not a metric"),
    (["mq-a0000001", "mq-b0000002", "--where-a", "loss"], "--where-a 'loss': expected KEY=VALUE"),
    (["mq-a0000001", "mq-b0000002", "--where-b", "rate=1%"], "side B (sweep mq-b0000002): no run has the parameter 'rate'"),
    (["mq-a0000001", "mq-b0000002", "--where-b", "loss=7%"], "no run has loss=7%; the values stored are loss: 1%, 10%, 5%"),
    (["mq-a0000001", "mq-b0000002", "--confidence", "95"], "--confidence 95.0: expected a number from 0.5"),
])  # fmt: skip
def test_bad_input_exits_2_naming_it(results, tmp_path, args, needle):
    out = _run(*args, "--results", str(results), "--out", str(tmp_path))
    assert out.exit_code == 2, out.output
    assert needle in " ".join(out.output.split()), out.output


def test_missing_results_folder_exits_2(tmp_path):
    out = _run("a", "b", "--results", str(tmp_path / "none"))
    assert out.exit_code == 2 and "no results database at" in out.output


# ------------------------------------------------------------------ the verdict rule over many draws


def _runs(values: list[float], column: str) -> list[dict]:
    return [{"run_id": f"r{i}", "status": "ok", "validity": "valid", "repeat": i, "params": {},
             "metrics": {column: v}} for i, v in enumerate(values)]


@pytest.mark.parametrize("n", [5, 10])
def test_false_verdicts_are_rare_and_a_real_change_is_found(n):
    rng = np.random.default_rng(n)
    false = found = 0
    draws = 200
    for i in range(draws):
        a = np.exp(rng.normal(math.log(100.0), 0.2, n))
        same = np.exp(rng.normal(math.log(100.0), 0.2, n))
        slower = np.exp(rng.normal(math.log(150.0), 0.2, n))
        m = cmp.compare_metric(_runs(list(a), "lat_p99_us"), _runs(list(same), "lat_p99_us"), "lat_p99_us",
                               0.95, 10.0, 0.0, ("same", i))
        false += m.verdict != cmp.SAME
        assert not m.regression or m.change.lo > 1.10
        m = cmp.compare_metric(_runs(list(a), "lat_p99_us"), _runs(list(slower), "lat_p99_us"), "lat_p99_us",
                               0.95, 10.0, 0.0, ("slow", i))
        found += m.verdict == cmp.WORSE
    assert false / draws <= 0.08  # nominal 5 %
    assert found / draws >= (0.7 if n == 5 else 0.95)  # x1.5 against a run spread of 20 %


def test_direction_and_kinds():
    assert cmp.BETTER["lat_p99_us"] == "lower" and cmp.BETTER["throughput_bps"] == "higher"
    assert cmp.BETTER["loss_ratio"] == "lower" and cmp.BETTER["full_sync"] == "higher"
    assert "sent" not in cmp.BETTER  # no direction: higher / lower, never a regression
    a, b = _runs([10.0, 11.0, 10.5], "sent"), _runs([20.0, 21.0, 20.5], "sent")
    m = cmp.compare_metric(a, b, "sent", 0.95, 0.0, 0.0, "k")
    assert m.verdict == cmp.HIGHER and not m.regression
    # higher is better: throughput down is worse
    m = cmp.compare_metric(_runs([10.0, 10.2, 9.9], "throughput_bps"), _runs([5.0, 5.1, 4.9], "throughput_bps"),
                           "throughput_bps", 0.95, 10.0, 0.0, "k")
    assert m.verdict == cmp.WORSE and m.regression and m.kind == "ratio" and m.change.hi < 0.9
    # zeros on A's side: a difference, not a ratio
    m = cmp.compare_metric(_runs([0.0, 0.0, 1.0], "duplicates"), _runs([5.0, 6.0, 7.0], "duplicates"),
                           "duplicates", 0.95, 0.0, 0.0, "k")
    assert m.kind == "difference" and m.verdict == cmp.WORSE
    # yes/no per run: the runs are the trials
    yes = [dict(r, metrics={"full_sync": True}) for r in _runs([0] * 6, "x")]
    no = [dict(r, metrics={"full_sync": False}) for r in _runs([0] * 6, "x")]
    m = cmp.compare_metric(yes, no, "full_sync", 0.95, 0.0, 40.0, "k")  # 6 of 6 against 0 of 6: at least 45 pp
    assert m.kind == "points" and m.verdict == cmp.WORSE and m.change.value == -1.0 and m.regression
    assert cmp.change_text(m).startswith("-100 pp [")


def test_match_key_compares_quantities_not_spelling():
    assert cmp.match_key({"loss": "1%", "rate": "10 Mbit/s"}) == cmp.match_key({"rate": "10Mbit/s", "loss": "1 %"})
    assert cmp.match_key({"loss": "1%"}) != cmp.match_key({"loss": "2%"})
    assert cmp.match_key({"loss": "1%", "protocol": "tcp"}, ("protocol",)) == cmp.match_key({"loss": "1%"})


def test_failed_and_invalid_runs_are_not_compared():
    a = _runs([100.0, 101.0, 99.0], "lat_p50_us")
    b = copy.deepcopy(a) + [{"run_id": "x", "status": "ok", "validity": "invalid", "params": {}, "repeat": 9,
                             "metrics": {"lat_p50_us": 1e6}},
                            {"run_id": "y", "status": "failed", "params": {}, "repeat": 10, "metrics": {}}]
    side_a = cmp.Side("A", "r", "s-a", {}, a)
    side_b = cmp.Side("B", "r", "s-b", {}, b)
    c = cmp.compare(side_a, side_b, ["lat_p50_us"])
    (p,) = c.points
    assert (p.a_runs, p.b_runs) == (3, 3) and p.metrics[0].verdict == cmp.SAME
