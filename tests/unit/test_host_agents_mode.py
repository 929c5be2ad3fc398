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
    assert agents_mode(sweep(protocol="dds").runs[0]) == "host"  # one participant per host agent
    assert agents_mode(sweep('agents = "flow"').runs[0]) == "flow"
    assert agents_mode(sweep('agents = "host"', from_="c1").runs[0]) == "host"


def test_host_mode_refuses_protocols_a_host_agent_cannot_carry() -> None:
    with pytest.raises(SpecError) as e:
        sweep('agents = "host"', protocol="ros2")
    assert "workload.protocol" in str(e.value) and "not carried by host agents" in str(e.value)
    assert agents_mode(sweep('agents = "host"', protocol="dds").runs[0]) == "host"


def test_dds_flows_of_a_host_agent_share_one_participant_index() -> None:
    """Host mode: one participant per host, at index 100 in every host; per flow: 100 + the flow's number."""
    for mode, indexes in (("host", {100}), ("flow", {100, 101, 102})):
        run = sweep(f'agents = "{mode}"', protocol="dds").runs[0]
        flows, _ = _flows(run)
        got = {s.config["options"]["participant_index"] for f in flows for s in f.specs}
        assert got == indexes, mode
    run = sweep('agents = "host"', protocol="dds", extra="[workload.dds]\nros2 = true\n").runs[0]
    flows, _ = _flows(run)
    assert all("participant_index" not in s.config["options"] for f in flows for s in f.specs)  # ROS 2: auto


def test_unknown_mode_is_refused_naming_the_key() -> None:
    with pytest.raises(SpecError) as e:
        sweep('agents = "process"')
    assert "scenario.agents" in str(e.value) and '"host"' in str(e.value)


def test_ids_unchanged_unless_the_mode_is_set() -> None:
    plain, auto, host = sweep(), sweep('agents = "auto"'), sweep('agents = "host"')
    assert plain.runs[0].run_id == auto.runs[0].run_id and plain.sweep_id == auto.sweep_id
    assert host.runs[0].run_id != plain.runs[0].run_id


def _flows(run):
    from pathlib import Path

    from roughnet.run.timeline import plan_flows

    def address_of(host: str, seen_from: str) -> str:  # host cN is 198.18.0.N on the one segment
        return f"198.18.0.{host[1:]}"

    return plan_flows(run, address_of, None, None, Path("/tmp")), address_of


def test_a_udp_workloads_receivers_on_a_host_share_one_port_and_name_their_sender() -> None:
    from roughnet.run.hostagent import SHARED_RCVBUF_MIN, SHARED_UDP_PORT_BASE, share_udp_sockets

    run = sweep().runs[0]
    flows, address_of = _flows(run)
    assert share_udp_sockets(run, flows, address_of) == 3
    for f in flows:
        *receivers, sender = f.specs
        assert sender.config["peers"] == [f"198.18.0.{r.host[1:]}:{SHARED_UDP_PORT_BASE}" for r in receivers]
        for r in receivers:
            assert r.config["listen"] == f"198.18.0.{r.host[1:]}:{SHARED_UDP_PORT_BASE}"
            assert r.config["source"] == f"198.18.0.{f.sender[1:]}"
            assert r.config["options"]["recv_buffer"] == SHARED_RCVBUF_MIN  # 3 senders x 32 KiB is less
        assert "source" not in sender.config


def test_shared_udp_sockets_keep_the_workloads_receive_buffer_and_skip_other_protocols() -> None:
    from roughnet.run.hostagent import share_udp_sockets

    run = sweep(extra='[workload.udp]\nrecv_buffer = "1 MiB"\n').runs[0]
    flows, address_of = _flows(run)
    share_udp_sockets(run, flows, address_of)
    assert {r.config["options"]["recv_buffer"] for f in flows for r in f.specs[:-1]} == {1 << 20}
    run = sweep(protocol="zenoh").runs[0]
    flows, address_of = _flows(run)
    before = [dict(s.config) for f in flows for s in f.specs]
    assert share_udp_sockets(run, flows, address_of) == 0
    assert [s.config for f in flows for s in f.specs] == before


def test_zenoh_flows_of_a_host_listen_on_one_port_and_name_their_sender() -> None:
    """Host mode, zenoh peer mode: every receiver on a host at ZENOH_HOST_PORT (the host agent's one session), told
    its sender's address (the agent opens one link per pair of hosts from it); senders connect there."""
    from roughnet.run.hostagent import ZENOH_HOST_PORT, share_zenoh_sessions

    run = sweep(protocol="zenoh").runs[0]
    flows, address_of = _flows(run)
    assert share_zenoh_sessions(flows, address_of) == 3
    for f in flows:
        *receivers, sender = f.specs
        assert sender.config["peers"] == [f"198.18.0.{r.host[1:]}:{ZENOH_HOST_PORT}" for r in receivers]
        for r in receivers:
            assert r.config["listen"] == f"198.18.0.{r.host[1:]}:{ZENOH_HOST_PORT}"
            assert r.config["source"] == f"198.18.0.{f.sender[1:]}"
        assert "source" not in sender.config


@pytest.mark.parametrize("extra", ['[workload.zenoh]\nmode = "client"\n',
                                   '[workload.zenoh]\nmulticast_scouting = true\n'])
def test_zenoh_sessions_are_left_alone_in_client_mode_and_with_scouting(extra: str) -> None:
    from roughnet.run.hostagent import share_zenoh_sessions

    run = sweep(protocol="zenoh", extra=extra + ('[[service]]\nkind = "zenoh-router"\nhost = "c1"\n'
                                                 if "client" in extra else "")).runs[0]
    flows, address_of = _flows(run)
    before = [dict(s.config) for f in flows for s in f.specs]
    assert share_zenoh_sessions(flows, address_of) == 0
    assert [s.config for f in flows for s in f.specs] == before


TWO = """\
[scenario]
name = "two"
{agents}
[[host]]
name = "c1"
[[host]]
name = "c2"
[[host]]
name = "c3"
[[host]]
name = "b"
[[link]]
between = ["*"]
[[workload]]
name = "cam"
pattern = "stream"
protocol = "{protocol}"
from = "c*"
to = ["c1", "c2", "c3"]
payload = "300 B"
rate = "10 msg/s"
duration = "1 s"
{first}
[[workload]]
name = "status"
pattern = "stream"
protocol = "{protocol}"
from = "c1"
to = "{to}"
payload = "100 B"
rate = "1 msg/s"
duration = "1 s"
{second}
{service}
"""


def two(protocol: str, first: str = "", second: str = "", agents: str = "", to: str = "c2"):
    kind = {"mqtt": "mosquitto", "nats": "nats"}.get(protocol)
    service = f'[[service]]\nkind = "{kind}"\nhost = "b"\n' if kind else ""
    text = TWO.format(agents=agents, protocol=protocol, first=first, second=second, service=service, to=to)
    return sweep_from_scenario(loads(text, "two.toml"), "two.toml")


@pytest.mark.parametrize("protocol,first,second,key,shown", [
    ("mqtt", "", '[workload.mqtt]\nkeep_alive = "10 s"\n', "mqtt.keep_alive", "(30 s)"),
    ("mqtt", "[workload.mqtt]\ninflight = 5\n", "", "mqtt.inflight", "(5)"),
    ("dds", "", '[workload.dds]\nbatch = "8192 B"\n', "dds.batch", "(0)"),
    ("zenoh", '[workload.zenoh]\ntransport = "udp"\n', "", "zenoh.transport", "(udp)"),
    ("nats", "", "[workload.nats]\nreconnect = true\n", "nats.reconnect", "(false)"),
])
def test_workloads_sharing_a_hosts_session_with_different_knobs_are_refused_at_plan_time(
        protocol, first, second, key, shown) -> None:
    """One agent per host shares one session, participant or client among a host's workloads: knobs that
    configure it must agree, else the plan refuses the run naming the later workload's key, the earlier
    workload and the host (hostplan.conflicts); the agent would refuse it too, but only once the network exists."""
    with pytest.raises(SpecError) as e:
        two(protocol, first, second)
    msg = str(e.value)
    assert f"workload[1].{key}: differs from workload 'cam' {shown} on host 'c1'" in msg, msg
    assert 'agents = "flow"' in msg and "run 1 of 1" in msg, msg
    # a process per flow shares nothing; the same knobs in both workloads agree
    assert agents_mode(two(protocol, first, second, agents='agents = "flow"').runs[0]) == "flow"
    table = (first or second).split("\n")[0]
    both = (first or second).split("\n", 1)[1]
    assert agents_mode(two(protocol, table + "\n" + both, table + "\n" + both).runs[0]) == "host"


def test_flows_that_keep_their_own_client_or_participant_may_differ() -> None:
    # MQTT 5 and reconnect: a client of their own (drivers::mqtt::host::shares)
    for own in ('version = "5"', "reconnect = true"):
        run = two("mqtt", "", f'[workload.mqtt]\nkeep_alive = "10 s"\n{own}\n').runs[0]
        assert agents_mode(run) == "host"
    # DDS in another domain: another participant
    assert agents_mode(two("dds", "", '[workload.dds]\nbatch = "8192 B"\ndomain_id = 3\n').runs[0]) == "host"


def test_a_host_agents_stream_receivers_timeout_also_covers_the_fleets_readiness() -> None:
    """A host agent's receivers start at once and wait for every other host's to be ready before t0: their own
    timeout gets the readiness allowance on top (the run's budget, from t0, still ends them); the senders' and
    the flow mode's receivers' stay the workload's."""
    from roughnet.run.timeline import ready_allowance_s

    for agents, extra_ms in (('agents = "host"', int(ready_allowance_s(sweep().runs[0]) * 1000)),
                             ('agents = "flow"', 0)):
        run = sweep(agents).runs[0]
        timeout_ms = run.workload.timeout_ns // 1_000_000
        flows, _ = _flows(run)
        for f in flows:
            *receivers, sender = f.specs
            assert sender.config["timeout_ms"] == timeout_ms
            assert {r.config["timeout_ms"] for r in receivers} == {timeout_ms + extra_ms}, agents
    assert ready_allowance_s(sweep().runs[0]) >= 10.0
