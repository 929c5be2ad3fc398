"""Capacity traces (spec.capacity, `roughnet trace`, the `capacity_trace` key): formats, conversion, bad input.

A run over a trace, measured, is tests/integration/test_capacity_trace_run.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roughnet.links.choose import ENGINE_FEATURES
from roughnet.links.wire import link_config
from roughnet.plan import plan_sweep
from roughnet.spec import capacity
from roughnet.spec.problems import ScenarioError

ROUGHNET = [sys.executable, "-m", "roughnet.cli"]
SECRET = "hunter2-do-not-print"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*ROUGHNET, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("text, line, what", [
    ("10\n20\nabc\n", 3, "not a whole number"),
    ("10\n20\n15\n", 3, "before the line above"),
    ("10\n-5\n", 2, "not a whole number"),
    ("", None, "no delivery opportunity"),
    ("0\n0\n", None, "last timestamp is 0"),
    (f"1\n{SECRET}\n", 2, "not a whole number"),
])  # fmt: skip
def test_mahimahi_errors_name_the_line_and_never_quote_it(text: str, line: int | None, what: str) -> None:
    with pytest.raises(ValueError) as e:
        capacity.parse_mahimahi(text, "t.trace")
    msg = str(e.value)
    assert what in msg and "; expected " in msg and SECRET not in msg
    if line is not None:
        assert f"t.trace line {line}:" in msg


def test_mahimahi_parsed_with_repeats_and_blank_lines() -> None:
    assert capacity.parse_mahimahi("1\n1\n\n5\n", "t") == [1, 1, 5]


@pytest.mark.parametrize("text, unit, what", [
    ("0,8\n1,-1\n", "Mbit/s", "out of range"),
    ("0,8\n1,20000\n", "Mbit/s", "out of range"),
    ("0,8\n2,8\n1,8\n", "Mbit/s", "time goes back"),
    ("0,8\n1\n", "Mbit/s", "fewer than 2"),
    ("time,rate\n0,x\n", "Mbit/s", "the rate) is not a number"),
    ("# nothing\n", "Mbit/s", "no rate"),
    ("0,8\n", "furlongs/s", "unit 'furlongs/s' is unknown"),
])  # fmt: skip
def test_rate_csv_errors(text: str, unit: str, what: str) -> None:
    with pytest.raises(ValueError, match="expected"):
        capacity.parse_rate_csv(text, "c.csv", unit)
    with pytest.raises(ValueError) as e:
        capacity.parse_rate_csv(text, "c.csv", unit)
    assert what in str(e.value)


def test_rate_csv_columns_units_and_header() -> None:
    rows = capacity.parse_rate_csv("ts,op,dl_kbps\n0,B,8000\n1,B,4000\n", "c", "kbit/s", 1, 3)
    assert rows == [(0.0, 8e6), (1.0, 4e6)]


def test_rates_become_opportunities_with_the_same_mean_and_an_outage() -> None:
    rows = [(float(t), r) for t, r in enumerate([8e6, 8e6, 0.0, 8e6, 8e6])]
    ops = capacity.from_rates(rows)
    assert ops == sorted(ops) and ops[-1] == 5000  # the period: five seconds
    s = capacity.summary(ops)
    assert s["mean_mbps"] == pytest.approx(6.4, abs=1500 * 8 / 1e6 / 5)  # within one packet over the trace
    assert s["zero_seconds"] == pytest.approx(0.2) and s["longest_outage_s"] == 1
    assert not [ms for ms in ops if 2000 <= ms < 3000]  # nothing in the third second
    with pytest.raises(ValueError, match="carries nothing"):
        capacity.from_rates([(0.0, 100.0)])


def test_trace_import_writes_a_new_file_and_refuses_bad_input(tmp_path: Path) -> None:
    (tmp_path / "drive.csv").write_text("time_s,mbps\n0,8\n1,8\n2,0\n3,8\n")
    ok = cli("trace", "import", "csv", "drive.csv", "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["zero_seconds"] == pytest.approx(0.25)
    out = tmp_path / "drive.mahimahi"
    assert capacity.read_mahimahi(out)[-1] == 4000
    again = cli("trace", "import", "csv", "drive.csv", cwd=tmp_path)  # never overwritten
    assert again.returncode == 2 and "exists" in again.stderr
    (tmp_path / "bad.csv").write_text(f"0,8\n1,{SECRET}\n")
    bad = cli("trace", "import", "csv", "bad.csv", "--out", "bad.mahimahi", cwd=tmp_path)
    assert bad.returncode == 2 and "bad.csv line 2" in bad.stderr and SECRET not in bad.stderr + bad.stdout
    assert not (tmp_path / "bad.mahimahi").exists()
    assert cli("trace", "import", "pcap", "drive.csv", "--out", "x", cwd=tmp_path).returncode == 2
    assert cli("trace", "import", "mahimahi", "missing.trace", "--out", "y", cwd=tmp_path).returncode == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".trace-")] == []
    shown = cli("trace", "show", "drive.mahimahi", "--json", cwd=tmp_path)
    assert shown.returncode == 0 and json.loads(shown.stdout)["duration_s"] == 4.0


SCENARIO = """
[scenario]
name = "ct"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
{link}
[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = "b"
payload = "100 B"
messages = 10
"""


def _scenario(tmp_path: Path, link: str) -> Path:
    (tmp_path / "traces").mkdir(exist_ok=True)
    (tmp_path / "traces" / "up.mahimahi").write_text("0\n1\n2\n1000\n")
    p = tmp_path / "ct.toml"
    p.write_text(SCENARIO.format(link=link))
    return p


def test_a_link_takes_a_trace_relative_to_its_file_and_the_wire_gets_its_opportunities(tmp_path: Path) -> None:
    path = _scenario(tmp_path, 'profile = "lte-driving"\n[link.forward]\ncapacity_trace = "traces/up.mahimahi"')
    (run,) = plan_sweep(path).runs
    link = run.links[0]
    assert link.forward.capacity_trace == str((tmp_path / "traces" / "up.mahimahi").resolve())
    assert link.reverse.capacity_trace is None
    assert "capacity_trace" in link.forward.needs() and "capacity_trace" in ENGINE_FEATURES["wire"]
    profile = {"a_to_b": {"rate_bps": 1_044_000, "delay_ns": 17_700_000}, "b_to_a": {"rate_bps": 5_412_000}}
    cfg = link_config(link, profile)
    assert cfg["a_to_b"]["delivery_trace"] == {"opportunities_ms": [0, 1, 2, 1000]}
    assert "rate_bps" not in cfg["a_to_b"] and cfg["a_to_b"]["delay_ns"] == 17_700_000  # the trace replaces the rate
    assert cfg["b_to_a"]["rate_bps"] == 5_412_000 and "delivery_trace" not in cfg["b_to_a"]


@pytest.mark.parametrize("link, key, what", [
    ('capacity_trace = "traces/missing.mahimahi"', "link[0].capacity_trace", "cannot read"),
    ('capacity_trace = "ct.toml"', "link[0].capacity_trace", "not a whole number"),
    ('rate = "1 Mbit/s"\ncapacity_trace = "traces/up.mahimahi"', "link[0].capacity_trace", "together with rate"),
    ('profile = "hf-modem"\ncapacity_trace = "traces/up.mahimahi"', "link[0].capacity_trace", "half duplex"),
    ('[link.reverse]\ncapacity_trace = "traces/up.mahimahi"\n[[link.schedule]]\nat = "1 s"\ndelay = "5 ms"',
     "link[0].reverse.capacity_trace", "[[link.schedule]]"),
    ('[[link.schedule]]\nat = "1 s"\ncapacity_trace = "traces/up.mahimahi"', "link[0].schedule[0].capacity_trace",
     "in a schedule entry"),
])  # fmt: skip
def test_bad_capacity_traces_are_refused_naming_the_key(tmp_path: Path, link: str, key: str, what: str) -> None:
    with pytest.raises(ScenarioError) as e:
        plan_sweep(_scenario(tmp_path, link))
    assert key in str(e.value) and what in str(e.value), str(e.value)
    assert "hunter2" not in str(e.value)


def test_timestamped_logs_are_binned_by_second_with_gaps_held() -> None:
    # a G-NetTrack-style log (the Irish 5G dataset): two rows in one second, a skipped second, kbit/s in column 3
    text = ("Timestamp,Mode,DL_bitrate\n2019.12.16_13.40.04,5G,12000\n2019.12.16_13.40.04,5G,4000\n"
            "2019.12.16_13.40.05,5G,0\n2019.12.16_13.40.07,LTE,24000\n")
    rows = capacity.parse_rate_csv(text, "log.csv", "kbit/s", 1, 3)
    assert [r - rows[0][0] for r, _ in rows] == [0, 0, 1, 3]
    assert capacity.per_second(rows) == [8e6, 0.0, 0.0, 24e6]  # averaged; the missing second holds the one before
    assert capacity.parse_rate_csv("2019-12-16T13:40:04,1\n2019-12-16T13:40:05,2\n", "iso", "Mbit/s")[1][1] == 2e6
    with pytest.raises(ValueError, match="neither seconds nor a timestamp"):
        capacity.parse_rate_csv("t,r\n0,1\nyesterday,2\n", "x.csv")
