"""roughnet.plan: sweep expansion (count, order, typing of placeholders), resolution, stable ids."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from roughnet import runspec
from roughnet.plan import plan_sweep, run_id_of, sweep_from_scenario
from roughnet.spec import loads

FIXTURES = Path(__file__).parent / "fixtures" / "scenarios"

BASE = """\
[scenario]
name = "p"
seed = 10
{scenario_extra}

[[host]]
name = "a"
[[host]]
name = "b"

[[link]]
between = ["a", "b"]
{link}

[workload]
pattern = "stream"
protocol = "{protocol}"
from = "a"
to = ["b"]
payload = "{payload}"
messages = {messages}
{workload_extra}
{sweep}
"""


def make(**kw: str) -> str:
    values = {"scenario_extra": "", "link": 'rate = "10 Mbit/s"', "protocol": "udp", "payload": "1 KiB",
              "messages": "100", "workload_extra": "", "sweep": ""}  # fmt: skip
    values.update(kw)
    return BASE.format(**values)


def sweep_of(text: str) -> runspec.Sweep:
    return sweep_from_scenario(loads(text, "p.toml"), "p.toml")


def test_quick_fixture_count_order_and_axes() -> None:
    s = plan_sweep(FIXTURES / "quick.toml")
    assert s.scenario == "quick"
    assert list(s.axes) == ["protocol", "rate", "loss", "payload"]
    assert len(s.runs) == 2 * 2 * 2 * 2
    assert [r.index for r in s.runs] == list(range(16))
    # Cartesian product in file order, last key fastest.
    expected = list(itertools.product(*s.axes.values()))
    assert [tuple(r.params.values()) for r in s.runs] == expected
    assert list(s.runs[0].params) == list(s.axes)
    assert s.runs[1].params == {"protocol": "tcp", "rate": "10 Mbit/s", "loss": "0%", "payload": "1 KiB"}
    assert s.report == {"x": "loss", "lines": "payload", "panels": "protocol",
                        "metrics": ["latency_p50", "latency_p99", "loss"]}  # fmt: skip
    assert s.description == "TCP and UDP through a shaped, lossy link"
    assert s.source.endswith("quick.toml")


def test_resolution_into_base_units() -> None:
    s = plan_sweep(FIXTURES / "quick.toml")
    run = next(r for r in s.runs if r.params == {"protocol": "udp", "rate": "100 Mbit/s", "loss": "5%",
                                                   "payload": "1 KiB"})  # fmt: skip
    link = run.links[0]
    assert link.index == 0 and link.hosts == ("a", "b") and link.mtu == 1500 and link.engine == "auto"
    for d in (link.forward, link.reverse):
        assert d.rate_bps == 100_000_000
        assert d.loss == pytest.approx(0.05)
        assert d.queue_packets == 100 and d.queue_bytes is None
        assert d.delay_ns == 0 and d.jitter_ns == 0
    w = run.workload
    assert (w.pattern, w.protocol, w.sender, w.receivers) == ("stream", "udp", "a", ("b",))
    assert w.payload_bytes == 1024 and w.messages == 1000 and w.duration_ns is None
    assert w.rate_msgs_per_s == 200.0 and w.warmup == 10 and w.timeout_ns == 30_000_000_000
    assert w.options == {}
    assert run.seed == 7 and run.repeat == 0 and run.engine == "auto"
    assert run.host_names() == ["a", "b"]


def test_directions_override_link_values_and_shared_segments() -> None:
    s = plan_sweep(FIXTURES / "multihop.toml")
    run = s.runs[0]
    first, segment = run.links
    assert first.mtu == 9000 and first.forward == first.reverse
    assert first.forward == runspec.Direction(rate_bps=100_000_000)
    assert segment.shared and segment.hosts == ("r", "b", "c") and segment.index == 1
    assert segment.forward == runspec.Direction(rate_bps=50_000_000, loss=0.01)
    assert segment.reverse == runspec.Direction(rate_bps=20_000_000, loss=0.02, queue_bytes=65536)
    assert run.workload.options == {"recv_buffer": 1024 * 1024}


def test_placeholder_typing_whole_value_and_text() -> None:
    s = plan_sweep(FIXTURES / "multihop.toml")
    # dst (2) x size (2) x n (2), repeat = 2 -> 16 runs
    assert len(s.runs) == 16
    for r in s.runs:
        assert r.workload.receivers == (r.params["dst"],)  # "${dst}" as the whole `to`
        assert r.workload.payload_bytes == r.params["size"]  # "${size} B": text substitution of an int
        assert r.workload.messages == r.params["n"]  # "${n}": the int itself
        assert isinstance(r.workload.messages, int)
        assert r.workload.interval_ns == 10_000_000


def test_number_in_a_quantity_placeholder_is_missing_unit() -> None:
    text = make(link='delay = "${d}"', sweep="[sweep]\nd = [10]")
    with pytest.raises(Exception) as info:
        sweep_of(text)
    assert 'link[0].delay = 10 (from sweep.d[0]): missing unit' in str(info.value)


def test_placeholders_inside_lists_and_text() -> None:
    text = make(link='between = ["a", "${peer}"]\ndelay = "${d} ms"', sweep='[sweep]\npeer = ["b"]\nd = [1, 2.5]')
    text = text.replace('between = ["a", "b"]\n', "", 1)
    s = sweep_of(text)
    assert [r.links[0].hosts for r in s.runs] == [("a", "b"), ("a", "b")]
    assert [r.links[0].forward.delay_ns for r in s.runs] == [1_000_000, 2_500_000]


def test_repeat_interleaves_points_and_shifts_the_seed() -> None:
    text = make(scenario_extra="repeat = 3", link='loss = "${loss}"', sweep='[sweep]\nloss = ["0%", "1%"]')
    s = sweep_of(text)
    assert len(s.runs) == 6
    assert [(r.params["loss"], r.repeat, r.seed) for r in s.runs] == [
        ("0%", 0, 10), ("1%", 0, 10), ("0%", 1, 11), ("1%", 1, 11), ("0%", 2, 12), ("1%", 2, 12)]  # fmt: skip
    assert len({r.run_id for r in s.runs}) == 6


def test_no_sweep_is_one_run() -> None:
    s = plan_sweep(FIXTURES / "ramp.toml")
    assert len(s.runs) == 1 and s.axes == {} and s.runs[0].params == {}
    w = s.runs[0].workload
    assert (w.pattern, w.step_bytes, w.interval_ns, w.messages) == ("ramp", 1024, 10_000_000, 60)


def test_knobs_become_options_in_base_units_and_engine_resolves() -> None:
    s = plan_sweep(FIXTURES / "bulk-tcp.toml")
    assert [r.workload.options for r in s.runs] == [
        {"nodelay": False, "mss": 536, "send_buffer": 131072, "recv_buffer": 1310720, "send_size": 1436},
        {"nodelay": False, "mss": 1436, "send_buffer": 131072, "recv_buffer": 1310720, "send_size": 1436},
    ]
    assert all(r.engine == "kernel" and r.links[0].engine == "kernel" for r in s.runs)
    assert s.runs[0].workload.duration_ns == 5_000_000_000 and s.runs[0].workload.messages is None


def test_link_engine_overrides_the_scenario_default() -> None:
    s = sweep_of(make(scenario_extra='engine = "kernel"', link='rate = "1 Mbit/s"\nengine = "wire"'))
    assert s.runs[0].engine == "kernel" and s.runs[0].links[0].engine == "wire"


# ----------------------------------------------------------------------------- ids


def test_run_ids_are_stable_and_distinct() -> None:
    a = plan_sweep(FIXTURES / "quick.toml")
    b = plan_sweep(FIXTURES / "quick.toml")
    assert [r.run_id for r in a.runs] == [r.run_id for r in b.runs]
    assert a.sweep_id == b.sweep_id
    assert re.fullmatch(r"quick-[0-9a-f]{8}", a.sweep_id)
    assert all(re.fullmatch(r"[0-9a-f]{12}", r.run_id) for r in a.runs)
    assert len({r.run_id for r in a.runs}) == len(a.runs)
    assert all(r.sweep_id == a.sweep_id for r in a.runs)
    assert all(run_id_of(r) == r.run_id for r in a.runs)


def test_run_ids_are_stable_across_processes() -> None:
    code = ("from roughnet.plan import plan_sweep; import sys; "
            "print(' '.join(r.run_id for r in plan_sweep(sys.argv[1]).runs))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, str(FIXTURES / "quick.toml")], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout.split()  # fmt: skip
    assert out == [r.run_id for r in plan_sweep(FIXTURES / "quick.toml").runs]


def test_run_ids_do_not_depend_on_order_or_formatting(tmp_path: Path) -> None:
    base = make(link='loss = "${loss}"', sweep='[sweep]\nloss = ["0%", "1%", "2%"]')
    reordered = make(link='loss = "${loss}"', sweep='[sweep]\nloss = ["2%", "0%", "1%"]')
    ids = {r.params["loss"]: r.run_id for r in sweep_of(base).runs}
    ids2 = {r.params["loss"]: r.run_id for r in sweep_of(reordered).runs}
    assert ids == ids2
    # Comments, key order and explicit defaults change neither run ids nor the sweep id.
    spelled = base.replace("[workload]", "# a comment\n[workload]\nwarmup = 0").replace(
        'seed = 10', 'seed = 10\ntimeout = "60 s"')
    assert sweep_of(spelled).sweep_id == sweep_of(base).sweep_id
    assert [r.run_id for r in sweep_of(spelled).runs] == [r.run_id for r in sweep_of(base).runs]


def test_run_ids_change_with_any_resolved_value() -> None:
    base = sweep_of(make()).runs[0].run_id
    variants = [
        make(messages="101"),
        make(payload="2 KiB"),
        make(protocol="tcp"),
        make(link='rate = "11 Mbit/s"'),
        make(link='rate = "10 Mbit/s"\nmtu = 1400'),
        make(scenario_extra="seed = 11").replace("seed = 10\n", ""),
        make().replace('name = "p"', 'name = "q"'),
    ]
    ids = [sweep_of(v).runs[0].run_id for v in variants]
    assert base not in ids
    assert len(set(ids)) == len(ids)


def test_sweep_id_changes_with_content() -> None:
    assert sweep_of(make()).sweep_id != sweep_of(make(messages="101")).sweep_id
    assert sweep_of(make()).sweep_id.startswith("p-")


def test_every_run_is_validated_and_names_its_parameters() -> None:
    text = make(payload="${payload}", sweep='[sweep]\npayload = ["1 KiB", "16 B"]')
    with pytest.raises(Exception) as info:
        sweep_of(text)
    msg = str(info.value)
    assert msg.startswith('p.toml: workload.payload = "16 B" (from sweep.payload[1]): smaller than the message header')
    assert '[run 2 of 2: payload="16 B"]' in msg


def test_error_in_a_list_entry_from_a_sweep() -> None:
    text = make(sweep='[sweep]\ndst = ["b", "a"]').replace('to = ["b"]', 'to = ["${dst}"]')
    with pytest.raises(Exception) as info:
        sweep_of(text)
    msg = str(info.value)
    assert msg.startswith('p.toml: workload.to[0] = "a" (from sweep.dst[1]): the sender is also a receiver'), msg
    text = make(sweep='[sweep]\ndst = ["b", "B"]').replace('to = ["b"]', 'to = ["${dst}"]')
    with pytest.raises(Exception) as info:
        sweep_of(text)
    assert str(info.value).startswith('p.toml: workload.to[0] = "B" (from sweep.dst[1]): not a valid name')


def test_cross_key_rules_after_substitution() -> None:
    # protocol swept: a UDP-only limit is wrong only for the udp point.
    text = make(protocol="${proto}", payload="64 KiB", sweep='[sweep]\nproto = ["tcp", "udp"]')
    with pytest.raises(Exception) as info:
        sweep_of(text)
    msg = str(info.value)
    assert msg.startswith('p.toml: workload.payload: larger than a UDP datagram can carry'), msg
    assert '[run 2 of 2: proto="udp"]' in msg and "at most 65507 B for UDP" in msg
    # The same for every protocol with a limit: a 9 MB Kafka message fails the kafka point only, naming it.
    text = make(protocol="${proto}", payload="${size}", workload_extra='[[service]]\nkind = "kafka"\nhost = "a"',
                sweep='[sweep]\nproto = ["tcp", "kafka"]\nsize = ["1 MB", "9 MB"]')
    with pytest.raises(Exception) as info:
        sweep_of(text)
    msg = str(info.value)
    assert "larger than protocol kafka carries in one message" in msg and "at most 8388608 B for kafka" in msg
    assert 'proto="kafka"' in msg and 'size="9 MB"' in msg and 'proto="tcp"' not in msg
    # Fixed protocol: a knob table for another protocol is still an error naming both.
    text = make(protocol="tcp", workload_extra='[workload.udp]\nrecv_buffer = "1 MiB"')
    with pytest.raises(Exception) as info:
        sweep_of(text)
    assert 'knobs given for protocol "tcp"' in str(info.value)


def test_plan_is_pure(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(make())
    before = sorted(p.name for p in tmp_path.iterdir())
    plan_sweep(f)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# ----------------------------------------------------------------------------- table axes, exclude, knobs


def test_table_axis_fixture_pairs_fields_and_labels_runs() -> None:
    s = plan_sweep(FIXTURES / "s1-links.toml")
    assert s.axes == {"link": ["5M-2ms", "10M-1ms", "100M-50us", "1G-0.5us"], "protocol": ["tcp", "udp"],
                      "payload": ["1 KiB", "100 KiB"]}  # fmt: skip
    # 4 x 2 x 2 = 16 points, less udp with 100 KiB for each of the 4 link settings.
    assert len(s.runs) == 12
    assert [r.index for r in s.runs] == list(range(12))
    assert [tuple(r.params.values()) for r in s.runs] == [
        p for p in itertools.product(*s.axes.values()) if p[1:] != ("udp", "100 KiB")]
    pairs = {(r.params["link"], r.links[0].forward.rate_bps, r.links[0].forward.delay_ns) for r in s.runs}
    assert pairs == {("5M-2ms", 5_000_000, 2_000_000), ("10M-1ms", 10_000_000, 1_000_000),
                     ("100M-50us", 100_000_000, 50_000), ("1G-0.5us", 1_000_000_000, 500)}  # fmt: skip
    assert all(r.links[0].reverse == r.links[0].forward for r in s.runs)
    assert all(isinstance(v, str) for r in s.runs for v in r.params.values())
    # Each run gets only its own protocol's knobs.
    for r in s.runs:
        expected = {"nodelay": True} if r.params["protocol"] == "tcp" else {"recv_buffer": 4 * 1024 * 1024}
        assert r.workload.protocol == r.params["protocol"] and r.workload.options == expected


def test_table_axis_label_without_name_and_field_typing() -> None:
    text = make(link='rate = "${l.rate}"\ndelay = "${l.d} ms"', messages='"${l.n}"',
                sweep='[sweep]\nl = [{ rate = "5 Mbit/s", d = 2, n = 100 }, { rate = "10 Mbit/s", d = 0.5, n = 200 }]')
    s = sweep_of(text)
    assert s.axes == {"l": ["rate=5 Mbit/s, d=2, n=100", "rate=10 Mbit/s, d=0.5, n=200"]}
    assert [r.params for r in s.runs] == [{"l": "rate=5 Mbit/s, d=2, n=100"}, {"l": "rate=10 Mbit/s, d=0.5, n=200"}]
    assert [r.links[0].forward.rate_bps for r in s.runs] == [5_000_000, 10_000_000]
    assert [r.links[0].forward.delay_ns for r in s.runs] == [2_000_000, 500_000]  # "${l.d} ms": text
    assert [r.workload.messages for r in s.runs] == [100, 200]  # "${l.n}": the int itself
    assert all(isinstance(r.workload.messages, int) for r in s.runs)


def test_table_axis_name_may_be_used_and_mixes_with_scalar_axes() -> None:
    text = make(link='rate = "${l.rate}"\nloss = "${loss}"',
                sweep='[sweep]\nloss = ["0%", "1%"]\nl = [{ name = "slow", rate = "1 Mbit/s" }, '
                      '{ name = "fast", rate = "1 Gbit/s" }]')  # fmt: skip
    s = sweep_of(text)
    assert [(r.params["loss"], r.params["l"]) for r in s.runs] == [
        ("0%", "slow"), ("0%", "fast"), ("1%", "slow"), ("1%", "fast")]  # fmt: skip
    named = make(link='rate = "${l.rate}"', sweep='[sweep]\nl = [{ name = "b", rate = "1 Mbit/s" }]').replace(
        'to = ["b"]', 'to = ["${l.name}"]')
    assert sweep_of(named).runs[0].workload.receivers == ("b",)


def test_bad_value_from_a_table_field_names_the_field() -> None:
    text = make(link='rate = "${link.rate}"\ndelay = "${link.delay}"',
                sweep='[sweep]\nlink = [\n  { name = "a", rate = "5 Mbit/s", delay = "2 ms" },\n'
                      '  { name = "b", rate = "5 Mbps/s", delay = "1 ms" },\n]')  # fmt: skip
    with pytest.raises(Exception) as info:
        sweep_of(text)
    msg = str(info.value)
    assert msg.startswith('p.toml: link[0].rate = "5 Mbps/s" (from sweep.link[1].rate): '), msg
    assert '(got "5 Mbps/s")' in msg and '[run 2 of 2: link="b"]' in msg


def test_exclude_skips_matching_combinations_and_keeps_run_ids() -> None:
    link = 'loss = "${loss}"'
    full = make(protocol="${proto}", link=link, payload="${size}",
                sweep='[sweep]\nproto = ["tcp", "udp"]\nloss = ["0%", "1%"]\nsize = ["1 KiB", "60 KiB"]')
    cut = full + '[[sweep.exclude]]\nproto = "udp"\nsize = "60 KiB"\n[[sweep.exclude]]\nloss = "1%"\nproto = "tcp"\n'
    a, b = sweep_of(full), sweep_of(cut)
    assert len(a.runs) == 8 and len(b.runs) == 4
    assert [tuple(r.params.values()) for r in b.runs] == [
        ("tcp", "0%", "1 KiB"), ("tcp", "0%", "60 KiB"), ("udp", "0%", "1 KiB"), ("udp", "1%", "1 KiB")]
    assert [r.index for r in b.runs] == [0, 1, 2, 3]
    assert b.axes == a.axes  # every value stays on its axis
    ids = {tuple(r.params.values()): r.run_id for r in a.runs}
    assert all(ids[tuple(r.params.values())] == r.run_id for r in b.runs)  # ids do not depend on index
    assert b.sweep_id != a.sweep_id
    # Numbers match numbers; repeat repeats the remaining points only.
    nums = make(messages='"${n}"', scenario_extra="repeat = 2", sweep='[sweep]\nn = [100, 200, 300]\n'
                '[[sweep.exclude]]\nn = 200')  # fmt: skip
    assert [r.workload.messages for r in sweep_of(nums).runs] == [100, 300, 100, 300]


def test_exclude_by_table_entry_name_or_label() -> None:
    sweep = ('[sweep]\nl = [{ name = "slow", rate = "1 Mbit/s" }, { name = "fast", rate = "1 Gbit/s" }]\n'
             'loss = ["0%", "1%"]\n[[sweep.exclude]]\nl = "fast"\nloss = "1%"\n')
    s = sweep_of(make(link='rate = "${l.rate}"\nloss = "${loss}"', sweep=sweep))
    assert [tuple(r.params.values()) for r in s.runs] == [("slow", "0%"), ("slow", "1%"), ("fast", "0%")]
    unnamed = '[sweep]\nl = [{ rate = "1 Mbit/s" }, { rate = "2 Mbit/s" }]\n[[sweep.exclude]]\nl = "rate=1 Mbit/s"\n'
    s = sweep_of(make(link='rate = "${l.rate}"', sweep=unnamed))
    assert [r.params for r in s.runs] == [{"l": "rate=2 Mbit/s"}]


@pytest.mark.parametrize(
    ("exclude", "path", "words"),
    [
        ('[[sweep.exclude]]\ncolour = "red"', "sweep.exclude[0].colour",
         ["not a sweep axis", "one of the [sweep] axes (loss, l)", '(got "red")']),
        ('[[sweep.exclude]]\nloss = "7%"', "sweep.exclude[0].loss",
         ["not a value of sweep.loss", 'a value of sweep.loss ("0%", "1%")', '(got "7%")']),
        ('[[sweep.exclude]]\nloss = "0%"\n[[sweep.exclude]]\nl = "medium"', "sweep.exclude[1].l",
         ["not a value of sweep.l", 'the name of an entry of sweep.l ("slow", "fast")', '(got "medium")']),
        ('[[sweep.exclude]]\nl = "rate=1 Mbit/s"', "sweep.exclude[0].l", ["not a value of sweep.l"]),
        ("[[sweep.exclude]]", "sweep.exclude[0]", ["empty exclude entry"]),
        ('[[sweep.exclude]]\nloss = "0%"\n[[sweep.exclude]]\nloss = "1%"', "sweep.exclude",
         ["every parameter point is excluded"]),
    ],
)
def test_exclude_errors(exclude: str, path: str, words: list[str]) -> None:
    sweep = ('[sweep]\nloss = ["0%", "1%"]\nl = [{ name = "slow", rate = "1 Mbit/s" }, '
             '{ name = "fast", rate = "1 Gbit/s" }]\n' + exclude + "\n")  # fmt: skip
    with pytest.raises(Exception) as info:
        sweep_of(make(link='rate = "${l.rate}"\nloss = "${loss}"', sweep=sweep))
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"p.toml: {path}: "), str(info.value)
    for word in words:
        assert word in first, first


def test_exclude_is_not_an_axis_name() -> None:
    text = make(link='loss = "${loss}"', sweep='[sweep]\nloss = ["0%"]\nexclude = ["1%"]')
    with pytest.raises(Exception) as info:
        sweep_of(text)
    first = str(info.value).splitlines()[0]
    assert first.startswith('p.toml: sweep.exclude[0]: not a table; expected [[sweep.exclude]] tables'), first
    assert "`exclude` is reserved" in first and '(got "1%")' in first


def test_knob_tables_for_a_swept_protocol() -> None:
    knobs = '[workload.tcp]\nnodelay = false\nmss = "1000 B"\n[workload.udp]\nrecv_buffer = "1 MiB"'
    s = sweep_of(make(protocol="${proto}", workload_extra=knobs, sweep='[sweep]\nproto = ["udp", "tcp"]'))
    assert [(r.workload.protocol, r.workload.options) for r in s.runs] == [
        ("udp", {"recv_buffer": 1024 * 1024}), ("tcp", {"nodelay": False, "mss": 1000})]
    # A table whose protocol no run uses is an error naming the table and the sweep's protocols.
    with pytest.raises(Exception) as info:
        sweep_of(make(protocol="${proto}", workload_extra=knobs, sweep='[sweep]\nproto = ["udp"]'))
    msg = str(info.value)
    assert msg.startswith('p.toml: workload.tcp: [workload.tcp] knobs given but no run uses protocol "tcp" '
                          '(the sweep uses "udp"); expected knob tables only for the protocols of the runs '
                          '([workload.udp]) (got { nodelay = false, mss = "1000 B" })'), msg
    assert len(msg.splitlines()) == 1
    # ... also when [[sweep.exclude]] removes every run of that protocol.
    with pytest.raises(Exception) as info:
        sweep_of(make(protocol="${proto}", workload_extra=knobs, link='loss = "${loss}"',
                      sweep='[sweep]\nproto = ["udp", "tcp"]\nloss = ["0%"]\n[[sweep.exclude]]\nproto = "tcp"'))
    assert str(info.value).startswith('p.toml: workload.tcp: [workload.tcp] knobs given but no run uses protocol')
    # Knob names stay checked per protocol, and knob values for the other protocol's runs too.
    with pytest.raises(Exception) as info:
        sweep_of(make(protocol="${proto}", workload_extra='[workload.udp]\nnodelay = true',
                      sweep='[sweep]\nproto = ["udp", "tcp"]'))
    assert str(info.value).startswith("p.toml: workload.udp.nodelay: unknown key"), str(info.value)
    with pytest.raises(Exception) as info:
        sweep_of(make(protocol="${proto}", workload_extra='[workload.tcp]\nmss = "10 B"',
                      sweep='[sweep]\nproto = ["udp", "tcp"]'))
    assert str(info.value).startswith('p.toml: workload.tcp.mss: out of range'), str(info.value)


def test_swept_protocol_from_a_table_field_with_knobs() -> None:
    knobs = '[workload.tcp]\nnodelay = true\n[workload.udp]\nsend_buffer = "${stack.buf}"'
    sweep = ('[sweep]\nstack = [{ name = "t", proto = "tcp", buf = "1 KiB" }, '
             '{ name = "u", proto = "udp", buf = "2 KiB" }]')  # fmt: skip
    s = sweep_of(make(protocol="${stack.proto}", workload_extra=knobs, sweep=sweep))
    assert [r.workload.options for r in s.runs] == [{"nodelay": True}, {"send_buffer": 2048}]


#: Sweep ids and first run ids of the fixtures as computed before Run.services and the protocol knob
#: tables existed (commit ec71e0b): fields added to the format must not change the ids of files that do
#: not use them, or stored results and `roughnet run --resume` lose track of them.
PINNED_IDS = {
    "bulk-tcp.toml": ("bulk-tcp-71d2a312", ["bde2c9786149", "ac3dc21e0fb8"]),
    "multihop.toml": ("multihop-5a645506", ["103c58f97918", "7b001c9bb51c", "330e3caa3b7f"]),
    "quick.toml": ("quick-47e28245", ["185e35099f4e", "8976e8899ac0", "4c8b9661a0d3"]),
    "ramp.toml": ("ramp-2c3d00d8", ["d97855ee72ef"]),
    "s1-links.toml": ("s1-links-eb203b7c", ["c1c70a7423ca", "e0761da692d8", "fbfe879b6ab9"]),
}


@pytest.mark.parametrize("name", sorted(PINNED_IDS))
def test_ids_of_existing_fixtures_do_not_change(name: str) -> None:
    sweep = plan_sweep(FIXTURES / name)
    sweep_id, run_ids = PINNED_IDS[name]
    assert sweep.sweep_id == sweep_id
    assert [r.run_id for r in sweep.runs][: len(run_ids)] == run_ids
    assert all(r.services == () for r in sweep.runs)


def test_services_are_part_of_the_run_id() -> None:
    import dataclasses

    run = plan_sweep(FIXTURES / "quick.toml").runs[0]
    with_service = dataclasses.replace(run, services=(runspec.Service(kind="nats", host="b"),))
    assert run_id_of(with_service) != run.run_id
    other = dataclasses.replace(run, services=(runspec.Service(kind="nats", host="b", options={"jetstream": True}),))
    assert run_id_of(other) not in (run.run_id, run_id_of(with_service))
