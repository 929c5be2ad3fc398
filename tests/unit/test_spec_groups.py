"""Host-name patterns in `from`, `to` and `between` (spec.groups, issue 16): a fleet's all-to-all workload in
one stanza, each sender's flow to every host of `to` but itself, and patterns matching nothing refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from roughnet.cli import app
from roughnet.spec import ScenarioError
from roughnet.plan import plan_sweep
from roughnet.run.timeline import plan_flows


def fleet(frm: str = '"c*"', to: str = '"*"', between: str = '["*"]', hosts: tuple[str, ...] = ("rsu", "c1", "c2",
          "c3")) -> str:  # fmt: skip
    text = '[scenario]\nname = "f"\nengine = "wire"\n'
    for i, h in enumerate(hosts):
        text += f'[[host]]\nname = "{h}"\nposition = ["{i * 50} m", "0 m"]\n'
    text += f'[[link]]\nbetween = {between}\nloss_model = {{ model = "ieee80211p" }}\n'
    text += (f'[[workload]]\nname = "cam"\npattern = "stream"\nprotocol = "udp"\nfrom = {frm}\nto = {to}\n'
             'payload = "300 B"\nrate = "10 msg/s"\nduration = "5 s"\n')
    return text


def plan(tmp_path: Path, text: str):
    f = tmp_path / "f.toml"
    f.write_text(text)
    return plan_sweep(f).runs[0]


def test_all_to_all_expands_to_every_car_sending_to_every_other_host(tmp_path: Path) -> None:
    run = plan(tmp_path, fleet())
    assert run.links[0].hosts == ("rsu", "c1", "c2", "c3")
    w = run.all_workloads[0]
    assert w.senders == ("c1", "c2", "c3") and w.receivers == ("rsu", "c1", "c2", "c3")
    flows = plan_flows(run, lambda h, peer=None: f"198.18.0.{'rsu c1 c2 c3'.split().index(h) + 1}:5201",
                       None, None, tmp_path)  # fmt: skip
    got = {f.sender: sorted(sp.host for sp in f.specs if sp.role != "sender") for f in flows}
    assert got == {"c1": ["c2", "c3", "rsu"], "c2": ["c1", "c3", "rsu"], "c3": ["c1", "c2", "rsu"]}
    assert len({sp.config["listen"] for f in flows for sp in f.specs if sp.role != "sender"}) == 9


def test_patterns_mix_with_names_and_keep_file_order(tmp_path: Path) -> None:
    run = plan(tmp_path, fleet(frm='["c?", "rsu"]', to='["rsu", "c*"]'))
    assert run.all_workloads[0].senders == ("c1", "c2", "c3", "rsu")
    assert run.all_workloads[0].receivers == ("rsu", "c1", "c2", "c3")


@pytest.mark.parametrize(
    ("kw", "path", "words"),
    [
        ({"frm": '"car*"'}, "workload[0].from", "the pattern matches no host"),
        ({"to": '["rsu", "x?"]'}, "workload[0].to[1]", "the pattern matches no host"),
        ({"between": '["z*", "rsu"]'}, "link[0].between[0]", "the pattern matches no host"),
        ({"frm": '["c1", "c2"]', "to": '"c1"'}, "workload[0].to", "sender 'c1' has no receiver other than itself"),
        ({"frm": '"c1"', "to": '"*"'}, "workload[0].to[1]", "the sender is also a receiver"),
    ],
)
def test_bad_patterns_exit_2_naming_the_key(tmp_path: Path, kw: dict, path: str, words: str) -> None:
    f = tmp_path / "f.toml"
    f.write_text(fleet(**kw))
    with pytest.raises(ScenarioError) as info:
        plan_sweep(f)
    assert any(p.path == path and words in p.problem for p in info.value.problems), str(info.value)
    results = tmp_path / "results"
    out = CliRunner().invoke(app, ["run", str(f), "--results", str(results)], env={"COLUMNS": "250"})
    assert out.exit_code == 2, out.output
    assert path in out.output
    assert not results.exists()


def test_the_shipped_fleet_scenarios_expand(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2] / "scenarios"
    ci = plan_sweep(root / "v2v-fleet-ci.toml").runs[0]
    assert ci.all_workloads[0].senders == ("c0", "c1", "c2", "c4", "c5", "c6")
    assert len(ci.links[0].hosts) == 7 and all(ci.links[0].positions)
    full = plan_sweep(root / "v2v-fleet.toml").runs
    assert sorted(r.all_workloads[0].protocol for r in full) == ["dds", "udp", "zenoh"]
    town = plan_sweep(root / "v2v-fleet-town.toml").runs
    assert sorted(r.all_workloads[0].protocol for r in town) == ["dds", "mqtt", "udp", "zenoh"]
