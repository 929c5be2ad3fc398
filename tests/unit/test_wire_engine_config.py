"""The wire engine's pure parts: LinkConfig from runspec links, profile merging, counters, the validity rule.

No namespaces: the stats line below was captured from a real roughnet-wire (tests/unit/fixtures/wire_stats.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roughnet.links.wire import counters_from_stats, direction_config, link_config
from roughnet.run import collect
from roughnet.runspec import Direction, Link

FIXTURES = Path(__file__).parent / "fixtures"


def test_default_direction_is_empty_and_link_sets_mtu_both_ways():
    cfg = link_config(Link(index=0, hosts=("a", "b"), mtu=1400))
    assert cfg == {"a_to_b": {"mtu": 1400}, "b_to_a": {"mtu": 1400}}


def test_forward_is_a_to_b_and_every_field_maps():
    fwd = Direction(rate_bps=10_000_000, delay_ns=10_000_000, jitter_ns=2_000_000, jitter_dist="paretonormal",
                    jitter_correlation=0.25, allow_reorder=True, reorder=0.1, reorder_gap=5, duplicate=0.01,
                    corrupt=0.02, overhead_bytes=24, queue_packets=50, queue_bytes=64000)
    rev = Direction(loss=0.1)
    link = Link(index=3, hosts=("a", "b"), forward=fwd, reverse=rev,
                half_duplex={"turnaround_ns": 1000}, schedule=({"at_ns": 5, "up": False},),
                distance_trace=({"at_ns": 0, "distance_m": 10.0},))
    cfg = link_config(link)
    assert cfg["a_to_b"] == {
        "rate_bps": 10_000_000, "delay_ns": 10_000_000, "jitter_ns": 2_000_000, "jitter_dist": "paretonormal",
        "jitter_correlation": 0.25, "allow_reorder": True, "reorder": 0.1, "reorder_gap": 5, "duplicate": 0.01,
        "corrupt": 0.02, "overhead_bytes": 24, "queue_packets": 50, "queue_bytes": 64000, "mtu": 1500,
    }
    assert cfg["b_to_a"] == {"loss": {"model": "bernoulli", "p": 0.1}, "mtu": 1500}
    assert cfg["half_duplex"] == {"turnaround_ns": 1000}
    assert cfg["schedule"] == [{"at_ns": 5, "up": False}]
    assert cfg["distance_trace"] == [{"at_ns": 0, "distance_m": 10.0}]
    json.dumps(cfg)  # plain JSON


def test_loss_model_wins_over_bernoulli():
    d = Direction(loss=0.5, loss_model={"model": "gilbert_elliott", "p": 0.01, "r": 0.3})
    assert direction_config(d)["loss"] == {"model": "gilbert_elliott", "p": 0.01, "r": 0.3}


def test_profile_is_merged_under_explicit_values():
    profile = {
        "a_to_b": {"rate_bps": 5_000_000, "delay_ns": 35_000_000, "jitter_ns": 5_000_000, "jitter_dist": "normal",
                   "queue_packets": 1000, "mtu": None, "loss": {"model": "none"}},
        "b_to_a": {"rate_bps": 12_000_000, "delay_ns": 35_000_000},
        "half_duplex": None, "schedule": [], "distance_trace": [],
    }
    link = Link(index=0, hosts=("a", "b"), profile="lte", forward=Direction(delay_ns=10_000_000, loss=0.02))
    cfg = link_config(link, profile)
    assert cfg["a_to_b"]["delay_ns"] == 10_000_000  # explicit wins
    assert cfg["a_to_b"]["rate_bps"] == 5_000_000  # the profile's stays
    assert cfg["a_to_b"]["jitter_dist"] == "normal"
    assert cfg["a_to_b"]["loss"] == {"model": "bernoulli", "p": 0.02}
    assert cfg["a_to_b"]["mtu"] == 1500
    assert cfg["b_to_a"] == {"rate_bps": 12_000_000, "delay_ns": 35_000_000, "mtu": 1500}
    assert "half_duplex" not in cfg and "schedule" not in cfg
    assert profile["a_to_b"]["delay_ns"] == 35_000_000  # the profile dict is not modified


def test_link_half_duplex_goes_over_the_profiles_key_by_key():
    profile = {"a_to_b": {}, "b_to_a": {}, "half_duplex": {"turnaround_ns": 500_000_000, "buffer_bytes": 4096}}
    assert link_config(Link(index=0, hosts=("a", "b")), profile)["half_duplex"] == {
        "turnaround_ns": 500_000_000, "buffer_bytes": 4096}
    own = Link(index=0, hosts=("a", "b"), half_duplex={"turnaround_ns": 1})
    assert link_config(own, profile)["half_duplex"] == {"turnaround_ns": 1, "buffer_bytes": 4096}
    # hf-sync.toml's case: only a frame limit written, the profile's turnaround and buffer stay
    frame = Link(index=0, hosts=("a", "b"), half_duplex={"max_frame_bytes": 590})
    assert link_config(frame, profile)["half_duplex"] == {
        "turnaround_ns": 500_000_000, "buffer_bytes": 4096, "max_frame_bytes": 590}


def _stats() -> dict:
    return json.loads((FIXTURES / "wire_stats.json").read_text())


def test_drops_loss_counts_frame_error_drops_too():
    # The per-reason key of `loss` has the aggregate's name: the aggregate must win.
    stats = _stats()
    stats["a_to_b"]["drops"].update(loss=5, frame_error=7)
    fwd = counters_from_stats(stats, {"a_to_b": {}, "b_to_a": {}})["forward"]
    assert fwd["drops_loss"] == 12 and fwd["drops_frame_error"] == 7


def test_counters_from_a_real_stats_line():
    stats = _stats()
    config = {"a_to_b": {"delay_ns": 10_000_000}, "b_to_a": {}}
    c = counters_from_stats(stats, config)
    assert c["engine"] == "wire" and c["half_duplex"] is False
    fwd, rev = c["forward"], c["reverse"]
    a2b = stats["a_to_b"]
    assert fwd["rx_packets"] == a2b["packets_in"] and fwd["tx_packets"] == a2b["packets_out"]
    assert fwd["drops_loss"] == a2b["drops"]["loss"] + a2b["drops"]["frame_error"]
    assert fwd["drops_queue"] == a2b["drops"]["queue_full"] + a2b["drops"]["overrun"]
    for reason, n in a2b["drops"].items():
        if reason != "loss":  # drops_loss is loss + frame_error (checked above and below)
            assert fwd[f"drops_{reason}"] == n
    assert fwd["sched_error_p99_us"] == pytest.approx(a2b["sched_error"]["p99_us"])
    assert fwd["sched_error_max_us"] == pytest.approx(a2b["sched_error"]["max_us"])
    assert fwd["queue_high_packets"] == a2b["queue_high_packets"]
    assert fwd["configured_delay_ns"] == 10_000_000 and rev["configured_delay_ns"] == 0
    assert rev["rx_packets"] == stats["b_to_a"]["packets_in"]
    # The collector's drop metrics read the wire's counters like any engine's.
    m = collect.link_drop_metrics({0: c})
    assert m["link_drops_loss"] == fwd["drops_loss"] + rev["drops_loss"]


def _wire_counters(p99_us=50.0, delay_ns=0, overrun=0, half_duplex=False):
    d = {"sched_error_p99_us": p99_us, "sched_error_max_us": p99_us * 2, "configured_delay_ns": delay_ns,
         "drops_overrun": overrun, "drops_loss": 0, "drops_queue": overrun}
    return {"engine": "wire", "forward": dict(d), "reverse": dict(d, sched_error_p99_us=10.0, drops_overrun=0),
            "half_duplex": half_duplex}


@pytest.mark.parametrize("p99_us,delay_ns,suspect", [
    (50.0, 0, False),
    (999.0, 0, False),
    (1001.0, 0, True),  # past 1 ms with no delay
    (5000.0, 100_000_000, False),  # 5 ms is within 10 % of 100 ms
    (10_500.0, 100_000_000, True),  # 10.5 ms is not
])
def test_scheduling_error_threshold(p99_us, delay_ns, suspect):
    reasons = collect.wire_reasons({0: _wire_counters(p99_us, delay_ns)})
    assert bool(reasons) is suspect
    if suspect:
        assert "emulator fell behind on link 0 forward" in reasons[0]
    validity, why = collect.verdict("stream", [], {}, {}, {0: _wire_counters(p99_us, delay_ns)})
    assert validity == ("suspect" if suspect else "valid")
    assert why == reasons


def test_overrun_is_a_reason_only_without_half_duplex():
    assert "not half duplex" in collect.wire_reasons({1: _wire_counters(overrun=3)})[0]
    assert collect.wire_reasons({1: _wire_counters(overrun=3, half_duplex=True)}) == []


def test_other_engines_counters_are_ignored_and_verdict_defaults_unchanged():
    kernel = {"engine": "kernel", "forward": {"drops_loss": 5, "sched_error_p99_us": 1e9}, "reverse": {}}
    assert collect.wire_reasons({0: kernel}) == []
    assert collect.wire_reasons(None) == []
    assert collect.verdict("stream", [], {}, {}) == ("valid", [])


def test_expected_loss_models():
    from roughnet.calibrate import expected_loss, loss_runs

    assert expected_loss(None, 100) == (0.0, 0.0)
    p, b = expected_loss({"model": "bernoulli", "p": 0.1}, 100)
    assert p == pytest.approx(0.1) and b == pytest.approx(1 / 0.9)
    # Simple Gilbert (h = 0, k = 1): loss p / (p + r), mean burst 1 / r.
    p, b = expected_loss({"model": "gilbert_elliott", "p": 0.05, "r": 0.3}, 100)
    assert p == pytest.approx(0.05 / 0.35) and b == pytest.approx(1 / 0.3)
    # Markov4 with only isolated losses (p14): bursts of exactly one frame, loss p14 / (1 + p14).
    p, b = expected_loss({"model": "markov4", "p13": 0.0, "p14": 0.2}, 100)
    assert b == pytest.approx(1.0) and p == pytest.approx(0.2 / 1.2)
    p, _ = expected_loss({"model": "size_dependent", "ber": 1e-5}, 1000)
    assert p == pytest.approx(1 - (1 - 1e-5) ** 8000)
    assert expected_loss({"model": "ieee80211p"}, 100) is None
    assert loss_runs([0, 3, 4, 8], 10) == [2, 3, 1]


def test_kernel_drops_at_the_emulators_socket_make_a_run_suspect():
    c = _wire_counters()
    c["reverse"]["rx_kernel_drops"] = 4
    reasons = collect.wire_reasons({2: c})
    assert len(reasons) == 1 and "link 2 reverse" in reasons[0] and "dropped 4 frame(s)" in reasons[0]
    assert collect.wire_reasons({2: _wire_counters()}) == []
