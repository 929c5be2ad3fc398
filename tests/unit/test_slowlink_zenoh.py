"""run.slowlink: a run's round trip from its links, and Zenoh timeouts derived from it (no root)."""

from __future__ import annotations

from roughnet import runspec
from roughnet.run.slowlink import HANDSHAKE_BYTES, ZENOH_DEFAULT_NS, path_rtt_ns, zenoh_timing

S = 1_000_000_000
#: A profile as roughnet-wire prints it (a LinkConfig): 4 s each way, 1475 bit/s, half duplex.
MODEM = {"a_to_b": {"rate_bps": 1475, "delay_ns": 4 * S}, "b_to_a": {"rate_bps": 1475, "delay_ns": 4 * S},
         "half_duplex": {"turnaround_ns": S // 2}}


def _run(*links: runspec.Link) -> runspec.Run:
    w = runspec.Workload(pattern="sync", protocol="zenoh", sender="a", receivers=("b",), payload_bytes=200)
    return runspec.Run(scenario="t", sweep_id="t-0", run_id="0" * 12, index=0, params={}, seed=1, repeat=0,
                       hosts=(runspec.Host("a"), runspec.Host("b")), links=links, workload=w)


def _profile(name: str) -> dict:
    assert name == "modem"
    return MODEM


def test_ordinary_links_keep_zenohs_defaults() -> None:
    fast = runspec.Direction(rate_bps=10_000_000, delay_ns=20_000_000)
    run = _run(runspec.Link(index=0, hosts=("a", "b"), forward=fast, reverse=fast))
    assert 0 < path_rtt_ns(run, _profile) < S
    assert zenoh_timing(run, {}, _profile) == {}


def test_a_modem_profile_raises_open_timeout_and_lease_to_several_round_trips() -> None:
    run = _run(runspec.Link(index=0, hosts=("a", "b"), profile="modem"))
    rtt = path_rtt_ns(run, _profile)
    serialisation = HANDSHAKE_BYTES * 8 * S / 1475
    assert rtt >= 8 * S + 2 * serialisation + S  # both delays, both directions' bytes, two turnarounds
    got = zenoh_timing(run, {}, _profile)
    assert set(got) == {"open_timeout", "lease"}
    assert got["open_timeout"] == got["lease"] >= 3 * rtt > ZENOH_DEFAULT_NS
    assert got["open_timeout"] % S == 0


def test_explicit_values_win_and_hops_add_up() -> None:
    slow = runspec.Direction(rate_bps=9600, delay_ns=2 * S)
    one = _run(runspec.Link(index=0, hosts=("a", "b"), forward=slow, reverse=slow))
    two = _run(runspec.Link(index=0, hosts=("a", "m"), forward=slow, reverse=slow),
               runspec.Link(index=1, hosts=("m", "b"), forward=slow, reverse=slow))
    assert path_rtt_ns(two, _profile) == 2 * path_rtt_ns(one, _profile)
    assert zenoh_timing(one, {"lease": 5 * S}, _profile).keys() == {"open_timeout"}
    assert zenoh_timing(one, {"lease": 5 * S, "open_timeout": 60 * S}, _profile) == {}
