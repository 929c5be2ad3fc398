"""Hosts mapped to vehicles of a SUMO floating-car-data file (issue 16, "Mobility from SUMO"): the FCD parser
(held positions, refusals naming the line or value), `[mobility] fcd` + `[[host]] vehicle` resolved into the
link's positions exactly as a `path_trace` of the same points, and every bad mapping refused with exit 2 naming
the key before anything is created. The shipped FCD (scenarios/sumo/town.fcd.xml, written by SUMO) is parsed
as real captured output."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from typer.testing import CliRunner

from roughnet.cli import app
from roughnet.mobility.fcd import FcdError, parse_fcd, read_fcd
from roughnet.plan import plan_sweep
from roughnet.spec import ScenarioError

ROOT = Path(__file__).resolve().parents[2]
try:
    import sumo as _sumo  # noqa: F401  (the eclipse-sumo wheel)

    HAVE_SUMO = True
except ImportError:
    HAVE_SUMO = False
TOWN_FCD = ROOT / "scenarios" / "sumo" / "town.fcd.xml"

#: Three time steps: v1 moves east 10 m/s; v2 is absent at 1 s (held) and back at 2 s; v3 only at 2 s.
FCD = """<?xml version="1.0" encoding="UTF-8"?>
<fcd-export xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
    <timestep time="0.00">
        <vehicle id="v1" x="0.00" y="0.00" angle="90.00" type="DEFAULT_VEHTYPE" speed="10.00" pos="5.10" lane="e_0"/>
        <vehicle id="v2" x="100.00" y="5.50" angle="90.00" type="DEFAULT_VEHTYPE" speed="0.00" pos="5.10" lane="e_0"/>
    </timestep>
    <timestep time="1.00">
        <vehicle id="v1" x="10.00" y="0.00"/>
        <person id="p0" x="3.00" y="3.00"/>
    </timestep>
    <timestep time="2.00">
        <vehicle id="v1" x="20.00" y="0.00"/>
        <vehicle id="v2" x="300.00" y="5.50"/>
        <vehicle id="v3" x="-400.00" y="0.00"/>
    </timestep>
</fcd-export>
"""


def fcd(text: str) -> dict:
    return parse_fcd(io.BytesIO(text.encode()), "t.fcd.xml")


def test_points_per_vehicle_with_a_gap_held_at_the_last_position() -> None:
    v = fcd(FCD)
    assert sorted(v) == ["v1", "v2", "v3"]  # the person is not a vehicle
    assert v["v1"] == ({"at_ns": 0, "x_m": 0.0, "y_m": 0.0}, {"at_ns": 1_000_000_000, "x_m": 10.0, "y_m": 0.0},
                       {"at_ns": 2_000_000_000, "x_m": 20.0, "y_m": 0.0})  # fmt: skip
    # absent at 1 s: held at 100 m until then, not gliding towards 300 m from time 0
    assert v["v2"] == ({"at_ns": 0, "x_m": 100.0, "y_m": 5.5}, {"at_ns": 1_000_000_000, "x_m": 100.0, "y_m": 5.5},
                       {"at_ns": 2_000_000_000, "x_m": 300.0, "y_m": 5.5})  # fmt: skip
    assert v["v3"] == ({"at_ns": 2_000_000_000, "x_m": -400.0, "y_m": 0.0},)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (FCD.replace("</fcd-export>", ""), "not XML"),
        ("", "not XML"),
        ('<routes><vehicle id="v1"/></routes>', "root element is not <fcd-export>"),
        (FCD.replace('time="1.00"', 'time="soon"'), "<timestep> time is not a number"),
        (FCD.replace('time="1.00"', 'time="3.00"'), "time step 2.00 comes after 3"),
        (FCD.replace('id="v3" x="-400.00"', 'id="v3" x="nan"'), "vehicle v3 at time 2.00: x is not finite"),
        (FCD.replace('id="v3" x="-400.00" y="0.00"', 'id="v3" lon="8.1" lat="50.2"'), "lon/lat, not x/y"),
        (FCD.replace('id="v3" x="-400.00"', 'x="-400.00"'), "has no id"),
    ],
)
def test_bad_fcd_is_refused_saying_what(text: str, words: str) -> None:
    with pytest.raises(FcdError, match=words) as info:
        fcd(text)
    assert "expected a SUMO floating-car-data file" in str(info.value)


def test_the_shipped_fcd_written_by_sumo_parses_and_its_vehicles_move() -> None:
    v = read_fcd(TOWN_FCD)
    assert len(v) >= 20
    moved = [vid for vid, pts in v.items() if len(pts) > 5 and
             max(abs(p["x_m"] - pts[0]["x_m"]) + abs(p["y_m"] - pts[0]["y_m"]) for p in pts) > 100]  # fmt: skip
    assert len(moved) >= 10, {vid: len(p) for vid, p in v.items()}
    for pts in v.values():
        assert all(a["at_ns"] <= b["at_ns"] for a, b in zip(pts, pts[1:]))
        assert all(p["at_ns"] <= 60_000_000_000 for p in pts)


WORKLOAD = """
[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = "b"
payload = "200 B"
messages = 10
rate = "10 msg/s"
"""


def scenario(a: str = 'vehicle = "v1"', b: str = 'vehicle = "v2"', c: str = 'position = ["0 m", "0 m"]',
             mobility: str = '[mobility]\nfcd = "t.fcd.xml"\n', link: str = 'loss_model = { model = "ieee80211p" }',
             ) -> str:  # fmt: skip
    hosts = "".join(f'[[host]]\nname = "{n}"\n{keys}\n' for n, keys in (("a", a), ("b", b), ("c", c)))
    return ('[scenario]\nname = "m"\nengine = "wire"\n\n' + mobility + hosts +
            '\n[[link]]\nbetween = ["a", "b", "c"]\n' + link + "\n" + WORKLOAD)  # fmt: skip


def write(tmp_path: Path, text: str, fcd_text: str = FCD) -> Path:
    (tmp_path / "t.fcd.xml").write_text(fcd_text)
    (tmp_path / "bad.xml").write_text("<routes>\n<vehicle id='1'>\n</routes>\n")
    f = tmp_path / "m.toml"
    f.write_text(text)
    return f


def test_vehicles_become_the_hosts_positions_as_a_path_trace_would(tmp_path: Path) -> None:
    link = plan_sweep(write(tmp_path, scenario())).runs[0].links[0]
    v = fcd(FCD)
    assert link.positions == (v["v1"], v["v2"], ({"at_ns": 0, "x_m": 0.0, "y_m": 0.0},))
    # the same points from a path_trace give the same link
    (tmp_path / "v2.csv").write_text("".join(f"{p['at_ns'] / 1e9},{p['x_m']},{p['y_m']}\n" for p in v["v2"]))
    (tmp_path / "m2.toml").write_text(scenario(b='path_trace = "v2.csv"'))
    assert plan_sweep(tmp_path / "m2.toml").runs[0].links[0].positions == link.positions


def test_the_vehicle_is_swept(tmp_path: Path) -> None:
    f = write(tmp_path, scenario(b='vehicle = "${car}"') + '\n[sweep]\ncar = ["v2", "v3"]\n')
    firsts = [r.links[0].positions[1][0]["x_m"] for r in plan_sweep(f).runs]
    assert firsts == [100.0, -400.0]


@pytest.mark.parametrize(
    ("kw", "fcd_text", "path", "words"),
    [
        ({"b": 'vehicle = "v9"'}, FCD, "host[1].vehicle", "never shows vehicle v9"),
        ({"b": 'vehicle = "v1"'}, FCD, "host[1].vehicle", "vehicle v1 is already host a's"),
        ({"mobility": ""}, FCD, "host[0].vehicle", "a vehicle and no [mobility] table"),
        ({"a": 'position = ["1 m", "0 m"]', "b": 'position = ["2 m", "0 m"]'}, FCD, "mobility",
         "no host is mapped to a vehicle"),
        ({}, FCD.replace("</timestep>", "", 1), "mobility.fcd", "not XML"),
        ({}, "<routes/>", "mobility.fcd", "root element is not <fcd-export>"),
        ({"mobility": '[mobility]\nfcd = "nowhere.xml"\n'}, FCD, "mobility.fcd", "cannot read"),
        ({"a": 'vehicle = "v1"\nposition = ["0 m", "0 m"]'}, FCD, "host[0].vehicle", "both position and vehicle"),
        ({"link": 'loss = "1%"'}, FCD, "host[0].vehicle", "on no link whose loss follows distance"),
        ({"c": ""}, FCD, "host[2].position", "host c has no position"),
        ({"mobility": '[mobility]\nfcd = "t.fcd.xml"\nspeed = "1"\n'}, FCD, "mobility.speed", "unknown key"),
        ({"mobility": '[mobility]\nfcd = "t.fcd.xml"\nstep = "1 s"\n'}, FCD, "mobility.step", "without net"),
        ({"mobility": '[mobility]\nfcd = "t.fcd.xml"\nnet = "n.net.xml"\nroutes = "r.rou.xml"\n'}, FCD,
         "mobility.fcd", "both fcd and net"),
        ({"mobility": '[mobility]\n'}, FCD, "mobility", "neither fcd nor net"),
        ({"mobility": '[mobility]\nnet = "t.fcd.xml"\n'}, FCD, "mobility.routes", "missing"),
        ({"mobility": '[mobility]\nnet = "t.fcd.xml"\nroutes = ["t.fcd.xml", "bad.xml"]\n'}, FCD,
         "mobility.routes[1]", "is not XML"),
        ({"mobility": '[mobility]\nnet = "nowhere.net.xml"\nroutes = "t.fcd.xml"\n'}, FCD, "mobility.net",
         "cannot read"),
        ({"mobility": '[mobility]\nnet = "t.fcd.xml"\nroutes = "t.fcd.xml"\nstep = "2 min"\n'}, FCD,
         "mobility.step", "above 1 min"),
    ],
)
def test_bad_mappings_exit_2_naming_the_key(tmp_path: Path, kw: dict, fcd_text: str, path: str, words: str) -> None:
    f = write(tmp_path, scenario(**kw), fcd_text)
    with pytest.raises(ScenarioError) as info:
        plan_sweep(f)
    assert any(p.path == path and words in f"{p.problem} {p.expected}" for p in info.value.problems), str(info.value)
    out = CliRunner().invoke(app, ["validate", str(f)], env={"COLUMNS": "250"})
    assert out.exit_code == 2, out.output
    assert path in out.output


@pytest.mark.skipif(not TOWN_FCD.exists(), reason="scenarios/sumo/town.fcd.xml is missing")
def test_run_refuses_an_unknown_vehicle_before_creating_anything(tmp_path: Path) -> None:
    # `roughnet run` plans (and so reads the FCD) before any namespace exists: no results folder either.
    f = tmp_path / "m.toml"
    f.write_text(scenario(b='vehicle = "nope"', mobility=f'[mobility]\nfcd = "{TOWN_FCD}"\n')
                 .replace('vehicle = "v1"', 'vehicle = "0"'))
    results = tmp_path / "results"
    out = CliRunner().invoke(app, ["run", str(f), "--results", str(results)], env={"COLUMNS": "250"})
    assert out.exit_code == 2, out.output
    assert "host[1].vehicle" in out.output and "never shows vehicle nope" in out.output
    assert not results.exists()


@pytest.mark.skipif(not HAVE_SUMO, reason="eclipse-sumo is not installed (make extras)")
def test_a_network_and_routes_are_simulated_when_planned_as_the_shipped_fcd(tmp_path: Path) -> None:
    # scenarios/sumo/town.fcd.xml was written by `roughnet mobility fcd` (60 s, 1 s steps, seed 1): a scenario
    # naming the network and routes instead, with a 60 s timeout and seed 1, gets exactly its points.
    town = ROOT / "scenarios" / "sumo"
    mobility = f'[mobility]\nnet = "{town / "town.net.xml"}"\nroutes = ["{town / "town.rou.xml"}"]\n'
    f = tmp_path / "m.toml"
    f.write_text(scenario(a='vehicle = "3"', b='vehicle = "0"', mobility=mobility))
    link = plan_sweep(f).runs[0].links[0]
    shipped = read_fcd(TOWN_FCD)
    assert link.positions[0] == shipped["3"] and link.positions[1] == shipped["0"]
    # a route file SUMO refuses: its message, at mobility.net, before anything is created
    (tmp_path / "r.rou.xml").write_text('<routes><vehicle id="x" depart="0"><route edges="nowhere"/></vehicle>'
                                        "</routes>\n")
    f.write_text(scenario(mobility=mobility.replace(str(town / "town.rou.xml"), "r.rou.xml")))
    with pytest.raises(ScenarioError) as info:
        plan_sweep(f)
    assert any(p.path == "mobility.net" and "sumo failed" in p.problem and "nowhere" in p.problem
               for p in info.value.problems), str(info.value)


def test_show_says_the_link_takes_its_distances_from_moving_hosts(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["show", str(write(tmp_path, scenario()))], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "a-b-c: ieee80211p loss, distances from the hosts' positions (2 of 3 moving)" in out.output, out.output
