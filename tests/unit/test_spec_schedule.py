"""Schedule CSV files as sweep axes, `to = { first, of }`, --from/--to row selection, overlay keys (no root)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from roughnet.errors import SpecError
from roughnet.plan import plan_sweep, run_id_of
from roughnet.spec import ScenarioError
from roughnet.spec.schedule import select_rows

from conftest import toml_hosts

REPO = Path(__file__).resolve().parents[2]

HEADER = "Data Length,Multicast,Number of Subscribers,Best Effort,Batch Size\n"
SCENARIO = """
[scenario]
name = "sched"
""" + toml_hosts("pub", "sub1", "sub2", "sub3") + """\
[[link]]
between = ["pub", "sub1", "sub2", "sub3"]
[workload]
pattern = "stream"
protocol = "dds"
from = "pub"
to = { first = "${schedule.subscribers}", of = ["sub1", "sub2", "sub3"] }
payload = "${schedule.data_length} B"
messages = 100
[workload.dds]
multicast = "${schedule.multicast}"
reliability = "${schedule.reliability}"
[sweep]
SWEEP
"""
SWEEP = 'schedule = { file = "s.csv", ignore = ["batch_size"] }'


def _write(tmp_path: Path, csv_text: str, sweep: str = SWEEP, scenario: str = SCENARIO) -> Path:
    (tmp_path / "s.csv").write_text(csv_text)
    path = tmp_path / "case.toml"
    path.write_text(scenario.replace("SWEEP", sweep))
    return path


def _error(path: Path) -> str:
    with pytest.raises(SpecError) as info:
        plan_sweep(path)
    return str(info.value)


def test_rows_become_runs_with_the_columns_as_fields(tmp_path):
    sweep = plan_sweep(_write(tmp_path, "# a comment line\n" + HEADER + "100,0,1,1,0\n\n1024,yes,3,false,8192\n"))
    assert sweep.axes == {"schedule": ["row 1", "row 2"]}
    assert sweep.files == {"schedule": str(tmp_path / "s.csv")}
    one, two = sweep.runs
    assert one.params == {"schedule": "row 1"} and two.params == {"schedule": "row 2"}
    assert one.workload.payload_bytes == 100 and two.workload.payload_bytes == 1024
    assert one.workload.receivers == ("sub1",) and two.workload.receivers == ("sub1", "sub2", "sub3")
    assert one.workload.options == {"multicast": False, "reliability": "best_effort"}
    assert two.workload.options == {"multicast": True, "reliability": "reliable"}


def test_sweep_id_follows_the_file_content(tmp_path):
    a = plan_sweep(_write(tmp_path, HEADER + "100,0,1,1,0\n")).sweep_id
    b = plan_sweep(_write(tmp_path, HEADER + "100,0,1,0,0\n")).sweep_id
    assert a != b and a.startswith("sched-")


def test_unknown_columns_are_typed_and_usable(tmp_path):
    scen = SCENARIO.replace('payload = "${schedule.data_length} B"', 'payload = "${schedule.size}"')
    scen = scen.replace('messages = 100', 'messages = "${schedule.count}"')
    scen = scen.replace('multicast = "${schedule.multicast}"\nreliability = "${schedule.reliability}"\n', '')
    scen = scen.replace('to = { first = "${schedule.subscribers}", of = ["sub1", "sub2", "sub3"] }', 'to = "sub1"')
    path = _write(tmp_path, "size,count\n1 KiB,50\n2 KiB,70\n", 'schedule = { file = "s.csv" }', scen)
    runs = plan_sweep(path).runs
    assert [(r.workload.payload_bytes, r.workload.messages) for r in runs] == [(1024, 50), (2048, 70)]


@pytest.mark.parametrize(
    "csv_text, words",
    [
        (HEADER + "100,maybe,1,1,0\n", ['s.csv, row 1, line 2, column 2 "multicast"', "not a yes/no value",
                                        "expected 0 or 1, true or false, yes or no"]),
        (HEADER + "100,0,1,1,0\n1k,0,1,1,0\n", ['s.csv, row 2, line 3, column 1 "data_length"', "not an integer"]),
        (HEADER + "100,0,0,1,0\n", ['row 1, line 2, column 3 "subscribers"', "below 1"]),
        (HEADER + "100,0,1\n", ["s.csv, row 1, line 2)", "3 cells", "expected 5, one per column"]),
        (HEADER + "100,,1,1,0\n", ['column 2 "multicast"', "empty cell"]),
        (HEADER, ["header but no rows"]),
        ("", ["no header row"]),
        ("Data Length,data_length\n1,2\n", ["header, line 1, column 2", "same column as column 1"]),
        ("name,size\nx,1\n", ["column name `name` is reserved"]),
    ],
)
def test_bad_csv_errors_name_file_row_and_column(tmp_path, csv_text, words):
    text = _error(_write(tmp_path, csv_text))
    assert "case.toml: sweep.schedule" in text
    for word in words:
        assert word in text, text


def test_bad_file_axis_values(tmp_path):
    assert "cannot read the schedule file" in _error(_write(tmp_path, HEADER, 'schedule = { file = "nope.csv" }'))
    assert "unknown key of a file axis" in _error(_write(tmp_path, HEADER, 'schedule = { file = "s.csv", x = 1 }'))
    # "Batch" is an alias of batch_size
    assert plan_sweep(_write(tmp_path, HEADER + "100,0,1,1,0\n", 'schedule = { file = "s.csv", ignore = ["Batch"] }'))
    text = _error(_write(tmp_path, HEADER + "100,0,1,1,0\n", 'schedule = { file = "s.csv", ignore = ["bogus"] }'))
    assert "sweep.schedule.ignore[0]: not a column of the schedule" in text
    # a column neither used nor ignored is an error, as for any table axis field
    text = _error(_write(tmp_path, HEADER + "100,0,1,1,0\n", 'schedule = { file = "s.csv" }'))
    assert "sweep.schedule[0].batch_size: field of a table axis is never used" in text


def test_first_of_checks_the_count_against_the_list(tmp_path):
    text = _error(_write(tmp_path, HEADER + "100,0,1,1,0\n100,0,4,1,0\n"))
    assert "workload.to" in text and "(from sweep.schedule[1].subscribers)" in text
    assert "asks for 4 receiver(s), but `of` lists 3 host(s); expected an integer from 1 to 3" in text
    assert "run 2 of 2" in text


@pytest.mark.parametrize(
    "to, words",
    [
        ('{ first = 2 }', ["missing of"]),
        ('{ first = 1, of = ["sub1"], n = 2 }', ["unknown key n"]),
        ('{ first = 1, of = [] }', ["not a non-empty list"]),
        ('{ first = 1, of = ["sub1", "sub1"] }', ["names a host twice"]),
        ('{ first = 1, of = ["Sub1"] }', ['`of` lists "Sub1"']),
        ('{ first = "2", of = ["sub1", "sub2"] }', ["`first` is not an integer"]),
        ('{ first = 1, of = ["sub1", "nobody"] }', ["workload.to.of[1]: unknown host"]),
    ],
)
def test_first_of_shape(tmp_path, to, words):
    scen = SCENARIO.replace('to = { first = "${schedule.subscribers}", of = ["sub1", "sub2", "sub3"] }',
                            f"to = {to}").replace('"${schedule.subscribers}"', "1")
    scen = scen.replace("[sweep]\nSWEEP\n", "").replace('"${schedule.data_length} B"', '"100 B"')
    scen = scen.replace('multicast = "${schedule.multicast}"\nreliability = "${schedule.reliability}"\n', "")
    text = _error(_write(tmp_path, "", "", scen))
    for word in words:
        assert word in text, text


def test_first_of_literal_picks_the_first_hosts(tmp_path):
    scen = SCENARIO.replace('"${schedule.subscribers}"', "2").replace("[sweep]\nSWEEP\n", "")
    scen = scen.replace('"${schedule.data_length} B"', '"100 B"')
    scen = scen.replace('multicast = "${schedule.multicast}"\nreliability = "${schedule.reliability}"\n', "")
    (run,) = plan_sweep(_write(tmp_path, "", "", scen)).runs
    assert run.workload.receivers == ("sub1", "sub2")


ROWS = HEADER + "".join(f"{100 + i},0,1,1,0\n" for i in range(5))


def test_select_rows_keeps_the_range_of_every_other_axis(tmp_path):
    sweep = plan_sweep(_write(tmp_path, ROWS, 'dom = [0, 1]\n' + SWEEP,
                              SCENARIO.replace("[workload.dds]\n", "[workload.dds]\ndomain_id = \"${dom}\"\n")))
    assert len(sweep.runs) == 10
    part = select_rows(sweep, 2, 3)
    assert sweep.axes["schedule"] == [f"row {i}" for i in range(1, 6)]
    assert part.axes["schedule"] == ["row 2", "row 3"] and part.axes["dom"] == sweep.axes["dom"]
    assert sorted(r.params["schedule"] for r in part.runs) == ["row 2", "row 2", "row 3", "row 3"]
    assert {r.workload.payload_bytes for r in part.runs} == {101, 102}
    # runs keep their ids and their index in the whole sweep
    whole = {r.run_id: r.index for r in sweep.runs}
    assert all(whole[r.run_id] == r.index for r in part.runs)
    assert select_rows(sweep, None, None) is sweep
    assert [r.params["schedule"] for r in select_rows(sweep, 5, None).runs] == ["row 5", "row 5"]
    assert {r.params["schedule"] for r in select_rows(sweep, None, 1).runs} == {"row 1"}


@pytest.mark.parametrize("first, last", [(0, 2), (3, 2), (1, 6), (6, None)])
def test_select_rows_out_of_range(tmp_path, first, last):
    sweep = plan_sweep(_write(tmp_path, ROWS))
    with pytest.raises(SpecError, match=r"expected 1 <= --from <= --to <= 5"):
        select_rows(sweep, first, last)


def test_select_rows_needs_a_file_axis():
    sweep = plan_sweep(REPO / "scenarios" / "quickstart.toml")
    with pytest.raises(SpecError, match=r"--from select rows of a schedule file, but the sweep has no file axes"):
        select_rows(sweep, 1, None)


def test_committed_dds_overlay_scenario():
    sweep = plan_sweep(REPO / "scenarios" / "dds-overlay.toml")
    rows = (REPO / "scenarios" / "dds-schedule.csv").read_text().splitlines()
    data = [r for r in rows if r and not r.startswith("#")][1:]
    assert len(sweep.runs) == 2 * 2 * len(data)
    assert {r.links[0].overlay for r in sweep.runs} == {"none", "vxlan"}
    for run in sweep.runs:
        n = int(data[int(run.params["schedule"].split()[1]) - 1].split(",")[2])
        assert run.workload.receivers == tuple(f"sub{i}" for i in range(1, n + 1))


# ---------------------------------------------------------------------------------------------- overlay keys


OVERLAY = """
[scenario]
name = "ovl"
""" + toml_hosts("a", "b") + """\
[[link]]
between = ["a", "b"]
LINK
[workload]
pattern = "bulk"
protocol = "udp"
from = "a"
to = "b"
payload = "1000 B"
duration = "1 s"
"""


def _overlay(tmp_path: Path, link: str) -> Path:
    path = tmp_path / "ovl.toml"
    path.write_text(OVERLAY.replace("LINK", link))
    return path


def test_overlay_none_keeps_run_and_sweep_ids(tmp_path):
    plain = plan_sweep(_overlay(tmp_path, ""))
    none = plan_sweep(_overlay(tmp_path, 'overlay = "none"'))
    vxlan = plan_sweep(_overlay(tmp_path, 'overlay = "vxlan"'))
    assert plain.runs[0].run_id == none.runs[0].run_id != vxlan.runs[0].run_id
    assert plain.sweep_id != vxlan.sweep_id
    link = vxlan.runs[0].links[0]
    assert link.overlay == "vxlan" and link.overlay_mtu is None and link.overlay_device_mtu == 1450
    # the id of the plain run does not depend on the added fields being present
    assert run_id_of(dataclasses.replace(plain.runs[0], run_id="")) == plain.runs[0].run_id


def test_overlay_mtu(tmp_path):
    link = plan_sweep(_overlay(tmp_path, 'overlay = "vxlan"\nmtu = 9000\noverlay_mtu = 8900')).runs[0].links[0]
    assert link.overlay_device_mtu == 8900
    assert plan_sweep(_overlay(tmp_path, 'overlay = "vxlan"\nmtu = 9000')).runs[0].links[0].overlay_device_mtu == 8950
    for link, words in [
        ('overlay = "vxlan"\noverlay_mtu = 1460', ["link[0].overlay_mtu: above the link's mtu (1500)",
                                                   "expected at most 1450 (got 1460)"]),
        ("overlay_mtu = 1400", ["overlay_mtu given on a link without an overlay"]),
        ('overlay = "geneve"', ["link[0].overlay: unknown value", '"none", "vxlan"']),
        ('overlay = "vxlan"\nmtu = 600', ["link[0].mtu: too small for an overlay"]),
    ]:
        with pytest.raises(ScenarioError) as info:
            plan_sweep(_overlay(tmp_path, link))
        for word in words:
            assert word in str(info.value), str(info.value)


def test_overlay_naming_and_routes():
    from roughnet.runspec import Link
    from roughnet.topo import naming

    links = [Link(index=0, hosts=("a", "b"), overlay="vxlan"), Link(index=1, hosts=("b", "c"))]
    assert str(naming.overlay_subnet(0)) == "198.19.128.0/24" and str(naming.overlay_subnet(127)) == "198.19.255.0/24"
    assert naming.overlay_ifname(3) == "rnv3"
    assert str(naming.address_seen_from("b", "a", ["a", "b", "c"], links)) == "198.19.128.2"
    assert str(naming.address_seen_from("c", "a", ["a", "b", "c"], links)) == "198.18.1.2"
    routes = {(r.host, str(r.dest)): r for r in naming.plan_routes(["a", "b", "c"], links)}
    # a reaches link 1 over the overlay of link 0; c reaches both subnets of link 0 over link 1
    assert routes[("a", "198.18.1.0/24")].ifname == "rnv0"
    assert str(routes[("a", "198.18.1.0/24")].gateway) == "198.19.128.2"
    assert str(routes[("c", "198.19.128.0/24")].gateway) == "198.18.1.1"
    assert ("c", "198.18.0.0/24") in routes
    with pytest.raises(Exception, match="below 128"):
        naming.check_names("tok", ["a", "b"], [Link(index=200, hosts=("a", "b"), overlay="vxlan")])
