"""Data files a scenario names (issue 26): a file that is not in the expected format is refused with exit 2
naming the key, the file, the line and what was expected, and never quoting its content, so that a scenario
(run as root) cannot make roughnet print a line of a file such as /etc/shadow. One case per kind of data file:
a host's `path_trace`, a link's `distance_trace`, a schedule CSV of a [sweep] file axis, `[mobility] fcd`,
`[mobility] net` and `routes` (SUMO inputs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from roughnet.cli import app

ROOT = Path(__file__).resolve().parents[2]
ROUTES = ROOT / "scenarios" / "sumo" / "town.rou.xml"
NET = ROOT / "scenarios" / "sumo" / "town.net.xml"

SECRET = "Zq8SECRETx7"
# What a line of /etc/shadow, a private key or a token file looks like; each is a different way to fail.
CONTENTS = {
    "shadow": f"root:$y$j9T${SECRET}$abc:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",
    "commas": f"{SECRET},other\n",  # 2 fields where 3 or 5 are expected
    "header-then-secret": f"time_s,x_m,y_m\n0,1,{SECRET}\n",  # a number expected
    "ok-then-secret": f"0,1,2\n{SECRET}\n",  # a bad second line
    "xml": f"<{SECRET} password=\"{SECRET}\"><a>{SECRET}</a></{SECRET}>\n",  # XML of another kind
}

WIRE_HEAD = """
[scenario]
name = "secret"
engine = "wire"
timeout = "20 s"
"""
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


def path_trace() -> tuple[str, str]:
    return (WIRE_HEAD + '[[host]]\nname = "a"\nposition = ["0 m", "0 m"]\n[[host]]\nname = "b"\n'
            'path_trace = "data.txt"\n[[link]]\nbetween = ["a", "b"]\nloss_model = { model = "ieee80211p" }\n'
            + WORKLOAD, "host[1].path_trace")  # fmt: skip


def distance_trace() -> tuple[str, str]:
    return (WIRE_HEAD + '[[host]]\nname = "a"\n[[host]]\nname = "b"\n[[link]]\nbetween = ["a", "b"]\n'
            'loss_model = { model = "ieee80211p" }\ndistance_trace = "data.txt"\n' + WORKLOAD,
            "link[0].distance_trace")  # fmt: skip


def schedule() -> tuple[str, str]:
    return ('[scenario]\nname = "secret"\n[[host]]\nname = "a"\n[[host]]\nname = "b"\n[[link]]\n'
            'between = ["a", "b"]\n' + WORKLOAD.replace('"200 B"', '"${schedule.data_length} B"')
            + '[sweep]\nschedule = { file = "data.txt", ignore = ["batch_size"] }\n', "sweep.schedule")  # fmt: skip


def fleet(mobility: str) -> str:
    return (WIRE_HEAD + f"[mobility]\n{mobility}\n" + '[[host]]\nname = "a"\nposition = ["0 m", "0 m"]\n'
            '[[host]]\nname = "b"\nvehicle = "1"\n[[link]]\nbetween = ["a", "b"]\n'
            'loss_model = { model = "ieee80211p" }\n' + WORKLOAD)  # fmt: skip


def fcd() -> tuple[str, str]:
    return fleet('fcd = "data.txt"'), "mobility.fcd"


def sumo_net() -> tuple[str, str]:
    return fleet(f'net = "data.txt"\nroutes = "{ROUTES}"'), "mobility.net"


def sumo_routes() -> tuple[str, str]:
    return fleet(f'net = "{NET}"\nroutes = "data.txt"'), "mobility.routes[0]"


KINDS = {"path_trace": path_trace, "distance_trace": distance_trace, "schedule": schedule, "fcd": fcd,
         "sumo_net": sumo_net, "sumo_routes": sumo_routes}


@pytest.mark.parametrize("content", sorted(CONTENTS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_data_file_of_another_format_is_refused_without_its_content(tmp_path: Path, kind: str,
                                                                      content: str) -> None:  # fmt: skip
    data = tmp_path / "data.txt"
    data.write_text(CONTENTS[content])
    text, key = KINDS[kind]()
    f = tmp_path / "s.toml"
    f.write_text(text)
    out = CliRunner().invoke(app, ["validate", str(f)], env={"COLUMNS": "250"})
    assert out.exit_code == 2, out.output
    assert SECRET.lower() not in out.output.lower(), out.output
    assert key in out.output and data.name in out.output, out.output  # the key and the file are named
    assert "expected" in out.output, out.output


@pytest.mark.parametrize("kind", ["path_trace", "distance_trace", "schedule"])
def test_the_error_names_the_line(tmp_path: Path, kind: str) -> None:
    (tmp_path / "data.txt").write_text(CONTENTS["ok-then-secret"] if kind == "path_trace" else f"0,1\n{SECRET}\n"
                                       if kind == "distance_trace"
                                       else f"data_length,batch_size\n100,0\n{SECRET},1\n")  # fmt: skip
    text, _ = KINDS[kind]()
    f = tmp_path / "s.toml"
    f.write_text(text)
    out = CliRunner().invoke(app, ["validate", str(f)], env={"COLUMNS": "250"})
    assert out.exit_code == 2 and SECRET not in out.output, out.output
    assert ("line 2" if kind != "schedule" else "line 3") in out.output, out.output
