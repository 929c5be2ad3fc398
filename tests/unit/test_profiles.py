"""The link profile table (spec/profiles.toml): every number sourced, the wire reading the same table, the CLI.

`roughnet profiles check` itself (ping and iperf3 over namespaces) is tests/integration/test_profiles_check.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from roughnet import meter
from roughnet.binaries import find_binary
from roughnet.spec import profiles as table
from roughnet.spec.wire import PROFILES

ROUGHNET = [sys.executable, "-m", "roughnet.cli"]
NAMES = [p.name for p in table.table()]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ROUGHNET, *args], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("name", NAMES)
def test_every_number_has_a_source_with_a_date_and_a_method(name: str) -> None:
    p = table.get(name)
    assert p is not None and p.network and p.sources
    assert table.unsourced(p) == [], f"{name}: numbers without a source"
    for s in p.sources:
        assert s.figure and s.cites and s.derived and s.checked
        assert re.match(r"\d{4}-\d{2}-\d{2}|not re-checked", s.checked), s.checked
        for k in s.keys:  # a source's key names something in the link (no stale keys)
            assert any(path == k or path.startswith(k + ".") for path, _ in p.parameters()), \
                f"{name}: source key {k} names nothing"
    assert "assumed" not in " ".join(s.derived for s in p.sources).lower()
    for m in p.meter:
        assert m.figure in table.METER_FIGURES and m.tolerance > 0 and m.why


def test_a_number_without_a_source_is_found() -> None:
    (p,) = table.parse("""
[[profile]]
name = "x"
network = "n"
[profile.link.both]
rate_bps = 1000
delay_ns = 5
[[profile.source]]
keys = ["both.rate_bps"]
figure = "f"
cites = "c"
derived = "d"
checked = "2026-12-07"
[[profile.meter]]
figure = "rtt_p42_ms"
cited = 1
tolerance = 1
why = "w"
""")
    assert table.unsourced(p) == ["both.delay_ns", "meter rtt_p42_ms"]


def test_the_scenario_names_are_the_tables() -> None:
    assert PROFILES == tuple(NAMES)
    assert {"ethernet-1g", "lte", "wifi-noisy", "hf-modem", "v2v-80211p", "starlink-mobile", "5g-mmwave"} <= set(NAMES)


@pytest.mark.skipif(find_binary("roughnet-wire") is None, reason="roughnet-wire is not built (make build)")
@pytest.mark.parametrize("name", NAMES)
def test_the_wire_compiles_the_same_numbers(name: str) -> None:
    out = subprocess.run([str(find_binary("roughnet-wire")), "--print-profile", name], capture_output=True,
                         text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    rust = json.loads(out.stdout)
    want = table.get(name).link_config()
    expected = {k: v for k, v in rust.items() if k not in ("a_to_b", "b_to_a", "half_duplex")}
    expected.update({"distance_trace": [], "schedule": [], **{k: v for k, v in want.items() if k not in
                                                                 ("a_to_b", "b_to_a", "half_duplex")}})
    for side in ("a_to_b", "b_to_a"):
        expected[side] = {**DIRECTION_DEFAULTS, **want.get(side, {})}
    expected["half_duplex"] = None if "half_duplex" not in want else {**HALF_DUPLEX_DEFAULTS, **want["half_duplex"]}
    if "loss" in want.get("a_to_b", {}) and want["a_to_b"]["loss"]["model"] == "ieee80211p":
        for side in ("a_to_b", "b_to_a"):  # serde fills the model's own defaults; the table writes them all
            expected[side]["loss"] = {**rust[side]["loss"], **want[side]["loss"]}
    assert rust == expected, f"{name}: the wire's compiled profile differs from the table"


#: wire-core's defaults (config.rs) of what a profile leaves out, as --print-profile writes them.
DIRECTION_DEFAULTS = {"allow_reorder": False, "corrupt": 0.0, "delay_ns": 0, "delivery_trace": None, "duplicate": 0.0,
                      "jitter_correlation": 0.0, "jitter_dist": "uniform", "jitter_ns": 0, "loss": {"model": "none"},
                      "mtu": None, "overhead_bytes": 0, "queue_bytes": None, "queue_packets": None, "rate_bps": None,
                      "reorder": 0.0, "reorder_gap": 0}
HALF_DUPLEX_DEFAULTS = {"buffer_bytes": None, "max_frame_bytes": None, "turnaround_ns": 0}


def test_list_show_and_unknown_names() -> None:
    out = cli("profiles")
    assert out.returncode == 0, out.stderr
    for name in NAMES:
        assert name in out.stdout
    shown = cli("profiles", "show", "starlink-mobile")
    assert shown.returncode == 0, shown.stderr
    for needle in ("a_to_b.jitter_ns", "18,840,000", "NUWiNS", "derived:", "checked: 2026-12-07",
                   "roughnet profiles check starlink-mobile", "you supply:"):
        assert needle in shown.stdout, needle
    as_json = json.loads(cli("profiles", "show", "lte", "--json").stdout)
    assert as_json["link"]["b_to_a"]["rate_bps"] == 13_000_000
    assert all(par["source"] for par in as_json["parameters"])
    for args in (("profiles", "show", "token-ring"), ("profiles", "check", "token-ring"), ("profiles", "check")):
        bad = cli(*args)
        assert bad.returncode == 2, (args, bad.stdout, bad.stderr)
        assert "ethernet-1g" in bad.stderr and "starlink-mobile" in bad.stderr  # the known names are listed
        assert "Traceback" not in bad.stderr


def test_ping_and_iperf_output_parsed() -> None:
    text = "\n".join(f"64 bytes from 198.18.0.2: icmp_seq={i} ttl=64 time={10 + i}.5 ms" for i in range(1, 9))
    got = meter.parse_ping(text + "\n--- 198.18.0.2 ping statistics ---\n", 10)
    assert got["received"] == 8 and got["loss"] == pytest.approx(0.2)
    assert got["loss_oneway"] == pytest.approx(1 - 0.8 ** 0.5)
    assert got["rtt_p50_ms"] == pytest.approx(15.0)
    iv = [{"sum": {"seconds": 1.0, "bits_per_second": b}} for b in (1e6, 7e6, 7e6, 7e6, 2e6)]
    assert meter.parse_iperf_server(json.dumps({"intervals": iv})) == pytest.approx(7 * 1442 / 1400)
    assert meter.parse_iperf_server("not json") is None


def test_link_rate_read_from_the_interface_counter_over_the_steady_seconds() -> None:
    dev = ("Inter-|   Receive\n face |bytes    packets\n    lo:       0       0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
           "rn0-metb: 123456    89 0 0 0 0 0 0 4242 11 0 0 0 0 0 0\n")
    assert meter.rx_bytes(dev, "rn0-metb") == 123456 and meter.rx_bytes(dev, "rn0-meta") is None
    # 3 kB of control exchange, then 10 Mbit/s for 4 s with the first 0.5 s at half rate (the queue filling),
    # then 2 kB of results: the steady figure is the 10 Mbit/s, not the average over the whole.
    samples, b = [], 0
    for i in range(300):
        t = i * 0.02
        if i == 5:
            b += 3000
        elif 10 <= i < 210:
            b += int((5e6 if i < 35 else 10e6) / 8 * 0.02)
        elif i == 260:
            b += 2000
        samples.append((100 + t, b))
    assert meter.steady_rate(samples) == pytest.approx(10.0, rel=1e-3)
    assert meter.steady_rate([(0.0, 5), (1.0, 5)]) is None  # nothing moved
    assert meter.steady_rate([(0.0, 0), (0.5, 10_000), (1.0, 20_000)]) is None  # too short for a steady part


def test_pings_never_load_a_slow_link_beyond_a_quarter() -> None:
    n, interval = meter.ping_plan(table.get("hf-vara-slow"), None)
    # two 98-byte frames at 441 bit/s and two turnarounds per ping: 5.2 s of medium; 4x that between pings
    assert interval == pytest.approx(4 * (2 * 98 * 8 / 441 + 2 * 0.842), rel=1e-6) and n >= 3
    assert meter.ping_plan(table.get("lte"), None) == (300, 0.2)
    assert meter.ping_plan(table.get("lte"), 50) == (50, 0.2)


def test_the_profiles_page_is_generated_from_the_table() -> None:
    committed = table.DOCS_PATH.read_text(encoding="utf-8")
    assert committed == table.render_markdown(), "docs/profiles.md is stale: run python -m roughnet.spec.docs"
    for p in table.table():
        assert f"## {p.name}" in committed


def test_json_lists_are_one_object_a_line() -> None:
    out = cli("profiles", "--json")
    lines = out.stdout.splitlines()
    assert len(lines) == len(NAMES) and [json.loads(ln)["name"] for ln in lines] == NAMES
