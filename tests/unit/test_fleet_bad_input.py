"""Bad input of a fleet (issue 16) stops `roughnet run` with exit 2 naming the key before anything is created:
an FCD or SUMO network that does not parse, a host mapped to a vehicle the trace does not have, a host with no
position on the fleet's segment, a host pattern that matches nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from roughnet.cli import app

ROOT = Path(__file__).resolve().parents[2]
FCD = ROOT / "scenarios" / "sumo" / "town.fcd.xml"
NET = ROOT / "scenarios" / "sumo" / "town.net.xml"
ROUTES = ROOT / "scenarios" / "sumo" / "town.rou.xml"


def fleet(mobility: str = f'fcd = "{FCD}"', c2: str = 'vehicle = "2"', frm: str = '"c*"') -> str:
    return f"""
[scenario]
name = "bad-fleet"
engine = "wire"
timeout = "20 s"
[mobility]
{mobility}
[[host]]
name = "rsu"
position = ["200 m", "100 m"]
[[host]]
name = "c1"
vehicle = "1"
[[host]]
name = "c2"
{c2}
[[link]]
between = ["*"]
loss_model = {{ model = "ieee80211p" }}
[[workload]]
pattern = "stream"
protocol = "udp"
from = {frm}
to = "*"
payload = "300 B"
rate = "10 msg/s"
duration = "5 s"
"""


@pytest.mark.parametrize(
    ("kw", "path", "words"),
    [
        ({"mobility": 'fcd = "broken.fcd.xml"'}, "mobility.fcd", "not XML"),
        ({"mobility": f'net = "broken.fcd.xml"\nroutes = "{ROUTES}"'}, "mobility.net", "not XML"),
        ({"c2": 'vehicle = "99"'}, "host[2].vehicle", "never shows vehicle 99"),
        ({"c2": ""}, "host[2].position", "host c2 has no position"),
        ({"frm": '"car*"'}, "workload[0].from", "matches no host"),
    ],
)
def test_run_exits_2_naming_the_key_and_creates_nothing(tmp_path: Path, kw: dict, path: str, words: str) -> None:
    (tmp_path / "broken.fcd.xml").write_text('<fcd-export><timestep time="0.00"><vehicle id="1" x="1"\n')
    f = tmp_path / "fleet.toml"
    f.write_text(fleet(**kw))
    results = tmp_path / "results"
    out = CliRunner().invoke(app, ["run", str(f), "--results", str(results)], env={"COLUMNS": "250"})
    assert out.exit_code == 2, out.output
    assert path in out.output and words in out.output, out.output
    assert not results.exists()
