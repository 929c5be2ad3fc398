"""[[workload]] tables and [[event]] entries: what plans, and bad input named (docs/timelines.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from specutil import plan_error, plan_text

BASE = """
[scenario]
name = "tl"
timeout = "30 s"

[[host]]
name = "pub"
[[host]]
name = "pub2"
[[host]]
name = "brk"
[[host]]
name = "sub"

[[link]]
between = ["pub", "pub2", "brk", "sub"]
delay = "1 ms"

[[service]]
kind = "mosquitto"
host = "brk"

[[workload]]
name = "ctl"
pattern = "stream"
protocol = "mqtt"
from = ["pub", "pub2"]
to = "sub"
duration = "10 s"
rate = "100 msg/s"
payload = "256 B"

[[workload]]
name = "bulk"
pattern = "bulk"
protocol = "tcp"
from = "pub"
to = "sub"
duration = "3 s"
start = "2 s"
background = true
payload = "64 KiB"
"""


def paths(text: str) -> dict[str, str]:
    return {p.path: p.problem for p in plan_error(text).problems}


def test_two_workloads_several_senders_and_events_plan():
    text = BASE + """
[[event]]
at = "4 s"
service = "mosquitto"
action = "kill"
for = "2 s"

[[event]]
at = "3 s"
link = 0
action = "set"
loss = "10%"

[[event]]
at = "8 s"
workload = "ctl"
host = "sub"
action = "kill"
"""
    run = plan_text(text).runs[0]
    assert run.workload.name == "ctl" and run.workload.senders == ("pub", "pub2")
    assert [(w.name, w.start_ns, w.background) for w in run.workloads] == [("bulk", 2_000_000_000, True)]
    assert run.has_timeline
    ev = [(e.index, e.at_ns // 10**9, e.kind, e.action, e.target, e.ends) for e in run.events]
    # sorted by time; the kill's `for` adds a start that ends it
    assert ev == [(0, 3, "link", "set", "link 0", None), (1, 4, "service", "kill", "mosquitto", None),
                  (2, 6, "service", "start", "mosquitto", 1), (3, 8, "agent", "kill", "agent ctl@sub", None)]
    change = run.events[0].change
    assert change["a_to_b"]["loss"] == {"model": "bernoulli", "p": 0.1} and change["a_to_b"]["delay_ns"] == 1_000_000
    assert [s.kind for s in run.services] == ["mosquitto"]


def test_a_single_workload_table_written_as_a_list_is_the_classic_run():
    one = plan_text(BASE.split("[[workload]]\nname = \"bulk\"")[0].replace('from = ["pub", "pub2"]', 'from = "pub"'))
    classic = plan_text(one and BASE.split("[[workload]]\nname = \"bulk\"")[0]
                        .replace('from = ["pub", "pub2"]', 'from = "pub"').replace("[[workload]]", "[workload]"))
    assert one.runs[0].run_id == classic.runs[0].run_id
    assert not classic.runs[0].has_timeline


def test_default_names_and_duplicate_names():
    text = BASE.replace('name = "ctl"\n', "").replace('name = "bulk"\n', "")
    run = plan_text(text).runs[0]
    assert [w.name for w in run.all_workloads] == ["w1", "w2"]
    got = paths(BASE.replace('name = "bulk"', 'name = "ctl"'))
    assert "a second workload named 'ctl'" in got["workload[1].name"]


@pytest.mark.parametrize("event, path, words", [
    ('at = "4 s"\nhost = "nope"\naction = "isolate"', "event[0].host", "unknown host"),
    ('at = "4 s"\nservice = "kafka"\naction = "kill"', "event[0].service", "no [[service]] of this kind"),
    ('at = "4 s"\nlink = 3\naction = "down"', "event[0].link", "no such link"),
    ('at = "40 s"\nlink = 0\naction = "down"', "event[0].at", "after the end of the run"),
    ('at = "25 s"\nlink = 0\naction = "down"\nfor = "10 s"', "event[0].for", "after the end of the run"),
    ('at = "4 s"\nlink = 0\naction = "up"\nfor = "1 s"', "event[0].for", "nothing to undo"),
    ('at = "4 s"\naction = "down"', "event[0].link", "missing key"),
    ('at = "4 s"\nlink = 0\nhost = "sub"\naction = "down"', "event[0].host", "not used by a link action"),
    ('at = "4 s"\nlink = 0\naction = "set"', "event[0]", "changes nothing"),
    ('at = "4 s"\nlink = 0\naction = "down"\nloss = "5%"', "event[0].loss", "only with action"),
    ('at = "4 s"\nworkload = "nope"\nhost = "sub"\naction = "kill"', "event[0].workload", "no workload of this name"),
    ('at = "4 s"\nworkload = "bulk"\nhost = "pub2"\naction = "kill"', "event[0].host", "has no agent on this host"),
    ('at = "4 s"\nservice = "mosquitto"\naction = "explode"', "event[0].action", ""),
])
def test_bad_events_are_named(event, path, words):
    got = paths(BASE + "\n[[event]]\n" + event + "\n")
    assert path in got, got
    assert words in got[path]


def test_bad_workloads_are_named_with_their_position():
    got = paths(BASE.replace('start = "2 s"', 'start = "45 s"'))
    assert "workload[1].start" in got
    got = paths(BASE.replace('from = "pub"\nto = "sub"\nduration = "3 s"', 'from = "nope"\nto = "sub"\nduration = "3 s"'))
    assert got.get("workload[1].from") == "unknown host", got
    got = paths(BASE.replace('from = ["pub", "pub2"]', 'from = ["pub", "pub"]'))
    assert "sender listed twice" in got["workload[0].from"]


def test_a_link_with_a_schedule_takes_no_events():
    text = BASE.replace('delay = "1 ms"\n', 'delay = "1 ms"\n[[link.schedule]]\nat = "1 s"\nloss = "1%"\n')
    got = paths(text + '\n[[event]]\nat = "4 s"\nlink = 0\naction = "down"\n')
    assert "schedule" in got["event[0].link"]


def test_cli_exits_2_naming_the_event_and_creates_nothing(tmp_path: Path):
    f = tmp_path / "bad.toml"
    f.write_text(BASE + '\n[[event]]\nat = "4 s"\nhost = "ghost"\naction = "isolate"\n')
    out = subprocess.run([str(Path(sys.executable).with_name("roughnet")), "run", str(f), "--results", str(tmp_path / "res")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "event[0].host" in out.stderr + out.stdout and "ghost" in out.stderr + out.stdout
    assert not (tmp_path / "res").exists()


def test_jetstream_needs_a_jetstream_server():
    text = """
[scenario]
name = "js"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
[[service]]
kind = "nats"
host = "b"
[workload]
pattern = "stream"
protocol = "nats"
from = "a"
to = "b"
messages = 10
payload = "64 B"
[workload.nats]
jetstream = true
"""
    got = paths(text)
    assert "runs without it" in got["workload.nats.jetstream"]
    assert plan_text(text.replace('host = "b"\n[workload]', 'host = "b"\njetstream = true\n[workload]')).runs
