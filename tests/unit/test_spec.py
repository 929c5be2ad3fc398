"""roughnet.spec: loading, strict validation and the wording of errors.

Each error case asserts that the message names the file, the key path and the
bad value (the contract of docs/scenario-format.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roughnet.errors import SpecError
from roughnet.plan import plan_sweep
from roughnet.spec import Scenario, ScenarioError, load_scenario, loads

from conftest import toml_hosts, toml_stream
from specutil import plan_error

FIXTURES = Path(__file__).parent / "fixtures" / "scenarios"
BAD = FIXTURES / "bad"

BASE = """\
[scenario]
name = "t"

""" + toml_hosts("a", "b") + """
[[link]]
between = ["a", "b"]
rate = "10 Mbit/s"

""" + toml_stream("udp", to='["b"]')


# ----------------------------------------------------------------------------- the list


@pytest.mark.parametrize(
    ("fixture", "path", "value", "words"),
    [
        ("malformed.toml", "line 20, column", None, ["TOML syntax error", "expected valid TOML"]),
        ("unknown-key.toml", "workload.paylaod", '"2 KiB"', ["unknown key", "did you mean 'payload'"]),
        ("missing-unit.toml", "link[0].rate", "10", ["missing unit", "expected a rate like '10 Mbit/s'"]),
        ("negative-rate.toml", "link[0].rate", '"-10 Mbit/s"', ["negative rate", "expected a rate"]),
        ("loss-above-100.toml", "link[0].loss", '"150%"', ["above 100%", "expected a percentage"]),
        ("unknown-protocol.toml", "workload.protocol", '"quic"', ['expected one of "tcp", "udp"']),
        ("host-shell.toml", "host[0].name", '"a;rm -rf /"', ["not a valid name", "expected a host name"]),
        ("link-unknown-host.toml", "link[0].between[1]", '"c"', ["unknown host", "(a, b)"]),
    ],
)
def test_bad_fixture_names_file_path_and_value(fixture: str, path: str, value: str | None, words: list[str]) -> None:
    file = BAD / fixture
    with pytest.raises(SpecError) as info:
        plan_sweep(file)
    message = str(info.value)
    first = message.splitlines()[0]
    assert first.startswith(f"{file}: {path}"), message
    if value is not None:
        assert f"(got {value})" in first, message
    for word in words:
        assert word in first, message
    assert info.value.exit_code == 2


def test_value_from_a_sweep_names_the_sweep_entry_and_run() -> None:
    file = BAD / "sweep-loss.toml"
    with pytest.raises(ScenarioError) as info:
        plan_sweep(file)
    message = str(info.value)
    assert message.startswith(f'{file}: link[0].loss = "150%" (from sweep.loss[2]): above 100%'), message
    assert '(got "150%")' in message
    assert '[run 3 of 3: loss="150%"]' in message
    assert info.value.problems[0].origin == "sweep.loss[2]"


def test_load_scenario_accepts_the_unexpanded_sweep_file() -> None:
    # "${loss}" is checked per run by plan, not at load time.
    s = load_scenario(BAD / "sweep-loss.toml")
    assert s.link[0].loss == "${loss}"


def test_unreadable_file() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(FIXTURES / "does-not-exist.toml")
    assert "does-not-exist.toml" in str(info.value)
    assert "cannot read" in str(info.value)


def test_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "latin1.toml"
    f.write_bytes(BASE.replace('"t"', '"t"\ndescription = "caf\xe9"').encode("latin-1"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(f)
    assert str(info.value).startswith(f"{f}: line 3: not UTF-8")


def test_syntax_error_at_end_of_document() -> None:
    e = plan_error(BASE + "x = ")
    assert e.problems[0].path == "line 20, column 5 (end of file)"


# ----------------------------------------------------------------------------- more rules


@pytest.mark.parametrize(
    ("old", "new", "path", "words"),
    [
        ('name = "t"', 'name = "T"', "scenario.name", ["not a valid name"]),
        ('name = "t"', 'name = "t"\nseed = -1', "scenario.seed", ["out of range", "got -1"]),
        ('name = "t"', 'name = "t"\nseed = true', "scenario.seed", ["not an integer", "got true"]),
        ('name = "t"', 'name = "t"\nrepeat = 0', "scenario.repeat", ["out of range"]),
        ('name = "t"', 'name = "t"\ntimeout = 60', "scenario.timeout", ["missing unit"]),
        ('name = "t"', 'name = "t"\nengine = "magic"', "scenario.engine", ['one of "auto"']),
        ('name = "t"', 'name = "t"\ndescription = "${x}"', "scenario.description",
         ["placeholders are not allowed in [scenario]"]),
        ('name = "b"', 'name = "a"', "host[1].name", ["same name as host[0]"]),
        ('name = "b"', 'name = "toolonghost"', "host[1].name", ["not a valid name"]),
        ('between = ["a", "b"]', 'between = ["a", "a"]', "link[0].between[1]", ["host listed twice"]),
        ('between = ["a", "b"]', 'between = ["a"]', "link[0].between", ["too few entries", "at least 2"]),
        ('rate = "10 Mbit/s"', 'rate = "10 Mbit/s"\nmtu = 100', "link[0].mtu", ["576 to 65535"]),
        ('rate = "10 Mbit/s"', 'rate = "10 Mbit/s"\nmtu = "1500 B"', "link[0].mtu", ["not an integer"]),
        ('rate = "10 Mbit/s"', 'rate = "0 bit/s"', "link[0].rate", ["above 0"]),
        ('rate = "10 Mbit/s"', 'jitter = "5 ms"', "link[0].jitter", ["jitter larger than delay"]),
        ('rate = "10 Mbit/s"', 'delay = "1 ms"\njitter = "5 ms"', "link[0].jitter", ["jitter larger than delay"]),
        ('rate = "10 Mbit/s"', 'queue = "100"', "link[0].queue", ["missing unit", "'100 packets'"]),
        ('rate = "10 Mbit/s"', 'rate = "10 Mbit/s"\ncolour = "red"', "link[0].colour", ["unknown key"]),
        ('rate = "10 Mbit/s"', 'rate = "10 Mbit/s"\n[link.forward]\nloss = "200%"', "link[0].forward.loss",
         ["above 100%"]),
        ('rate = "10 Mbit/s"', 'rate = "10 Mbit/s"\n[link.sideways]\nloss = "1%"', "link[0].sideways",
         ["unknown key"]),
        ('pattern = "stream"', 'pattern = "burst"', "workload.pattern", ['one of "stream", "ping"']),
        ('from = "a"', 'from = "z"', "workload.from", ["unknown host"]),
        ('to = ["b"]', 'to = ["a"]', "workload.to[0]", ["the sender is also a receiver"]),
        ('to = ["b"]', "to = []", "workload.to", ["too few entries"]),
        ('payload = "1 KiB"', 'payload = "16 B"', "workload.payload", ["smaller than the message header"]),
        ('payload = "1 KiB"', 'payload = "64 KiB"', "workload.payload", ["at most 65507 B for UDP"]),
        ('messages = 100', 'messages = 0', "workload.messages", ["out of range"]),
        ('messages = 100', 'messages = 1.5', "workload.messages", ["not an integer"]),
        ('messages = 100', 'messages = "100"', "workload.messages", ["not an integer"]),
        ('messages = 100', 'messages = 100\nduration = "1 s"', "workload", ["exactly one of messages or duration"]),
        ('messages = 100', "", "workload", ["exactly one of messages or duration"]),
        ('messages = 100', 'messages = 100\ninterval = "1 ms"', "workload.interval", ['not used by pattern "stream"']),
        ('messages = 100', 'messages = 100\nrate = "200"', "workload.rate", ["missing unit"]),
        ('messages = 100', 'messages = 100000\nrate = "100 msg/s"', "workload.rate", ["not less than the timeout"]),
        ('payload = "1 KiB"', "", "workload.payload", ["missing required key"]),
        ('messages = 100', 'messages = 100\n[workload.tcp]\nnodelay = true', "workload.tcp",
         ['[workload.tcp] knobs given for protocol "udp"', "expected [workload.udp]"]),
        ('messages = 100', 'messages = 100\n[workload.udp]\nnodelay = true', "workload.udp.nodelay",
         ["unknown key", "send_buffer, recv_buffer"]),
        ('messages = 100', 'messages = 100\n[workload.udp]\nrecv_buffer = 65536', "workload.udp.recv_buffer",
         ["missing unit"]),
        ('messages = 100', 'messages = 100\n[report]\nx = "loss"', "report.x", ["not a sweep key"]),
        ('messages = 100', 'messages = 100\n[report]\nmetrics = ["goodness"]', "report.metrics[0]",
         ["unknown value"]),
        ('between = ["a", "b"]', 'between = ["a", "b;x"]', "link[0].between[1]", ["not a valid name", '(got "b;x")']),
        ('to = ["b"]', 'to = "B"', "workload.to", ["not a valid name"]),
        ('rate = "10 Mbit/s"', 'delay = "1 ms"\njitter = "1 ms"\n[link.reverse]\njitter = "3 ms"',
         "link[0].reverse.jitter", ["jitter larger than delay (reverse)", '(got "3 ms")']),
        ('rate = "10 Mbit/s"', 'delay = "5 ms"\njitter = "3 ms"\n[link.forward]\ndelay = "2 ms"',
         "link[0].forward.delay", ["jitter larger than delay (forward)", '(got "2 ms")']),
        ('rate = "10 Mbit/s"', 'delay = "1 ms"\njitter = "3 ms"\n[link.forward]\nrate = "1 Mbit/s"',
         "link[0].jitter", ["jitter larger than delay"]),
        ('messages = 100', 'messages = 100\n[report]\ntitle = "${x}"', "report.title",
         ["placeholders are not allowed in [report]"]),
        ('[[link]]', '[link]', "link", ["wrong type", "[[link]]"]),
    ],
)
def test_rule(old: str, new: str, path: str, words: list[str]) -> None:
    assert old in BASE
    e = plan_error(BASE.replace(old, new, 1))
    first = str(e).splitlines()[0]
    assert first.startswith(f"case.toml: {path}:"), str(e)
    for word in words:
        assert word in str(e), str(e)


def test_ping_and_ramp_rules() -> None:
    ping = BASE.replace('pattern = "stream"', 'pattern = "ping"')
    assert plan_error(ping.replace('to = ["b"]', 'to = ["b"]\nrate = "5 msg/s"')).problems[0].path == "workload.rate"
    e = plan_error(ping.replace("messages = 100", ""))
    assert e.problems[0].path == "workload.messages" and "needs messages" in e.problems[0].problem
    three = ping.replace('name = "b"', 'name = "b"\n[[host]]\nname = "c"').replace(
        'between = ["a", "b"]', 'between = ["a", "b", "c"]').replace('to = ["b"]', 'to = ["b", "c"]')
    assert "exactly one receiver" in str(plan_error(three))
    ramp = BASE.replace('pattern = "stream"', 'pattern = "ramp"')
    paths = {p.path for p in plan_error(ramp).problems}
    assert paths == {"workload.step", "workload.interval"}
    ramp_ok = ramp.replace("messages = 100", 'messages = 100\nstep = "1 KiB"\ninterval = "10 ms"')
    e = plan_error(ramp_ok)  # 1 KiB + 99 KiB > 65507 B over UDP
    assert e.problems[0].path == "workload.step" and "last message of the ramp" in e.problems[0].problem
    loads(ramp_ok.replace('protocol = "udp"', 'protocol = "tcp"'))  # TCP carries it


def test_bulk_rules() -> None:
    bulk = BASE.replace('pattern = "stream"', 'pattern = "bulk"')
    e = plan_error(bulk)
    assert {p.path for p in e.problems} == {"workload.duration", "workload.messages"}
    loads(bulk.replace("messages = 100", 'duration = "2 s"'))
    e = plan_error(bulk.replace("messages = 100", 'duration = "2 min"'))
    assert "not less than the timeout" in str(e)


def test_unconnected_receiver() -> None:
    text = BASE.replace('name = "b"', 'name = "b"\n[[host]]\nname = "c"').replace('to = ["b"]', 'to = ["c"]')
    e = plan_error(text)
    assert e.problems[0].path == "workload.to"
    assert "no path through links from 'a' to 'c'" in str(e)


def test_every_problem_is_reported_at_once() -> None:
    text = BASE.replace('rate = "10 Mbit/s"', 'rate = 10\nloss = "101%"').replace('protocol = "udp"', 'protocol = "x"')
    e = plan_error(text)
    assert [p.path for p in e.problems] == ["link[0].rate", "link[0].loss", "workload.protocol"]
    assert len(str(e).splitlines()) == 3
    assert all(line.startswith("case.toml: ") for line in str(e).splitlines())


# ----------------------------------------------------------------------------- placeholders


def test_placeholder_rules() -> None:
    e = plan_error(BASE.replace('payload = "1 KiB"', 'payload = "${size}"'))
    assert e.problems[0].path == "workload.payload" and "names no [sweep] key" in e.problems[0].problem
    e = plan_error(BASE + '[sweep]\nsize = ["1 KiB"]\n')
    assert e.problems[0].path == "sweep.size" and "never used" in e.problems[0].problem
    e = plan_error(BASE.replace('payload = "1 KiB"', 'payload = "${Size}"') + '[sweep]\nsize = ["1 KiB"]\n')
    assert e.problems[0].path == "workload.payload" and "malformed placeholder" in e.problems[0].problem
    e = plan_error(BASE.replace('payload = "1 KiB"', 'payload = "${size"') + '[sweep]\nsize = ["1 KiB"]\n')
    assert "malformed placeholder" in str(e)


@pytest.mark.parametrize(
    ("sweep", "path", "words"),
    [
        ("size = []", "sweep.size", ["not a non-empty list"]),
        ('size = "1 KiB"', "sweep.size", ["not a non-empty list"]),
        ('size = ["1 KiB", "1 KiB"]', "sweep.size[1]", ["same value as sweep.size[0]"]),
        ('size = ["1 KiB", true]', "sweep.size[1]", ["not a string or a number"]),
        ('size = ["1 KiB", ["2 KiB"]]', "sweep.size[1]", ["not a string or a number"]),
        ('size = ["${x}"]', "sweep.size[0]", ["placeholders are not allowed in [sweep]"]),
        ('Size = ["1 KiB"]', "sweep.Size", ["not a valid sweep key"]),
    ],
)
def test_sweep_table_rules(sweep: str, path: str, words: list[str]) -> None:
    text = BASE.replace('payload = "1 KiB"', 'payload = "${size}"') + "[sweep]\n" + sweep + "\n"
    e = plan_error(text)
    assert path in [p.path for p in e.problems], str(e)
    for word in words:
        assert word in str(e)


LINK_AXIS = 'rate = "${link.rate}"\ndelay = "${link.delay}"'
TWO_LINKS = ('link = [{ name = "slow", rate = "5 Mbit/s", delay = "2 ms" }, '
             '{ name = "fast", rate = "10 Mbit/s", delay = "1 ms" }]')  # fmt: skip


@pytest.mark.parametrize(
    ("link", "sweep", "path", "words"),
    [
        (LINK_AXIS, 'link = [{ rate = "5 Mbit/s", delay = "2 ms" }, "10 Mbit/s"]', "sweep.link[1]",
         ["scalars and tables mixed in one axis", "every entry an inline table", '(got "10 Mbit/s")']),
        ('rate = "${link}"', 'link = ["5 Mbit/s", { rate = "10 Mbit/s" }]', "sweep.link[1]",
         ["scalars and tables mixed in one axis", "every entry a string or a number",
          '(got { rate = "10 Mbit/s" })']),
        (LINK_AXIS, 'link = [{ rate = "5 Mbit/s", delay = "2 ms" }, { rate = "10 Mbit/s" }]', "sweep.link[1]",
         ["not the same keys as sweep.link[0] (missing delay)", "every entry with the keys rate, delay",
          '(got { rate = "10 Mbit/s" })']),
        (LINK_AXIS, 'link = [{ rate = "5 Mbit/s", delay = "2 ms" }, { rate = "1 Mbit/s", delay = "1 ms", '
         'loss = "1%" }]', "sweep.link[1]", ["not the same keys as sweep.link[0] (extra loss)"]),
        (LINK_AXIS, 'link = [{ rate = "5 Mbit/s", delay = "2 ms" }, {}]', "sweep.link[1]", ["empty table"]),
        (LINK_AXIS, 'link = [{ name = 5, rate = "5 Mbit/s", delay = "2 ms" }]', "sweep.link[0].name",
         ["not a non-empty string", "(got 5)"]),
        (LINK_AXIS, TWO_LINKS.replace('"fast"', '"slow"'), "sweep.link[1].name",
         ["same name as sweep.link[0]", "entries with distinct names", '(got "slow")']),
        (LINK_AXIS, 'link = [{ rate = "5 Mbit/s", delay = "2 ms" }, { rate = "5 Mbit/s", delay = "2 ms" }]',
         "sweep.link[1]", ["same fields as sweep.link[0]"]),
        (LINK_AXIS, 'link = [{ rate = "5 Mbit/s", delay = { ms = 2 } }]', "sweep.link[0].delay",
         ["not a string, a number or a boolean", "(got { ms = 2 })"]),
        (LINK_AXIS, 'link = [{ rate = "5 Mbit/s", delay = ["2 ms"] }]', "sweep.link[0].delay",
         ["not a string, a number or a boolean"]),
        (LINK_AXIS, 'link = [{ rate = "${x}", delay = "2 ms" }]', "sweep.link[0].rate",
         ["placeholders are not allowed in [sweep]"]),
        ('rate = "${link}"', TWO_LINKS, "link[0].rate",
         ["sweep.link is a table axis: use ${link.<field>}", "one of its fields (name, rate, delay)"]),
        ('rate = "${link.rate}"\ndelay = "${link.dly}"', TWO_LINKS, "link[0].delay",
         ["placeholder ${link.dly} names no field of sweep.link", "(name, rate, delay)"]),
        ('rate = "${link.rate}"', TWO_LINKS, "sweep.link[0].delay",
         ["field of a table axis is never used", "a ${link.delay} placeholder", '(got "2 ms")']),
        ('rate = "${link.name}"', TWO_LINKS, "sweep.link[0].rate", ["field of a table axis is never used"]),
        ('rate = "1 Mbit/s"', TWO_LINKS, "sweep.link", ["sweep key is never used", "${link.<field>} placeholders"]),
        ('rate = "${r.x}"', 'r = ["5 Mbit/s"]', "link[0].rate", ["sweep.r is not a table axis"]),
        ('rate = "${r.x}"', 'q = ["5 Mbit/s"]', "link[0].rate", ["placeholder ${r.x} names no [sweep] key"]),
        ('rate = "${link.Rate}"', TWO_LINKS, "link[0].rate", ["malformed placeholder", "${name.field}"]),
    ],
)
def test_table_axis_rules(link: str, sweep: str, path: str, words: list[str]) -> None:
    text = BASE.replace('rate = "10 Mbit/s"', link, 1) + "[sweep]\n" + sweep + "\n"
    e = plan_error(text)
    assert path in [p.path for p in e.problems], str(e)
    line = next(line for line in str(e).splitlines() if line.startswith(f"case.toml: {path}: "))
    for word in words:
        assert word in line, line


def test_table_axis_loads_with_placeholders_unresolved() -> None:
    s = loads(BASE.replace('rate = "10 Mbit/s"', LINK_AXIS, 1) + "[sweep]\n" + TWO_LINKS + "\n")
    assert s.link[0].rate == "${link.rate}"
    assert s.sweep["link"][1] == {"name": "fast", "rate": "10 Mbit/s", "delay": "1 ms"}


def test_report_axes_are_sweep_axes_not_exclude() -> None:
    text = (BASE.replace('payload = "1 KiB"', 'payload = "${size}"')
            + '[report]\nx = "exclude"\n[sweep]\nsize = ["1 KiB", "2 KiB"]\n[[sweep.exclude]]\nsize = "2 KiB"\n')
    e = plan_error(text)
    assert str(e).startswith('case.toml: report.x: not a sweep key; expected one of the [sweep] keys (size)'), str(e)


def test_load_keeps_values_as_written() -> None:
    s = load_scenario(FIXTURES / "multihop.toml")
    assert isinstance(s, Scenario)
    assert s.workload.to == "${dst}"
    assert s.workload.messages == "${n}"
    assert s.link[1].reverse is not None and s.link[1].reverse.queue == "64 KiB"
    assert s.sweep == {"dst": ["b", "c"], "size": [64, 1024], "n": [100, 200]}


def test_every_fixture_outside_bad_is_valid() -> None:
    files = sorted(FIXTURES.glob("*.toml"))
    assert len(files) >= 4
    for f in files:
        assert plan_sweep(f).runs
