"""Hosts' positions for links whose loss follows distance (issue 16, per-pair links): `position` and
`[[host.path]]` resolved into wire-core's `positions` in the link's host order, the wire JSON carrying
them, and every bad combination refused with the key and the host named (exit 2 from the CLI)."""

from __future__ import annotations

import pytest

from roughnet.links.wire import link_config
from roughnet.plan import plan_sweep
from roughnet.spec import ScenarioError

from specutil import plan_error, plan_text

WORKLOAD = """
[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = ["b", "c"]
payload = "200 B"
messages = 10
rate = "10 msg/s"
"""
RADIO = 'loss_model = { model = "ieee80211p" }'


def scenario(a: str = 'position = ["0 m", "0 m"]', b: str = 'position = ["80 m", "0 m"]',
             c: str = 'position = ["-0.5 km", "1 km"]', link: str = RADIO, after: str = "") -> str:
    hosts = "".join(f'[[host]]\nname = "{n}"\n{keys}\n' for n, keys in (("a", a), ("b", b), ("c", c)))
    return ('[scenario]\nname = "p"\nengine = "wire"\n\n' + hosts + '\n[[link]]\nbetween = ["a", "b", "c"]\n'
            + link + "\n" + after + WORKLOAD)


def test_fixed_positions_become_the_links_positions_in_host_order() -> None:
    link = plan_text(scenario()).runs[0].links[0]
    assert link.positions == (
        ({"at_ns": 0, "x_m": 0.0, "y_m": 0.0},),
        ({"at_ns": 0, "x_m": 80.0, "y_m": 0.0},),
        ({"at_ns": 0, "x_m": -500.0, "y_m": 1000.0},),
    )
    assert "positions" in link.needs()
    cfg = link_config(link)
    assert cfg["positions"][2] == [{"at_ns": 0, "x_m": -500.0, "y_m": 1000.0}]
    assert "distance_trace" not in cfg


def test_a_path_over_time_and_a_profile() -> None:
    path = ('[[host.path]]\nat = "0 s"\nposition = ["0 m", "0 m"]\n'
            '[[host.path]]\nat = "10 s"\nposition = ["1 km", "0 m"]')
    text = scenario(b="", link='profile = "v2v-80211p"').replace('name = "b"\n', 'name = "b"\n' + path + "\n")
    link = plan_text(text).runs[0].links[0]
    assert link.positions[1] == ({"at_ns": 0, "x_m": 0.0, "y_m": 0.0},
                                 {"at_ns": 10_000_000_000, "x_m": 1000.0, "y_m": 0.0})  # fmt: skip


def test_positions_are_swept() -> None:
    text = scenario(c='position = ["${far}", "0 m"]') + '\n[sweep]\nfar = ["100 m", "2 km"]\n'
    xs = [r.links[0].positions[2][0]["x_m"] for r in plan_text(text).runs]
    assert xs == [100.0, 2000.0]


def test_links_without_positions_are_unchanged() -> None:
    text = scenario(a="", b="", c="")
    link = plan_text(text).runs[0].links[0]
    assert link.positions == ()
    assert "positions" not in link_config(link)


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        (scenario(b=""), "host[1].position", "host b has no position"),
        (scenario(c='position = ["1 m"]'), "host[2].position", "two coordinates"),
        (scenario(c='position = ["1 m", "2 parsecs"]'), "host[2].position", "unknown distance unit"),
        (scenario(link=RADIO + '\n[[link.distance]]\nat = "0 s"\ndistance = "5 m"'), "link[0].distance",
         "hosts with positions"),
        (scenario(link='loss_model = { model = "ieee80211p", distance = "50 m" }'), "link[0].loss_model.distance",
         "hosts with positions"),
        (scenario(link='loss = "1%"'), "host[0].position", "on no link whose loss follows distance"),
        (scenario(a='position = ["0 m", "0 m"]\n[[host.path]]\nat = "0 s"\nposition = ["0 m", "0 m"]'),
         "host[0].path", "both position and [[host.path]]"),
    ],
)
def test_bad_positions_name_the_key(text: str, path: str, words: str) -> None:
    e = plan_error(text)
    assert isinstance(e, ScenarioError)
    assert any(p.path == path and words in f"{p.problem} {p.expected}" for p in e.problems), str(e)


def test_the_cli_exits_2_naming_the_host_before_anything_is_created(tmp_path) -> None:
    from typer.testing import CliRunner

    from roughnet.cli import app

    f = tmp_path / "p.toml"
    f.write_text(scenario(c=""))
    out = CliRunner().invoke(app, ["validate", str(f)], env={"COLUMNS": "250"})
    assert out.exit_code == 2, out.output
    assert "host[2].position" in out.output
    assert "host c has no position" in out.output


TABLE = 'loss_model = { model = "distance_table", points = [["100 m", "0%"], ["400 m", "100%"]] }'


def test_a_distance_table_is_a_per_pair_model_from_positions() -> None:
    link = plan_text(scenario(link=TABLE)).runs[0].links[0]
    assert len(link.positions) == 3
    cfg = link_config(link)
    assert cfg["a_to_b"]["loss"] == {"model": "distance_table",
                                     "points": [{"distance_m": 100.0, "p": 0.0}, {"distance_m": 400.0, "p": 1.0}]}


@pytest.mark.parametrize(
    ("points", "words"),
    [
        ("[]", "not a non-empty list"),
        ('[["100 m"]]', "entry 0 is not a [distance, loss] pair"),
        ('[["100 m", "0%"], ["50 m", "10%"]]', "entry 1: a distance shorter than the one before"),
        ('[["100 m", "150%"]]', "entry 0"),
        ('[["-1 m", "0%"]]', "entry 0"),
    ],
)
def test_bad_distance_tables_name_the_key(points: str, words: str) -> None:
    e = plan_error(scenario(a="", b="", c="", link=f'loss_model = {{ model = "distance_table", points = {points} }}'))
    assert any(p.path == "link[0].loss_model.points" and words in p.problem for p in e.problems), str(e)


def test_a_path_from_a_file(tmp_path) -> None:
    from roughnet.spec.positions import parse_path_csv

    (tmp_path / "car.csv").write_text("time_s,x_m,y_m\n# leaving\n0,10,0\n2.5,-300,40.5\n")
    f = tmp_path / "p.toml"
    f.write_text(scenario(c='path_trace = "car.csv"'))
    run = plan_sweep(f).runs[0]
    assert run.links[0].positions[2] == ({"at_ns": 0, "x_m": 10.0, "y_m": 0.0},
                                         {"at_ns": 2_500_000_000, "x_m": -300.0, "y_m": 40.5})  # fmt: skip
    for text, words in [("0,1\n", "2 comma-separated fields, not 3"), ("0,1,x\n", "field 3 is not a number"), ("1,0,0\n0,0,0\n", "before"),
                        ("-1,0,0\n", "negative time"), ("# nothing\n", "no points")]:  # fmt: skip
        with pytest.raises(ValueError, match=words):
            parse_path_csv(text, "car.csv")


def test_a_missing_path_file_names_the_key(tmp_path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(scenario(c='path_trace = "nowhere.csv"'))
    with pytest.raises(ScenarioError) as info:
        plan_sweep(f)
    assert any(p.path == "host[2].path_trace" and "cannot read" in p.problem for p in info.value.problems)
    e = plan_error(scenario(c='position = ["0 m", "0 m"]\npath_trace = "x.csv"'))
    assert any(p.path == "host[2].path_trace" and "both position and path_trace" in p.problem for p in e.problems)
