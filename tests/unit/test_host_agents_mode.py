"""[scenario] agents (issue 27): which runs get one agent process per host, what the spec refuses, and that
the key leaves existing run and sweep ids alone when it is not set."""

from __future__ import annotations

import pytest

from roughnet.errors import SpecError
from roughnet.plan import sweep_from_scenario
from roughnet.run.hostagent import agents_mode
from roughnet.spec import loads

FLEET = """\
[scenario]
name = "f"
{agents}
[[host]]
name = "c1"
[[host]]
name = "c2"
[[host]]
name = "c3"
[[link]]
between = ["*"]
[workload]
pattern = "stream"
protocol = "{protocol}"
from = "{from_}"
to = {to}
payload = "300 B"
rate = "10 msg/s"
duration = "1 s"
{extra}
"""


def sweep(agents: str = "", protocol: str = "udp", from_: str = "c*", extra: str = ""):
    to = '"*"' if from_ == "c*" else '["c2", "c3"]'
    text = FLEET.format(agents=agents, protocol=protocol, from_=from_, extra=extra, to=to)
    return sweep_from_scenario(loads(text, "f.toml"), "f.toml")


def test_auto_takes_host_for_several_senders_and_flow_otherwise() -> None:
    assert agents_mode(sweep().runs[0]) == "host"
    assert agents_mode(sweep(from_="c1").runs[0]) == "flow"  # one flow: nothing to share
    kill = '[[event]]\nat = "0.5 s"\naction = "kill"\nworkload = "w"\nhost = "c2"\n'
    assert agents_mode(sweep(extra='name = "w"\n' + kill).runs[0]) == "flow"  # the event kills one flow only
    assert agents_mode(sweep(protocol="zenoh").runs[0]) == "host"
    assert agents_mode(sweep(protocol="dds").runs[0]) == "flow"  # one Cyclone domain per id in a process
    assert agents_mode(sweep('agents = "flow"').runs[0]) == "flow"
    assert agents_mode(sweep('agents = "host"', from_="c1").runs[0]) == "host"


@pytest.mark.parametrize("protocol", ["ros2", "dds"])
def test_host_mode_refuses_protocols_a_host_agent_cannot_carry(protocol: str) -> None:
    with pytest.raises(SpecError) as e:
        sweep('agents = "host"', protocol=protocol)
    assert "workload.protocol" in str(e.value) and "not carried by host agents" in str(e.value)


def test_unknown_mode_is_refused_naming_the_key() -> None:
    with pytest.raises(SpecError) as e:
        sweep('agents = "process"')
    assert "scenario.agents" in str(e.value) and '"host"' in str(e.value)


def test_ids_unchanged_unless_the_mode_is_set() -> None:
    plain, auto, host = sweep(), sweep('agents = "auto"'), sweep('agents = "host"')
    assert plain.runs[0].run_id == auto.runs[0].run_id and plain.sweep_id == auto.sweep_id
    assert host.runs[0].run_id != plain.runs[0].run_id
