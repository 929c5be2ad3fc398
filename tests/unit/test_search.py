"""roughnet.analysis.search: the bracketing search against systems with a known capacity, judging runs,
the scenario of one probe, loads as quantities."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roughnet.analysis import search as srch
from roughnet.errors import SpecError


class FakeSystem:
    """Runs of a system that sustains loads up to ``capacity``; near it (within ``fuzz``) a run
    passes with a probability falling linearly from 1 to 0, like a real boundary."""

    def __init__(self, capacity: float, fuzz: float = 0.0, seed: int = 1) -> None:
        self.capacity, self.fuzz = capacity, fuzz
        self.rng = np.random.default_rng(seed)
        self.runs: dict[float, list[srch.Outcome]] = {}
        self.calls: list[tuple[float, int]] = []

    def _passes(self, load: float) -> bool:
        if self.fuzz == 0:
            return load <= self.capacity
        lo, hi = self.capacity * (1 - self.fuzz), self.capacity * (1 + self.fuzz)
        if load <= lo:
            return True
        if load >= hi:
            return False
        return self.rng.random() < (hi - load) / (hi - lo)

    def probe(self, load: float, n: int) -> srch.Probe:
        label = srch.load_label("msg_rate", load)
        load = srch.load_kind(label, "load")[1]
        self.calls.append((load, n))
        runs = self.runs.setdefault(load, [])
        while len(runs) < n:
            ok = self._passes(load)
            runs.append(srch.Outcome(f"r{load:g}-{len(runs)}", len(runs), ok, False,
                                     () if ok else ("message loss 5.00 % > 1.00 %",), {}))
        return srch.Probe(load, str(label), f"s-{load:g}", list(runs))


@pytest.mark.parametrize("capacity", [150.0, 1234.0, 7777.0, 40_000.0])
def test_a_sharp_capacity_is_bracketed_within_the_precision(capacity):
    sys_ = FakeSystem(capacity)
    res = srch.search(sys_.probe, 100.0, 100_000.0, factor=2.0, precision=0.1, repeats=3)
    assert res.stop == "bracketed"
    assert res.best.load <= capacity < res.first_failing.load
    assert res.first_failing.load / res.best.load <= 1.1 + 1e-9
    assert res.best.passed and len(res.best.outcomes) == 3  # repeats at the boundary
    # the climb makes one run a load; every bisection probe gets the repeats
    climb = [n for _, n in sys_.calls[: int(math.log2(capacity / 100)) + 2]]
    assert set(climb) <= {1, 3} and climb[0] == 1
    assert all(len(p.outcomes) in (1, 3) for p in res.probes)
    assert len(res.probes) <= 15


def test_a_noisy_boundary_never_reports_a_load_with_a_failed_run():
    for seed in range(20):
        sys_ = FakeSystem(2000.0, fuzz=0.2, seed=seed)
        res = srch.search(sys_.probe, 100.0, 100_000.0, precision=0.05, repeats=3)
        assert res.best is not None and res.best.passed and len(res.best.outcomes) == 3
        assert 2000 * 0.8 <= res.best.load <= 2000 * 1.2 and res.first_failing.failures
        assert res.first_failing.load > res.best.load


def test_the_climb_s_last_pass_is_confirmed_with_repeats_and_walks_down_when_it_fails():
    class Flaky(FakeSystem):
        def _passes(self, load):  # 1600 passes once, then fails; 800 always passes
            if load == 1600 and len(self.runs.get(1600.0, [])) >= 1:
                return False
            return load <= 1600

    sys_ = Flaky(1600.0)
    res = srch.search(sys_.probe, 100.0, 100_000.0, repeats=3)
    (p1600,) = [p for p in res.probes if p.load == 1600]
    assert [o.ok for o in p1600.outcomes] == [True, False, False]
    assert res.first_failing is p1600 and 1600 / 1.1 <= res.best.load < 1600


def test_top_reached_and_bottom_failing_and_bad_ranges():
    res = srch.search(FakeSystem(1e9).probe, 100.0, 1000.0, repeats=2)
    assert res.stop == "highest load sustained" and res.best.load == 1000.0 and res.first_failing is None
    res = srch.search(FakeSystem(50.0).probe, 100.0, 1000.0)
    assert res.stop == "lowest load not sustained" and res.best is None and res.first_failing.load == 100.0
    with pytest.raises(SpecError, match="expected 0 < lowest < highest"):
        srch.search(FakeSystem(1.0).probe, 100.0, 10.0)
    with pytest.raises(SpecError, match="--factor"):
        srch.search(FakeSystem(1.0).probe, 1.0, 10.0, factor=1.0)


def test_judge_names_every_limit_broken():
    c = srch.Criteria(max_loss=0.01, max_p99_us=50_000.0, max_held=0.05)
    ok = {"run_id": "a", "repeat": 0, "status": "ok", "validity": "suspect",
          "metrics": {"loss_ratio": 0.005, "lat_p99_us": 10_000.0, "sched_held_fraction": 0.0}}
    o = srch.judge(ok, c)
    assert o.ok and o.suspect and o.reasons == ()
    bad = dict(ok, validity="valid", metrics={"loss_ratio": 0.05, "lat_p99_us": 80_000.0, "sched_held_fraction": 0.2})
    o = srch.judge(bad, c)
    assert not o.ok and o.reasons == ("message loss 5.00 % > 1.00 %", "latency p99 80.0 ms > 50.0 ms",
                                      "sends held back 20.0 % > 5.00 %")
    probe = srch.Probe(1000.0, "1000 msg/s", "s", [o, srch.judge(dict(bad, metrics={"loss_ratio": 0.08}), c),
                                                   srch.judge(ok, c)])
    assert probe.why_not() == ("message loss up to 8.00 % > 1.00 % (2 of 3 runs); latency p99 80.0 ms > 50.0 ms "
                               "(1 of 3 runs); sends held back 20.0 % > 5.00 % (1 of 3 runs)")
    assert not srch.judge(dict(ok, status="failed", failure_reason="agent died"), c).ok
    assert srch.judge(dict(ok, validity="invalid", validity_reasons=["incomplete"]), c).reasons == ("invalid: incomplete",)
    # a limit left out is not checked
    assert srch.judge(bad, srch.Criteria(max_loss=None, max_p99_us=None, max_held=None)).ok


@pytest.mark.parametrize("kind, value, label", [("msg_rate", 2828.43, "2830 msg/s"), ("rate", 14_142_135.6, "14.1 Mbit/s"),
                                                ("rate", 999.0, "999 bit/s"), ("number", 1414.2, 1410)])
def test_load_labels_round_trip(kind, value, label):
    assert srch.load_label(kind, value) == label
    assert srch.load_kind(label, "x")[0] == kind
    with pytest.raises(SpecError, match="expected a message rate"):
        srch.load_kind("10 ms", "--from")


SCENARIO = """
[scenario]
name = "load"
seed = 3

[[host]]
name = "a"
[[host]]
name = "b"

[[link]]
between = ["a", "b"]
rate = "10 Mbit/s"

[workload]
pattern = "stream"
protocol = "${protocol}"
from = "a"
to = ["b"]
messages = 500
rate = "${load}"
payload = "1 KiB"

[sweep]
protocol = ["udp", "tcp"]
load = ["1000 msg/s"]
"""


def test_probe_sweep_sets_the_load_fixes_the_other_keys_and_repeats(tmp_path):
    path = tmp_path / "load.toml"
    path.write_text(SCENARIO)
    data = srch.read_data(path)
    assert srch.other_points(data, "load", path) == [{"protocol": "udp"}, {"protocol": "tcp"}]
    with pytest.raises(SpecError, match="no key 'rate' to search; expected one of its keys \\(protocol, load\\)"):
        srch.other_points(data, "rate", path)
    sweep = srch.probe_sweep(path, "load", "2500 msg/s", 3, {"protocol": "tcp"})
    assert len(sweep.runs) == 3 and [r.repeat for r in sweep.runs] == [0, 1, 2]
    assert {r.workload.rate_msgs_per_s for r in sweep.runs} == {2500.0}
    assert {r.workload.protocol for r in sweep.runs} == {"tcp"}
    assert sweep.runs[0].params == {"protocol": "tcp", "load": "2500 msg/s"}
    again = srch.probe_sweep(path, "load", "2500 msg/s", 3, {"protocol": "tcp"})
    other = srch.probe_sweep(path, "load", "5000 msg/s", 3, {"protocol": "tcp"})
    assert again.sweep_id == sweep.sweep_id != other.sweep_id  # a stopped search finds its runs again
    assert [r.run_id for r in again.runs] == [r.run_id for r in sweep.runs]
