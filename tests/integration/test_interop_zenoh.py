"""Interop: roughnet-agent's zenoh driver against eclipse-zenoh (Python), on loopback.

An eclipse-zenoh subscriber receives the agent's publications (every sequence
number, valid headers, then the end marker), and the agent's receiver receives
what an eclipse-zenoh publisher sends (the headers built here, in Python).  Peer
mode over TCP with multicast scouting off, as the agent runs by default.  Skips
with a reason when eclipse-zenoh or an agent speaking zenoh is missing.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import time

import pytest

from roughnet.binaries import agent_version, find_binary

zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install eclipse-zenoh)")

AGENT = find_binary("roughnet-agent")
pytestmark = [
    pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)"),
    pytest.mark.skipif(
        AGENT is not None and "zenoh" not in agent_version(str(AGENT)).get("protocols", []),
        reason="this roughnet-agent build does not speak zenoh",
    ),
]

MAGIC = 0x314D4E52
HEADER = struct.Struct("<IHHQQQ")
FLAG_END = 2
N = 200


def message(seq: int, flags: int = 0, size: int = 100) -> bytes:
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return HEADER.pack(MAGIC, flags, 32, seq, now, now) + b"\xab" * (size - 32)


def decode(payload: bytes) -> tuple[int, int]:
    magic, flags, hlen, seq, _i, _a = HEADER.unpack_from(payload)
    assert magic == MAGIC and hlen == 32, payload[:32]
    return flags, seq


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session(listen: list[str], connect: list[str]) -> zenoh.Session:
    conf = zenoh.Config()
    conf.insert_json5("mode", '"peer"')
    conf.insert_json5("listen/endpoints", json.dumps(listen))
    conf.insert_json5("connect/endpoints", json.dumps(connect))
    conf.insert_json5("scouting/multicast/enabled", "false")
    return zenoh.open(conf)


def agent(cfg: dict) -> subprocess.Popen:
    return subprocess.Popen([str(AGENT), "run", "--config-json", json.dumps(cfg)], stdout=subprocess.PIPE, text=True)


def result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate(timeout=60)
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert p.returncode == 0, lines
    return next(x for x in lines if x["type"] == "result")


def test_python_subscriber_receives_the_agent_publications() -> None:
    port = free_port()
    topic = f"roughnet/interop{port}"
    got: list[bytes] = []
    with session([f"tcp/127.0.0.1:{port}"], []) as s:
        sub = s.declare_subscriber(f"{topic}/data", lambda sample: got.append(sample.payload.to_bytes()))
        # The agent waits for each receiver's liveliness token (declared after its subscriber).
        token = s.liveliness().declare_token(f"{topic}/rx/127.0.0.1_{port}")
        tx = agent({"v": 1, "role": "sender", "protocol": "zenoh", "pattern": "stream",
                    "peers": [f"127.0.0.1:{port}"], "payload_bytes": 100, "messages": N,
                    "report_interval_ms": 0, "timeout_ms": 20000, "topic": topic})
        res = result(tx)
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
    rx = agent({"v": 1, "role": "receiver", "protocol": "zenoh", "pattern": "stream",
                "listen": f"127.0.0.1:{port}", "payload_bytes": 100, "messages": N,
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
            pub.put(message(i))
        pub.put(message(N, FLAG_END, 32))
        res = result(rx)
        pub.undeclare()
    assert res["received"] == N, res
    assert res["complete"] is True
    assert res["bad_messages"] == 0
    assert res["latency_actual"]["count"] == N
