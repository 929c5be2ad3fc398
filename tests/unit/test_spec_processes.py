"""[[process]] tables: what plans (defaults, placeholders, run ids) and bad input named (docs/applications.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from specutil import plan_error, plan_text

from roughnet.plan import sweep_from_scenario
from roughnet.spec import loads

BASE = """
[scenario]
name = "apps"
timeout = "30 s"

[[host]]
name = "a"
[[host]]
name = "b"

[[link]]
between = ["a", "b"]
delay = "1 ms"

[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = ["b"]
messages = 10
payload = "100 B"
rate = "100 msg/s"
"""

SERVER = """
[[process]]
name = "srv"
host = "b"
command = ["iperf3", "-s", "-p", "${port}"]
ready = { tcp = 5201, timeout = "5 s" }
expect = { running = true }
env = { MODE = "${mode}" }

[[process]]
name = "cli"
host = "a"
after = "srv"
start = "1 s"
command = ["iperf3", "-c", "b"]
stop = "10 s"
stop_signal = "SIGINT"
grace = "2 s"
metrics = { json_lines = "stdout", latency = "rtt_ms" }
"""


def test_processes_plan_with_defaults_and_sweep_values():
    s = plan_text(BASE + SERVER + '\n[sweep]\nport = ["5201", "5202"]\nmode = ["x"]\n')
    assert len(s.runs) == 2
    srv, cli = s.runs[1].processes
    assert srv.command == ("iperf3", "-s", "-p", "5202") and srv.env == {"MODE": "x"}
    assert srv.ready == {"tcp": 5201} and srv.ready_timeout_ns == 5_000_000_000
    assert srv.expect == {"running": True} and srv.stop_ns is None and srv.stop_signal == "SIGTERM"
    assert srv.grace_ns == 5_000_000_000 and srv.user is None
    assert cli.after == "srv" and cli.start_ns == 1_000_000_000 and cli.stop_ns == 10_000_000_000
    assert cli.stop_signal == "SIGINT" and cli.grace_ns == 2_000_000_000 and cli.expect is None
    assert cli.metrics == {"json_lines": "stdout", "latency": "rtt_ms", "unit": "ms"}
    assert s.runs[0].run_id != s.runs[1].run_id  # the application's own settings are part of the run


def test_a_scenario_without_processes_keeps_its_run_ids():
    """Adding the key must not change the ids of runs stored before it existed (plan._RUN_FIELDS_ADDED)."""
    with_proc = plan_text(BASE + SERVER.replace("${port}", "5201").replace("${mode}", "x"))
    without = plan_text(BASE)
    assert without.runs[0].processes == ()
    assert with_proc.runs[0].run_id != without.runs[0].run_id
    # the id of a run without processes is what it was before [[process]] existed (stored in results of
    # earlier versions): a regression here makes --resume redo every stored run
    assert without.runs[0].run_id == plan_text(BASE).runs[0].run_id


def test_the_run_id_does_not_depend_on_where_the_scenario_is(tmp_path):
    text = BASE + '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["./tool"]\nfiles = ["tool"]\n'
    ids = []
    for sub in ("one", "two"):
        d = tmp_path / sub
        d.mkdir()
        (d / "tool").write_text("#!/bin/sh\n")
        src = str(d / "s.toml")
        run = sweep_from_scenario(loads(text, src), src).runs[0]
        assert run.processes[0].path("tool") == str((d / "tool").resolve())
        ids.append(run.run_id)
    assert ids[0] == ids[1]


@pytest.mark.parametrize("proc,path,words", [
    ('name = "p"\nhost = "a"\n', "process[0]", "exactly one of `command`, `image` and `image_ref`"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nimage_ref = "r/a:1"\n', "process[0]", "exactly one of"),
    ('name = "p"\nhost = "a"\nimage_ref = "r/a:1"\n', "process[0].entrypoint", "missing for `image_ref`"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nimage = "i.tar"\n', "process[0]", "exactly one of"),
    ('name = "p"\nhost = "zz"\ncommand = ["x"]\n', "process[0].host", "no host of this name"),
    ('name = "p"\nhost = "a"\ncommand = []\n', "process[0].command", "too few entries"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nargs = ["y"]\n', "process[0].args", "only for an image"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nafter = "nobody"\n', "process[0].after", "no process or service"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nafter = "p"\n', "process[0].after", "itself"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nready = { tcp = 80, log = "x" }\n', "process[0].ready",
     "exactly one of tcp, log, delay"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nready = { log = "(" }\n', "process[0].ready.log",
     "not a regular expression"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nready = { tcp = 0 }\n', "process[0].ready.tcp", "1 to 65535"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nexpect = { exit = 0, running = true }\n', "process[0].expect",
     "exactly one of exit, running, signal"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nstop_signal = "SIGFOO"\n', "process[0].stop_signal", "one of"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nmetrics = { samples = "a", prometheus = "http://:1/m" }\n',
     "process[0].metrics", "exactly one of json_lines, samples, prometheus"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nmetrics = { samples = "/etc/shadow" }\n',
     "process[0].metrics.samples", "not a file of the working folder"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nmetrics = { prometheus = "https://x/m" }\n',
     "process[0].metrics.prometheus", "plain http URL"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nfiles = ["../x"]\n', "process[0].files[0]", "not inside"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nfiles = ["missing.py"]\n', "process[0].files[0]", "no such file"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nfiles = ["a/x.py", "b/x.py"]\n', "process[0].files[1]",
     "same file name as files[0]"),
    ('name = "p"\nhost = "a"\nimage = "missing.tar"\n', "process[0].image", "no such file or directory"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nenv = { "1X" = "y" }\n', "process[0].env.1X", "variable name"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\nuser = "Bad User"\n', "process[0].user", "user name"),
    ('name = "p"\nhost = "a"\ncommand = ["x"]\ncolour = "red"\n', "process[0].colour", ""),
])
def test_bad_processes_are_named(proc, path, words):
    err = plan_error(BASE + "\n[[process]]\n" + proc)
    text = str(err)
    assert path in text and words in text, text


def test_two_processes_of_one_name_and_a_circle_of_afters_are_refused():
    two = '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["x"]\nafter = "q"\n' \
          '\n[[process]]\nname = "q"\nhost = "b"\ncommand = ["x"]\nafter = "p"\n'
    assert "wait for each other in a circle" in str(plan_error(BASE + two))
    dup = '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["x"]\n' * 2
    assert "process[1].name" in str(plan_error(BASE + dup))


def test_events_name_a_process():
    proc = '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["x"]\n'
    good = plan_text(BASE + proc + '\n[[event]]\nat = "1 s"\naction = "restart"\nprocess = "p"\n')
    e = good.runs[0].events[0]
    assert (e.kind, e.action, e.target, e.process) == ("process", "restart", "process p", "p")
    bad = plan_error(BASE + proc + '\n[[event]]\nat = "1 s"\naction = "kill"\nprocess = "q"\n')
    assert "event[0].process" in str(bad) and "no [[process]] of this name" in str(bad)


def test_validate_exits_2_naming_the_key_and_creates_nothing(tmp_path: Path):
    path = tmp_path / "s.toml"
    path.write_text(BASE + '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["x"]\nfiles = ["nope.py"]\n')
    out = subprocess.run([sys.executable, "-m", "roughnet.cli", "validate", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "process[0].files[0]" in out.stderr and "no such file" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_a_scenario_of_processes_only_plans_and_one_of_neither_is_refused():
    head = BASE[:BASE.index("[workload]")]
    s = plan_text(head + '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["x"]\n')
    run = s.runs[0]
    assert run.workload is None and run.processes[0].name == "p"
    assert run.timeout_ns == 30_000_000_000 == run.run_timeout_ns and not run.has_timeline
    assert run.services == ()
    err = plan_error(head)
    assert "workload: missing: a scenario needs a [workload]" in str(err) and "[[process]]" in str(err)


def test_processes_keep_every_declared_service():
    """A user's program may use a managed broker no workload needs (their own MQTT client)."""
    head = BASE[:BASE.index("[workload]")]
    s = plan_text(head + '\n[[service]]\nkind = "mosquitto"\nhost = "b"\n'
                  '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["x"]\n')
    assert [svc.kind for svc in s.runs[0].services] == ["mosquitto"]


def test_start_and_stop_must_come_before_the_timeout():
    err = str(plan_error(BASE + '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["x"]\nstop = "30 s"\n'))
    assert "process[0].stop" in err and "timeout 30 s" in err
    err = str(plan_error(BASE + '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["x"]\nstart = "31 s"\n'))
    assert "process[0].start" in err


def test_a_changed_script_or_image_is_another_run(tmp_path):
    text = BASE + '\n[[process]]\nname = "p"\nhost = "a"\ncommand = ["./tool"]\nfiles = ["tool"]\n'
    src = str(tmp_path / "s.toml")
    (tmp_path / "tool").write_text("#!/bin/sh\necho one\n")
    first = sweep_from_scenario(loads(text, src), src).runs[0]
    (tmp_path / "tool").write_text("#!/bin/sh\necho two\n")
    second = sweep_from_scenario(loads(text, src), src).runs[0]
    assert first.processes[0].digests["tool"].startswith("sha256:")
    assert first.run_id != second.run_id
