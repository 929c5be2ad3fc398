"""The wire-only link keys: each key resolved into runspec fields in base units, the JSON shapes of
wire-core (loss models, half duplex, schedule, distance trace), every bad value with its message,
the profile names against crates/wire-core/src/profiles.rs, and ids of older files unchanged."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import jsonschema
import pytest

from roughnet import runspec
from roughnet.plan import plan_sweep
from roughnet.spec import ScenarioError, json_schema
from roughnet.spec.timeline import parse_distance_csv
from roughnet.spec.wire import PROFILES, parse_db, parse_dbm, parse_distance_m, parse_frequency_hz

from conftest import toml_hosts, toml_stream
from specutil import plan_error, plan_text

FIXTURES = Path(__file__).parent / "fixtures" / "scenarios"
REPO = Path(__file__).resolve().parents[2]

HEAD = """\
[scenario]
name = "w"

""" + toml_hosts("a", "b") + """
[[link]]
between = ["a", "b"]
"""
WORKLOAD = "\n" + toml_stream("udp")


def scenario(link: str, after: str = "", sweep: str = "") -> str:
    """A two-host scenario whose [[link]] has ``link`` (keys), followed by ``after`` (its sub-tables)."""
    return HEAD + link + "\n" + after + "\n" + WORKLOAD + ("\n[sweep]\n" + sweep if sweep else "")


def runs(text: str, source: str = "case.toml") -> tuple[runspec.Run, ...]:
    return plan_text(text, source).runs


def link_of(link: str, after: str = "") -> runspec.Link:
    return runs(scenario(link, after))[0].links[0]


def error_of(text: str, source: str = "case.toml") -> str:
    return str(plan_error(text, source))


# ----------------------------------------------------------------------------- each key, resolved


@pytest.mark.parametrize(
    ("keys", "field", "value"),
    [
        ('jitter = "1 ms"\ndelay = "2 ms"\njitter_distribution = "pareto"', "jitter_dist", "pareto"),
        ('jitter = "1 ms"\ndelay = "2 ms"\njitter_distribution = "paretonormal"', "jitter_dist", "paretonormal"),
        ('jitter = "1 ms"\ndelay = "2 ms"\njitter_correlation = "25%"', "jitter_correlation", 0.25),
        ('jitter = "1 ms"\ndelay = "2 ms"\nreorder_by_jitter = true', "allow_reorder", True),
        ('delay = "2 ms"\nreorder = "5%"', "reorder", 0.05),
        ('delay = "2 ms"\nreorder = "5%"\nreorder_gap = 5', "reorder_gap", 5),
        ('duplicate = "1%"', "duplicate", 0.01),
        ('corrupt = "0.1%"', "corrupt", 0.001),
        ('rate = "10 Mbit/s"\noverhead = "24 B"', "overhead_bytes", 24),
        ('rate = "10 Mbit/s"\noverhead = "1 KiB"', "overhead_bytes", 1024),
    ],
)
def test_each_direction_key_resolves_into_base_units(keys: str, field: str, value: object) -> None:
    link = link_of(keys)
    assert getattr(link.forward, field) == value
    assert getattr(link.reverse, field) == value


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ('{ model = "gilbert_elliott", p = "1%", r = "25%" }',
         {"model": "gilbert_elliott", "p": 0.01, "r": 0.25, "h": 0.0, "k": 1.0}),
        ('{ model = "gilbert_elliott", p = "1%", r = "30%", h = "20%", k = "99.9%" }',
         {"model": "gilbert_elliott", "p": 0.01, "r": 0.3, "h": 0.2, "k": 0.999}),
        ('{ model = "markov4", p13 = "2%" }',
         {"model": "markov4", "p13": 0.02, "p32": 0.0, "p23": 0.0, "p14": 0.0}),
        ('{ model = "markov4", p13 = "1%", p31 = "70%", p32 = "20%", p23 = "10%", p14 = "0.5%" }',
         {"model": "markov4", "p13": 0.01, "p31": 0.7, "p32": 0.2, "p23": 0.1, "p14": 0.005}),
        ('{ model = "size_dependent", ber = 1e-6 }', {"model": "size_dependent", "ber": 1e-6}),
        ('{ model = "size_dependent", ber = 0 }', {"model": "size_dependent", "ber": 0.0}),
        ('{ model = "ieee80211p" }', {"model": "ieee80211p"}),
        ('{ model = "ieee80211p", distance = "1.5 km", tx_power = "-3 dBm", ref_loss = "47.86 dB", '
         'exponent_near = 2, exponent_far = 3.8, critical_distance = "100 m", noise_figure = "7 dB", '
         'bandwidth = "10 MHz", bit_rate = "6 Mbit/s", shadowing = "4 dB" }',
         {"model": "ieee80211p", "distance_m": 1500.0, "tx_power_dbm": -3.0, "ref_loss_db": 47.86,
          "exponent_near": 2.0, "exponent_far": 3.8, "critical_distance_m": 100.0, "noise_figure_db": 7.0,
          "bandwidth_hz": 1e7, "bit_rate_bps": 6e6, "shadowing_db": 4.0}),
    ],
)  # fmt: skip
def test_loss_models_become_wire_core_json(model: str, expected: dict) -> None:
    link = link_of(f"loss_model = {model}")
    assert link.forward.loss_model == expected
    assert link.forward.loss == 0.0
    assert "loss_model" in link.needs() and "loss" not in link.needs()


def test_a_direction_table_replaces_the_links_loss_choice() -> None:
    link = link_of('loss_model = { model = "gilbert_elliott", p = "1%", r = "25%" }',
                   '[link.reverse]\nloss = "2%"\n[link.forward]\nduplicate = "1%"')  # fmt: skip
    assert link.reverse.loss == 0.02 and link.reverse.loss_model is None
    assert link.forward.loss_model is not None and link.forward.loss == 0.0
    back = link_of('loss = "2%"', '[link.forward]\nloss_model = { model = "size_dependent", ber = 1e-5 }')
    assert back.forward.loss == 0.0 and back.forward.loss_model == {"model": "size_dependent", "ber": 1e-5}
    assert back.reverse.loss == 0.02 and back.reverse.loss_model is None


def test_half_duplex_profile_and_needs() -> None:
    link = link_of('profile = "hf-modem"\nhalf_duplex = { turnaround = "500 ms", frame_limit = "255 B", '
                   'buffer = "4 KiB" }')  # fmt: skip
    assert link.profile == "hf-modem"
    assert link.half_duplex == {"turnaround_ns": 500_000_000, "max_frame_bytes": 255, "buffer_bytes": 4096}
    assert {"profile", "half_duplex"} <= link.needs()
    assert link.forward == runspec.Direction()  # the profile's values are the engine's to merge
    assert link_of("half_duplex = {}").half_duplex == {}  # nothing written: the profile's or wire-core's defaults
    assert link_of('half_duplex = { turnaround = "0 ms" }').half_duplex == {"turnaround_ns": 0}


def test_fixtures_resolve_and_ask_for_the_wire_capabilities() -> None:
    imp = plan_sweep(FIXTURES / "wire-impairments.toml").runs[0].links[0]
    assert imp.forward.jitter_dist == "paretonormal" and imp.reverse.jitter_dist == "normal"
    assert imp.reverse.allow_reorder and not imp.forward.allow_reorder
    assert imp.reverse.loss == 0.02 and imp.reverse.loss_model is None
    assert {"jitter_shape", "reorder", "loss_model", "duplicate", "corrupt", "overhead", "loss"} <= imp.needs()
    hf = plan_sweep(FIXTURES / "wire-hf-modem.toml").runs[0].links[0]
    assert hf.profile == "hf-modem" and hf.half_duplex == {"buffer_bytes": 16384}
    v2v = plan_sweep(FIXTURES / "wire-v2v.toml")
    assert [r.links[0].distance_trace for r in v2v.runs][0] == v2v.runs[1].links[0].distance_trace
    assert "distance_trace" in v2v.runs[0].links[0].needs()


# ----------------------------------------------------------------------------- schedules and distance traces


def test_schedule_patches_the_state_before_it_and_maps_to_scheduled_changes() -> None:
    link = plan_sweep(FIXTURES / "wire-schedule.toml").runs[0].links[0]
    assert link.needs() >= {"schedule"}
    first, down, up = link.schedule
    # Forward only; the keys not given (rate) keep the link's values; loss becomes a Bernoulli model.
    assert first == {"at_ns": 10_000_000_000, "a_to_b": {"rate_bps": 100_000_000, "delay_ns": 50_000_000,
                                                          "loss": {"model": "bernoulli", "p": 0.05}, "mtu": 1500}}
    assert down == {"at_ns": 20_000_000_000, "up": False}
    assert up["at_ns"] == 25_000_000_000 and up["up"] is True
    # Both directions: forward keeps the 50 ms of the first entry, reverse still has the link's 5 ms;
    # the 4-state model replaces forward's Bernoulli loss.
    markov = {"model": "markov4", "p13": 0.01, "p31": 0.7, "p32": 0.2, "p23": 0.1, "p14": 0.005}
    assert up["a_to_b"] == {"rate_bps": 10_000_000, "delay_ns": 50_000_000, "loss": markov, "mtu": 1500}
    assert up["b_to_a"] == {"rate_bps": 10_000_000, "delay_ns": 5_000_000, "loss": markov, "mtu": 1500}


def test_schedule_of_a_direction_overridden_link_and_new_keys() -> None:
    link = link_of('delay = "10 ms"\nmtu = 9000',
                   '[link.reverse]\ndelay = "1 ms"\n[[link.schedule]]\nat = "1.5 s"\nduplicate = "2%"\n'
                   'direction = "reverse"')  # fmt: skip
    assert link.schedule == ({"at_ns": 1_500_000_000, "b_to_a": {"delay_ns": 1_000_000, "duplicate": 0.02,
                                                                  "mtu": 9000}},)  # fmt: skip


def test_distance_trace_file_is_read_relative_to_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "tr").mkdir()
    (tmp_path / "tr" / "d.csv").write_text("0,50\n0.5, 60.25\n\n# comment\n2,60.25 # held\n")
    file = tmp_path / "s.toml"
    file.write_text(scenario('loss_model = { model = "ieee80211p" }\ndistance_trace = "tr/d.csv"'))
    link = plan_sweep(file).runs[0].links[0]
    assert link.distance_trace == ({"at_ns": 0, "distance_m": 50.0}, {"at_ns": 500_000_000, "distance_m": 60.25},
                                   {"at_ns": 2_000_000_000, "distance_m": 60.25})  # fmt: skip
    fixture = plan_sweep(FIXTURES / "wire-v2v.toml").runs[0].links[0].distance_trace
    assert fixture[0] == {"at_ns": 0, "distance_m": 50.0} and fixture[2] == {"at_ns": 70 * 10**9, "distance_m": 600.0}


def test_inline_distance_points() -> None:
    link = link_of('loss_model = { model = "ieee80211p" }',
                   '[[link.distance]]\nat = "0 s"\ndistance = "50 m"\n[[link.distance]]\nat = "1 min"\n'
                   'distance = "0.4 km"')  # fmt: skip
    assert link.distance_trace == ({"at_ns": 0, "distance_m": 50.0}, {"at_ns": 60 * 10**9, "distance_m": 400.0})


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0,50\n1,-3\n", ["line 2", "negative distance"]),
        ("0,50\n2,50\n1,50\n", ["line 3", "before the line above"]),
        ("0,50\n1;50\n", ["line 2", "1 comma-separated field, not 2"]),
        ("0,50\n1,far\n", ["line 2", "field 2 is not a number"]),
        ("time_s,metres\n# nothing\n", ["no points"]),
        ("0,50,1\n", ["line 1", "3 comma-separated fields, not 2"]),
    ],
)
def test_distance_csv_errors_name_the_line(text: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        parse_distance_csv(text, "d.csv")
    assert all(w in str(info.value) for w in words), info.value
    assert "expected a CSV file of 'time_s,metres' lines" in str(info.value)


def test_missing_or_bad_trace_file_is_a_spec_error(tmp_path: Path) -> None:
    file = tmp_path / "s.toml"
    file.write_text(scenario('loss_model = { model = "ieee80211p" }\ndistance_trace = "nope.csv"'))
    with pytest.raises(ScenarioError) as info:
        plan_sweep(file)
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"{file}: link[0].distance_trace: cannot read {tmp_path / 'nope.csv'}"), first
    assert '(got "nope.csv")' in first
    (tmp_path / "nope.csv").write_text("0,1\n1,x\n")
    with pytest.raises(ScenarioError, match=r"link\[0\]\.distance_trace: .*nope\.csv line 2: field 2 is not a number"):
        plan_sweep(file)


# ----------------------------------------------------------------------------- bad values


@pytest.mark.parametrize(
    ("link", "after", "path", "words"),
    [
        ('jitter_distribution = "gauss"', "", "link[0].jitter_distribution", ['one of "uniform", "normal"']),
        ('jitter = "1 ms"\ndelay = "1 ms"\njitter_correlation = "100%"', "", "link[0].jitter_correlation",
         ["100% or more", "less than 100%"]),
        ('jitter_correlation = "25%"', "", "link[0].jitter_correlation", ["jitter_correlation without jitter"]),
        ('jitter_distribution = "normal"', "", "link[0].jitter_distribution", ["without jitter"]),
        ("reorder_by_jitter = true", "", "link[0].reorder_by_jitter", ["without jitter"]),
        ('reorder = "5%"', "", "link[0].reorder", ["reorder without a delay", "a delay above 0"]),
        ('reorder = "5%"\ndelay = "0 ms"', "", "link[0].reorder", ["reorder without a delay"]),
        ('delay = "1 ms"\nreorder_gap = 3', "", "link[0].reorder_gap", ["reorder_gap without reorder"]),
        ('delay = "1 ms"\nreorder = "1%"\nreorder_gap = 0', "", "link[0].reorder_gap", ["integer from 1"]),
        ('reorder = "101%"', "", "link[0].reorder", ["above 100%"]),
        ('duplicate = "-1%"', "", "link[0].duplicate", ["negative"]),
        ('corrupt = "0.1"', "", "link[0].corrupt", ["missing unit"]),
        ('overhead = "24 B"', "", "link[0].overhead", ["overhead without rate"]),
        ('rate = "1 Mbit/s"\noverhead = "70000 B"', "", "link[0].overhead", ["above 65535 B"]),
        ('rate = "1 Mbit/s"\noverhead = 24', "", "link[0].overhead", ["missing unit"]),
        ('loss = "1%"\nloss_model = { model = "size_dependent", ber = 1e-6 }', "", "link[0].loss_model",
         ["both loss and loss_model"]),
        ('loss_model = { model = "gilbert", p = "1%" }', "", "link[0].loss_model.model",
         ['unknown value', '"gilbert_elliott", "markov4", "size_dependent", "ieee80211p"']),
        ('loss_model = { p = "1%" }', "", "link[0].loss_model.model", ["missing required key"]),
        ('loss_model = { model = "gilbert_elliott", p = "1%" }', "", "link[0].loss_model.r",
         ["missing required key", "bad -> good"]),
        ('loss_model = { model = "gilbert_elliott", p = "1%", r = "150%" }', "", "link[0].loss_model.r",
         ["above 100%"]),
        ('loss_model = { model = "gilbert_elliott", p = 0.01, r = "1%" }', "", "link[0].loss_model.p",
         ["missing unit"]),
        ('loss_model = { model = "gilbert_elliott", p = "1%", r = "1%", q = "1%" }', "", "link[0].loss_model.q",
         ['not a parameter of loss model "gilbert_elliott"', "one of: model, p, r, h, k"]),
        ('loss_model = { model = "markov4", p13 = "60%", p14 = "50%" }', "", "link[0].loss_model.p14",
         ["p13 + p14 above 100%"]),
        ('loss_model = { model = "markov4", p13 = "10%", p32 = "20%" }', "", "link[0].loss_model.p32",
         ["p31 + p32 above 100% (p31 unset: 100% - p13)"]),
        ('loss_model = { model = "size_dependent", ber = 0.7 }', "", "link[0].loss_model.ber", ["0 to 0.5"]),
        ('loss_model = { model = "size_dependent", ber = "1e-6" }', "", "link[0].loss_model.ber",
         ["not a number", "a plain number"]),
        ('loss_model = { model = "ieee80211p", distance = "-5 m" }', "", "link[0].loss_model.distance",
         ["negative value", "distance like '100 m'"]),
        ('loss_model = { model = "ieee80211p", distance = "5 miles" }', "", "link[0].loss_model.distance",
         ["unknown distance unit"]),
        ('loss_model = { model = "ieee80211p", bandwidth = "0 MHz" }', "", "link[0].loss_model.bandwidth",
         ["zero"]),
        ('loss_model = { model = "ieee80211p", critical_distance = "0 m" }', "",
         "link[0].loss_model.critical_distance", ["out of range", "above 0"]),
        ('loss_model = { model = "ieee80211p", tx_power = "20 dB" }', "", "link[0].loss_model.tx_power",
         ["unknown unit 'dB'", "20 dBm"]),
        ('loss_model = { model = "ieee80211p", exponent_far = 11 }', "", "link[0].loss_model.exponent_far",
         ["from 0 to 10"]),
        ('half_duplex = { turnaround = "-1 s" }', "", "link[0].half_duplex.turnaround", ["negative duration"]),
        ('half_duplex = { frame_limit = "14 B" }', "", "link[0].half_duplex.frame_limit", ["below 15 B"]),
        ('half_duplex = { buffer = "0 B" }', "", "link[0].half_duplex.buffer", ["below 1 B"]),
        ('half_duplex = { frame = "255 B" }', "", "link[0].half_duplex.frame",
         ["did you mean 'frame_limit'", "one of: turnaround, frame_limit, buffer"]),
        ('profile = "hf"', "", "link[0].profile", ['"hf-modem"', "unknown value"]),
        ('profile = "wifi-good"\nloss = "0%"', "", "link[0].loss",
         ['"off" value cannot override profile "wifi-good"']),
        ('profile = "ethernet-1g"', '[link.forward]\noverhead = "0 B"', "link[0].forward.overhead",
         ['cannot override profile "ethernet-1g"']),
        ('distance_trace = "x.csv"', "[[link.distance]]\nat = \"0 s\"\ndistance = \"1 m\"", "link[0].distance",
         ["both distance_trace and [[link.distance]]"]),
        ("", "[[link.distance]]\nat = \"0 s\"\ndistance = \"1 m\"", "link[0].distance",
         ['without the loss model that uses it', 'model = "ieee80211p"']),
        ('loss_model = { model = "ieee80211p", distance = "100 m" }', '[[link.distance]]\nat = "0 s"\n'
         'distance = "1 m"', "link[0].loss_model.distance", ["a fixed distance and the link's distance"]),
        ('loss_model = { model = "ieee80211p" }', '[[link.distance]]\nat = "2 s"\ndistance = "1 m"\n'
         '[[link.distance]]\nat = "1 s"\ndistance = "1 m"', "link[0].distance[1].at", ["earlier than"]),
        ('loss_model = { model = "ieee80211p" }', '[[link.distance]]\nat = "2 s"', "link[0].distance[0].distance",
         ["missing required key"]),
        ("", '[[link.schedule]]\nat = "1 s"', "link[0].schedule[0]", ["the entry changes nothing"]),
        ("", '[[link.schedule]]\nat = "1 s"\ndirection = "forward"\ndown = true', "link[0].schedule[0].direction",
         ["direction without impairment keys"]),
        ("", '[[link.schedule]]\nat = "1 s"\ndown = true\nup = true', "link[0].schedule[0].up",
         ["down and up in one entry"]),
        ("", '[[link.schedule]]\nat = "1 s"\ndown = false', "link[0].schedule[0].down", ["only true"]),
        ("", '[[link.schedule]]\nat = "2 s"\ndown = true\n[[link.schedule]]\nat = "1 s"\nup = true',
         "link[0].schedule[1].at", ["earlier than schedule[0]", "time order"]),
        ("", '[[link.schedule]]\nat = "-2 s"\ndown = true', "link[0].schedule[0].at", ["negative duration"]),
        ("", '[[link.schedule]]\ndown = true', "link[0].schedule[0].at", ["missing required key"]),
        ("", '[[link.schedule]]\nat = "1 s"\ndirection = "up"\nloss = "1%"', "link[0].schedule[0].direction",
         ['one of "forward", "reverse", "both"']),
        ('delay = "10 ms"\njitter = "5 ms"', '[[link.schedule]]\nat = "1 s"\ndelay = "1 ms"',
         "link[0].schedule[0].delay", ["jitter larger than delay after this schedule entry"]),
        ("", '[[link.schedule]]\nat = "1 s"\njitter_correlation = "5%"', "link[0].schedule[0].jitter_correlation",
         ["without jitter"]),
        ("", '[[link.schedule]]\nat = "1 s"\nloss = "1%"\nloss_model = { model = "size_dependent", ber = 0 }',
         "link[0].schedule[0].loss_model", ["both loss and loss_model"]),
        ("", '[[link.schedule]]\nat = "1 s"\nmtu = 1400', "link[0].schedule[0].mtu", ["unknown key"]),
        ("", '[link.forward]\nprofile = "lte"', "link[0].forward.profile", ["unknown key"]),
    ],
)  # fmt: skip
def test_bad_values_name_the_key_and_what_was_expected(link: str, after: str, path: str, words: list[str]) -> None:
    message = error_of(scenario(link, after))
    line = next((m for m in message.splitlines() if m.startswith(f"case.toml: {path}:")), None)
    assert line is not None, message
    assert "expected" in line or "missing" in line, line
    for word in words:
        assert word in line, line


def test_a_profile_lets_keys_rely_on_its_values() -> None:
    # The profile supplies jitter and rate, so these keys are not "without jitter / rate" here.
    link = link_of('profile = "wifi-good"\njitter_correlation = "25%"\noverhead = "24 B"')
    assert link.forward.jitter_correlation == 0.25 and link.forward.overhead_bytes == 24
    assert link_of('profile = "v2v-80211p"', '[[link.distance]]\nat = "0 s"\ndistance = "5 m"').distance_trace


def test_placeholders_in_wire_keys_are_checked_per_run() -> None:
    text = scenario('profile = "${profile}"\nloss_model = { model = "gilbert_elliott", p = "${p}", r = "25%" }',
                    sweep='profile = ["lte", "wifi-noisy"]\np = ["1%", "2%"]')  # fmt: skip
    got = runs(text)
    assert [(r.links[0].profile, r.links[0].forward.loss_model["p"]) for r in got] == [
        ("lte", 0.01), ("lte", 0.02), ("wifi-noisy", 0.01), ("wifi-noisy", 0.02)]  # fmt: skip
    bad = scenario('loss_model = { model = "gilbert_elliott", p = "${p}", r = "25%" }', sweep='p = ["1%", "200%"]')
    message = error_of(bad)
    assert 'link[0].loss_model.p = "200%" (from sweep.p[1]): above 100%' in message, message
    assert "[run 2 of 2: p=\"200%\"]" in message


# ----------------------------------------------------------------------------- units, profiles, schema, ids


def test_extra_units() -> None:
    assert parse_distance_m("100 m") == 100.0 and parse_distance_m("1.5 km") == 1500.0
    assert parse_db("7 dB") == 7.0 and parse_dbm("-10 dBm") == -10.0
    assert parse_frequency_hz("10 MHz") == 1e7 and parse_frequency_hz("20 kHz") == 2e4
    for parser, bad in ((parse_distance_m, "10"), (parse_db, "-1 dB"), (parse_dbm, "5 W"),
                        (parse_frequency_hz, "10 Mbit/s")):  # fmt: skip
        with pytest.raises(ValueError, match="expected"):
            parser(bad)


def test_profile_names_are_the_tables_and_the_wire_compiles_that_table() -> None:
    rust = (REPO / "crates" / "wire-core" / "src" / "profiles.rs").read_text(encoding="utf-8")
    assert 'include_str!("../../../python/roughnet/spec/profiles.toml")' in rust
    table = tomllib.loads((REPO / "python" / "roughnet" / "spec" / "profiles.toml").read_text())
    assert PROFILES == tuple(p["name"] for p in table["profile"])


@pytest.mark.parametrize("name", ["wire-impairments.toml", "wire-hf-modem.toml", "wire-v2v.toml",
                                  "wire-schedule.toml"])  # fmt: skip
def test_wire_fixtures_match_the_schema(name: str) -> None:
    validator = jsonschema.Draft202012Validator(json_schema())
    data = tomllib.loads((FIXTURES / name).read_text())
    assert list(validator.iter_errors(data)) == []
    data["link"][0]["loss_model"] = {"model": "nope"}
    assert list(validator.iter_errors(data)) != []


def test_older_files_resolve_to_the_same_runs_without_wire_fields() -> None:
    for name in ("quick.toml", "multihop.toml", "bulk-tcp.toml", "ramp.toml", "s1-links.toml", "brokers.toml"):
        for run in plan_sweep(FIXTURES / name).runs:
            for link in run.links:
                assert (link.profile, link.half_duplex, link.schedule, link.distance_trace) == (None, None, (), ())
                assert link.forward.loss_model is None and link.forward.jitter_dist == "uniform"


def test_wire_keys_change_the_run_id_and_the_sweep_id() -> None:
    plain = plan_text(scenario('rate = "1 Mbit/s"'), "p.toml")
    for extra in ('duplicate = "1%"', 'profile = "lte"', 'half_duplex = {}', 'overhead = "24 B"'):
        other = plan_text(scenario('rate = "1 Mbit/s"\n' + extra), "p.toml")
        assert other.runs[0].run_id != plain.runs[0].run_id, extra
        assert other.sweep_id != plain.sweep_id, extra


def test_the_guide_examples_of_wire_keys_are_valid(tmp_path: Path) -> None:
    # docs/scenario-format.md "Beyond netem": every [[link]] block, given hosts and a workload, plans as written
    # (a capacity trace it names is made beside the scenario: a 1 s trace).
    guide = (REPO / "docs" / "scenario-format.md").read_text(encoding="utf-8")
    section = guide.split("## Beyond netem", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```toml\n")[1:]]
    assert len(blocks) >= 5
    for block in blocks:
        link = tomllib.loads(block)["link"][0]
        hosts = toml_hosts(*link["between"])
        text = (f'[scenario]\nname = "guide"\n{hosts}\n{block}\n[workload]\npattern = "stream"\nprotocol = "udp"\n'
                f'from = "{link["between"][0]}"\nto = "{link["between"][1]}"\npayload = "200 B"\nmessages = 10\n')
        for name in re.findall(r'capacity_trace = "([^"]+)"', block):
            (tmp_path / name).write_text("0\n500\n1000\n")
        run = runs(text, str(tmp_path / "guide.toml"))[0]
        assert run.links[0].needs() - {"rate", "delay", "loss"}, block  # each uses a key beyond rate, delay, loss


def test_wire_threads_resolves_needs_the_wire_and_reaches_its_argv() -> None:
    assert link_of("").wire_threads == 1 and "wire_threads" not in link_of("").needs()
    link = link_of("wire_threads = 2")
    assert link.wire_threads == 2 and link.needs() == {"wire_threads"}  # selects the wire engine alone
    from roughnet.links.choose import ENGINE_FEATURES

    assert "wire_threads" in ENGINE_FEATURES["wire"] and "wire_threads" not in ENGINE_FEATURES["kernel"]
    # 1, written out, is the default: the run id of a file without the key is unchanged.
    assert runs(scenario("wire_threads = 1"))[0].run_id == runs(scenario(""))[0].run_id
    assert runs(scenario("wire_threads = 2"))[0].run_id != runs(scenario(""))[0].run_id


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        ("wire_threads = 3", ["link[0].wire_threads", "1 or 2"]),
        ('wire_threads = 2\nprofile = "hf-modem"', ["link[0].wire_threads", "hf-modem"]),
        ("wire_threads = 2\nhalf_duplex = {}", ["link[0].wire_threads", "half_duplex"]),
        ('wire_threads = 2\nmedium = "csma"', ["link[0].wire_threads", "csma"]),
    ],
)
def test_wire_threads_where_the_directions_are_coupled_is_refused(keys: str, words: list[str]) -> None:
    message = error_of(scenario(keys))
    for w in words:
        assert w in message, message


def test_wire_threads_on_a_shared_segment_is_refused() -> None:
    seg = ("[scenario]\nname = \"w\"\n\n" + toml_hosts("a", "b", "c") + '\n[[link]]\nbetween = ["a", "b", "c"]\n'
           "wire_threads = 2\n" + WORKLOAD)
    message = error_of(seg)
    assert "link[0].wire_threads" in message and "shared segment" in message, message


def test_show_says_when_a_link_has_a_wire_thread_per_direction() -> None:
    from roughnet.cli.run import _describe_link

    assert "thread" not in _describe_link(link_of('delay = "5 ms"'))
    assert _describe_link(link_of('delay = "5 ms"\nwire_threads = 2')) == "a-b: 5 ms, a wire thread per direction"
