"""Mobility from SUMO (issue 16): the eclipse-sumo wheel's `sumo` writes floating-car data for the shipped
network (scenarios/sumo), and hosts mapped to vehicles of an FCD trace get the vehicles' positions on a wire
segment with the 802.11p model, so delivery follows the distance between vehicles: a stream reaches the car
driving 60 m away and never the one 1 km away; a car that drives off after 8 s gets what was sent before and
nothing after.

The FCD of the wire tests is written here in SUMO's format (as `sumo --fcd-output` writes it) with chosen
trajectories, so the distances are known; the first test shows SUMO itself writing that format.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from roughnet.binaries import agent_version, find_binary
from roughnet.cli import app
from roughnet.mobility.fcd import read_fcd
from roughnet.plan import plan_sweep
from roughnet.run.runner import Preflight, execute_run

from test_wire_positions import before_and_after_leaving

ROOT = Path(__file__).resolve().parents[2]
TOWN = ROOT / "scenarios" / "sumo"
WIRE = find_binary("roughnet-wire")
AGENT = find_binary("roughnet-agent")

try:
    import sumo as _sumo  # noqa: F401  (the eclipse-sumo wheel)

    HAVE_SUMO = True
except ImportError:
    HAVE_SUMO = False


@pytest.mark.skipif(not HAVE_SUMO, reason="eclipse-sumo is not installed (make extras)")
def test_sumo_from_the_wheel_writes_an_fcd_of_the_shipped_network_whose_vehicles_move(tmp_path: Path) -> None:
    out = tmp_path / "town.fcd.xml"
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["mobility", "fcd", str(TOWN / "town.net.xml"), str(TOWN / "town.rou.xml"),
                                   "--out", str(out), "--end", "12 s", "--step", "0.5 s"])  # fmt: skip
    took = time.monotonic() - t0
    assert res.exit_code == 0, res.output
    assert "vehicles over 12 s in steps of 0.5 s" in res.output
    assert took < 30, took
    v = read_fcd(out)
    # One trip departs every 1.25 s: about ten are on the road within 12 s.
    assert len(v) >= 6, sorted(v)
    times = sorted({p["at_ns"] for pts in v.values() for p in pts})
    assert times[0] == 0 and times[1] - times[0] == 500_000_000 and times[-1] <= 12_000_000_000, times[:3]
    moved = [vid for vid, pts in v.items()
             if max(abs(p["x_m"] - pts[0]["x_m"]) + abs(p["y_m"] - pts[0]["y_m"]) for p in pts) > 20]  # fmt: skip
    assert len(moved) >= 4, {vid: (pts[0], pts[-1]) for vid, pts in v.items()}


@pytest.mark.skipif(not HAVE_SUMO, reason="eclipse-sumo is not installed (make extras)")
def test_sumo_refusing_its_files_exits_2_with_sumos_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.rou.xml"
    bad.write_text('<routes><vehicle id="x" depart="0"><route edges="nowhere"/></vehicle></routes>\n')
    res = CliRunner().invoke(app, ["mobility", "fcd", str(TOWN / "town.net.xml"), str(bad), "--out",
                                   str(tmp_path / "o.xml"), "--end", "5 s"], env={"COLUMNS": "250"})  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "sumo failed" in res.output and "nowhere" in res.output, res.output


def fcd_text(tracks: dict[str, list[tuple[float, float]]]) -> str:
    """An FCD file as SUMO writes it, one time step per second: vehicle -> [(x, y) at 0 s, 1 s, ...]."""
    steps = max(len(t) for t in tracks.values())
    out = ['<?xml version="1.0" encoding="UTF-8"?>', "<fcd-export>"]
    for k in range(steps):
        out.append(f'    <timestep time="{k:.2f}">')
        for vid, track in tracks.items():
            if k < len(track):
                x, y = track[k]
                out.append(f'        <vehicle id="{vid}" x="{x:.2f}" y="{y:.2f}" angle="90.00" '
                           'type="DEFAULT_VEHTYPE" speed="10.00" pos="0.00" lane="e_0" slope="0.00"/>')
        out.append("    </timestep>")
    out.append("</fcd-export>")
    return "\n".join(out) + "\n"


SCENARIO = """
[scenario]
name = "sumo-fleet"
engine = "wire"
timeout = "10 s"

[mobility]
fcd = "fleet.fcd.xml"

[[host]]
name = "a"
vehicle = "lead"
[[host]]
name = "near"
vehicle = "follow"
[[host]]
name = "mid"
vehicle = "side"
[[host]]
name = "far"
vehicle = "oncoming"

[[link]]
between = ["a", "near", "mid", "far"]
loss_model = { model = "ieee80211p" }

[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = ["near", "far"]
payload = "500 B"
messages = 400
rate = "200 msg/s"
"""

#: 20 s of a small fleet, 1 s steps: the lead and its follower drive east at 10 m/s, 60 m apart; a car 150 m
#: to the side; an oncoming car 1 km ahead, slowly (2 m/s), still about 1 km away at 20 s.
FLEET = {
    "lead": [(10.0 * k, 0.0) for k in range(21)],
    "follow": [(10.0 * k - 60.0, 0.0) for k in range(21)],
    "side": [(10.0 * k, -150.0) for k in range(21)],
    "oncoming": [(1000.0 - 2.0 * k, 3.2) for k in range(21)],
    "other": [(5000.0, 0.0)] * 21,  # mapped to no host: ignored
}


@pytest.mark.root
@pytest.mark.skipif(WIRE is None, reason="roughnet-wire is not built (make build)")
@pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)")
def test_a_stream_between_vehicles_reaches_the_follower_and_not_the_oncoming_car(tmp_path: Path) -> None:
    (tmp_path / "fleet.fcd.xml").write_text(fcd_text(FLEET))
    f = tmp_path / "sumo-fleet.toml"
    f.write_text(SCENARIO)
    run = plan_sweep(f).runs[0]
    pos = run.links[0].positions
    assert [len(p) for p in pos] == [21, 21, 21, 21]
    assert pos[1][3] == {"at_ns": 3_000_000_000, "x_m": -30.0, "y_m": 0.0}
    pf = Preflight(agent_path=AGENT, agent=agent_version(str(AGENT)), caps=None, engines={run.run_id: {0: "wire"}})
    art = tmp_path / run.run_id
    art.mkdir()
    rec = execute_run(run, pf, art)
    assert rec["status"] == "ok", (rec["failure_reason"], rec["stderr_tail"])
    per_rx = {r["host"]: r["metrics"] for r in rec["receivers"]}
    assert per_rx["near"]["received"] >= 398, per_rx["near"]
    assert per_rx["far"]["received"] == 0, per_rx["far"]
    lc = rec["link_counters"]["0"]
    assert lc["ports"]["far"]["downlink"]["drops_frame_error"] >= 400, lc["ports"]["far"]
    assert lc["ports"]["near"]["downlink"]["tx_packets"] >= 398, lc["ports"]["near"]


@pytest.mark.root
@pytest.mark.skipif(WIRE is None, reason="roughnet-wire is not built (make build)")
def test_a_car_that_drives_off_is_reached_before_and_not_after(tmp_path: Path) -> None:
    # "leaver" is 50 m from the lead until 8 s, at 2 km from 9 s; "stays" keeps 60 m. The mapping goes through
    # the scenario (plan_sweep) and its link is run on the wire. A first batch (broadcast) goes while the
    # leaver is near, a second (multicast) once it is far: it gets the first only; "stays" gets both.
    tracks = {"lead": [(0.0, 0.0)] * 12, "stays": [(0.0, 60.0)] * 12,
              "leaver": [(50.0, 0.0)] * 9 + [(2000.0, 0.0)] * 3}  # fmt: skip
    (tmp_path / "fleet.fcd.xml").write_text(fcd_text(tracks))
    text = (SCENARIO.replace('"follow"', '"stays"').replace('"side"', '"leaver"')
            .replace('[[host]]\nname = "far"\nvehicle = "oncoming"\n', "")
            .replace('["a", "near", "mid", "far"]', '["a", "near", "mid"]').replace('["near", "far"]', '"near"'))
    f = tmp_path / "drive-off.toml"
    f.write_text(text)
    link = plan_sweep(f).runs[0].links[0]
    assert link.positions[2][8] == {"at_ns": 8_000_000_000, "x_m": 50.0, "y_m": 0.0}
    assert link.positions[2][9] == {"at_ns": 9_000_000_000, "x_m": 2000.0, "y_m": 0.0}
    port, group, n = 7440, "239.255.0.5", 50
    first_done, got, st = before_and_after_leaving(("a", "near", "mid"), link, "mid", port, group, n)
    assert first_done < 7.5, f"the first batch ended {first_done:.1f} s after the start: the leaver had left"
    assert got["near"] == {"198.18.0.255": n, group: n}, got
    assert got["mid"] == {"198.18.0.255": n}, got
    assert st["ports"][2]["downlink"]["drops"]["frame_error"] >= n, st["ports"][2]["downlink"]


@pytest.mark.slowlink(seconds=56)  # the trace's 60 s; 2 s of CPU
@pytest.mark.root
@pytest.mark.skipif(WIRE is None, reason="roughnet-wire is not built (make build)")
@pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)")
def test_the_sumo_fleet_scenario_reaches_the_town_car_and_the_highway_car_only_as_it_comes_near(
        tmp_path: Path) -> None:  # fmt: skip
    # scenarios/sumo-fleet.toml as shipped (one run of about 60 s: the trace's length; it cannot be shortened
    # without changing what it shows). Its trace is SUMO's own (scenarios/sumo/town.fcd.xml).
    run = plan_sweep(ROOT / "scenarios" / "sumo-fleet.toml").runs[0]
    highway = run.links[0].positions[2]
    assert highway[0]["x_m"] - 550 > 900 and highway[-1]["x_m"] - 550 < 300, (highway[0], highway[-1])
    pf = Preflight(agent_path=AGENT, agent=agent_version(str(AGENT)), caps=None, engines={run.run_id: {0: "wire"}})
    art = tmp_path / run.run_id
    art.mkdir()
    rec = execute_run(run, pf, art)
    assert rec["status"] == "ok", (rec["failure_reason"], rec["stderr_tail"])
    per_rx = {r["host"]: r["metrics"] for r in rec["receivers"]}
    assert per_rx["town"]["received"] >= 545, per_rx["town"]  # within about 270 m all along
    # out of range for the first ~40 s of 55, then in range: some, not most (79 of 550 here)
    assert 20 <= per_rx["highway"]["received"] <= 300, per_rx["highway"]
    lc = rec["link_counters"]["0"]
    assert lc["ports"]["highway"]["downlink"]["drops_frame_error"] >= 250, lc["ports"]["highway"]
