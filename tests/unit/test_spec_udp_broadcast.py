"""The UDP `broadcast` knob (docs/protocols.md): scenario value -> agent option, and its misuse as exit 2.

A broadcast reaches only the sender's segment, so every receiver must be on one [[link]] with the sender,
and only one-way patterns (stream, bulk) may use it; `roughnet validate` refuses anything else naming
`workload.udp.broadcast`, before anything is created.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from roughnet.cli import app

from conftest import toml_hosts, toml_stream
from specutil import plan_error, plan_text

ONE_SEGMENT = """\
[scenario]
name = "t"
""" + toml_hosts("a", "b", "c") + """\
[[link]]
between = ["a", "b", "c"]
""" + toml_stream("udp", to='["b", "c"]')

TWO_LINKS = """\
[scenario]
name = "t"
""" + toml_hosts("a", "b", "c") + """\
[[link]]
between = ["a", "b"]
[[link]]
between = ["a", "c"]
""" + toml_stream("udp", to='["b", "c"]')


def test_broadcast_becomes_an_agent_option() -> None:
    assert plan_text(ONE_SEGMENT + "[workload.udp]\nbroadcast = true\n").runs[0].workload.options == {
        "broadcast": True}
    assert plan_text(ONE_SEGMENT).runs[0].workload.options == {}


def test_broadcast_needs_every_receiver_on_the_senders_segment() -> None:
    err = plan_error(TWO_LINKS + "[workload.udp]\nbroadcast = true\n")
    assert "workload.udp.broadcast" in str(err) and "one segment" in str(err), str(err)
    # Unicast copies over the two links are fine.
    plan_text(TWO_LINKS + "[workload.udp]\nbroadcast = false\n")


def test_broadcast_is_for_one_way_patterns() -> None:
    ping = ONE_SEGMENT.replace('pattern = "stream"', 'pattern = "ping"').replace('["b", "c"]', '"b"')
    err = plan_error(ping + "[workload.udp]\nbroadcast = true\n")
    assert "workload.udp.broadcast" in str(err) and 'not for pattern "ping"' in str(err), str(err)


def test_validate_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(TWO_LINKS + "[workload.udp]\nbroadcast = true\n")
    out = CliRunner().invoke(app, ["validate", str(path)])
    assert out.exit_code == 2, out.output
    assert "workload.udp.broadcast" in out.output, out.output
    path.write_text(ONE_SEGMENT + '[workload.udp]\nbroadcast = "yes"\n')
    out = CliRunner().invoke(app, ["validate", str(path)])
    assert out.exit_code == 2 and "workload.udp.broadcast" in out.output, out.output
