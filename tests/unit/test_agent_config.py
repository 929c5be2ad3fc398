"""The runner's translation of a workload into agent configurations (docs/agent-protocol.md)."""

from roughnet.run.agents import AGENT_PORT, agent_specs
from roughnet.runspec import Host, Link, Run, Workload


def _run(pattern, receivers=("b",), **kw):
    w = Workload(pattern=pattern, protocol="udp", sender="a", receivers=receivers, payload_bytes=256,
                 messages=100, timeout_ns=5_000_000_000, options={"recv_buffer": 1 << 20}, **kw)
    hosts = tuple(Host(n) for n in ("a", "b", "c"))
    return Run(scenario="t", sweep_id="t-00000000", run_id="0123456789ab", index=0, params={}, seed=3,
               repeat=0, hosts=hosts, links=(Link(0, ("a", "b", "c")),), workload=w)


def addr(host, seen_from):
    return {"a": "198.18.0.1", "b": "198.18.0.2", "c": "198.18.0.3"}[host]


def test_stream_fanout_receivers_first_then_sender_with_every_peer():
    specs = agent_specs(_run("stream", ("b", "c"), rate_msgs_per_s=100.0), addr)
    assert [s.role for s in specs] == ["receiver", "receiver", "sender"]
    assert specs[0].config["listen"] == f"198.18.0.2:{AGENT_PORT}"
    assert specs[-1].config["peers"] == [f"198.18.0.2:{AGENT_PORT}", f"198.18.0.3:{AGENT_PORT}"]
    assert specs[-1].host == "a"
    for s in specs:
        assert s.config["v"] == 1 and s.config["timeout_ms"] == 5000 and s.config["seed"] == 3
        assert s.config["options"] == {"recv_buffer": 1 << 20}


def test_ping_and_ramp_use_pinger_and_ponger():
    for pattern in ("ping", "ramp"):
        specs = agent_specs(_run(pattern, interval_ns=10_000_000, step_bytes=1024), addr)
        assert [s.role for s in specs] == ["ponger", "pinger"]
        assert specs[1].config["interval_ns"] == 10_000_000


def test_brokered_run_passes_broker_as_seen_from_each_host_and_topic():
    run = _run("stream", ("b",))
    seen = {"a": "198.18.1.3:1883", "b": "198.18.2.3:1883"}
    specs = agent_specs(run, addr, broker_of=lambda host: seen[host], extra_options={"tls_ca": "/x/ca.pem"})
    assert {s.host: s.config["broker"] for s in specs} == seen
    assert all(s.config["topic"] == "roughnet/0123456789ab" for s in specs)
    assert all(s.config["options"]["tls_ca"] == "/x/ca.pem" for s in specs)
    assert run.workload.options == {"recv_buffer": 1 << 20}  # the run itself is not changed
