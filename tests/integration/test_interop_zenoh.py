"""Interop: roughnet-agent's zenoh driver against eclipse-zenoh (Python), on loopback.

An eclipse-zenoh subscriber receives the agent's publications (every sequence
number, valid headers, then the end marker), and the agent's receiver receives
what an eclipse-zenoh publisher sends (the headers built here, in Python).  Peer
mode over TCP with multicast scouting off, as the agent runs by default.  Skips
with a reason when eclipse-zenoh or an agent speaking zenoh is missing.
"""

from __future__ import annotations

import json
import time

import pytest

from interop import FLAG_END, HEADER_LEN, agent_marks, agent_result, decode, free_port, message, start_agent

zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install eclipse-zenoh)")

pytestmark = agent_marks("zenoh")

N = 200
PAYLOAD_BYTES = 100


def session(listen: list[str], connect: list[str]) -> zenoh.Session:
    conf = zenoh.Config()
    conf.insert_json5("mode", '"peer"')
    conf.insert_json5("listen/endpoints", json.dumps(listen))
    conf.insert_json5("connect/endpoints", json.dumps(connect))
    conf.insert_json5("scouting/multicast/enabled", "false")
    return zenoh.open(conf)


def test_python_subscriber_receives_the_agent_publications() -> None:
    port = free_port()
    topic = f"roughnet/interop{port}"
    got: list[bytes] = []
    with session([f"tcp/127.0.0.1:{port}"], []) as s:
        sub = s.declare_subscriber(f"{topic}/data", lambda sample: got.append(sample.payload.to_bytes()))
        # The agent waits for each receiver's liveliness token (declared after its subscriber).
        token = s.liveliness().declare_token(f"{topic}/rx/127.0.0.1_{port}")
        tx = start_agent({"v": 1, "role": "sender", "protocol": "zenoh", "pattern": "stream",
                          "peers": [f"127.0.0.1:{port}"], "payload_bytes": PAYLOAD_BYTES, "messages": N,
                          "report_interval_ms": 0, "timeout_ms": 20000, "topic": topic})
        res = agent_result(tx)
        deadline = time.monotonic() + 5
        while len(got) < N + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        token.undeclare()
        sub.undeclare()
    assert res["sent"] == N
    decoded = [decode(p) for p in got]
    data = [seq for flags, seq in decoded if not flags & FLAG_END]
    assert data == list(range(N))
    assert all(len(p) == 100 for p, (flags, _s) in zip(got, decoded) if not flags & FLAG_END)
    ends = [seq for flags, seq in decoded if flags & FLAG_END]
    assert ends == [N]


def test_agent_receiver_receives_python_publications() -> None:
    port = free_port()
    topic = f"roughnet/interop{port}"
    rx = start_agent({"v": 1, "role": "receiver", "protocol": "zenoh", "pattern": "stream",
                      "listen": f"127.0.0.1:{port}", "payload_bytes": PAYLOAD_BYTES, "messages": N,
                      "report_interval_ms": 0, "timeout_ms": 20000, "topic": topic})
    ready = json.loads(rx.stdout.readline())
    assert ready["type"] == "ready", ready
    with session([], [f"tcp/127.0.0.1:{port}"]) as s:
        pub = s.declare_publisher(f"{topic}/data", congestion_control=zenoh.CongestionControl.BLOCK)
        deadline = time.monotonic() + 10
        while not pub.matching_status.matching and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pub.matching_status.matching, "the agent's subscriber never matched"
        for i in range(N):
            pub.put(message(i, size=PAYLOAD_BYTES))
        pub.put(message(N, FLAG_END, HEADER_LEN))
        res = agent_result(rx)
        pub.undeclare()
    assert res["received"] == N, res
    assert res["complete"] is True
    assert res["bad_messages"] == 0
    assert res["latency_actual"]["count"] == N
