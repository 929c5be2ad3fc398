"""Interop: roughnet-agent's zmq driver against pyzmq, on loopback.

A pyzmq SUB receives the agent's PUB stream (every sequence number, valid
headers, the end marker); the agent's SUB receives a pyzmq XPUB's stream (which,
like the agent, waits for the subscription before sending: ZeroMQ's answer to
slow joiners); a pyzmq REQ gets its requests echoed by the agent's ponger (ROUTER)
with the reply flag set.  Skips with a reason when pyzmq or an agent speaking
zmq is missing.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import time

import pytest

from roughnet.binaries import agent_version, find_binary

zmq = pytest.importorskip("zmq", reason="pyzmq is not installed (pip install pyzmq)")

AGENT = find_binary("roughnet-agent")
pytestmark = [
    pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)"),
    pytest.mark.skipif(
        AGENT is not None and "zmq" not in agent_version(str(AGENT)).get("protocols", []),
        reason="this roughnet-agent build does not speak zmq",
    ),
]

MAGIC = 0x314D4E52
HEADER = struct.Struct("<IHHQQQ")
FLAG_END, FLAG_REPLY = 2, 4
N = 500


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


def agent(cfg: dict) -> subprocess.Popen:
    base = {"v": 1, "protocol": "zmq", "payload_bytes": 100, "report_interval_ms": 0, "timeout_ms": 20000}
    return subprocess.Popen([str(AGENT), "run", "--config-json", json.dumps(base | cfg)],
                            stdout=subprocess.PIPE, text=True)


def result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate(timeout=60)
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert p.returncode == 0, lines
    return next(x for x in lines if x["type"] == "result")


class Ctx:
    """A context whose sockets are all closed at the end of the test."""

    def __init__(self) -> None:
        self.c = zmq.Context()
        self.socks: list = []

    def socket(self, kind: int):
        s = self.c.socket(kind)
        self.socks.append(s)
        return s

    def close(self) -> None:
        for s in self.socks:
            s.close(linger=0)
        self.c.term()


@pytest.fixture
def ctx():
    c = Ctx()
    yield c
    c.close()


def test_pyzmq_sub_receives_the_agent_stream(ctx) -> None:
    port = free_port()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.bind(f"tcp://127.0.0.1:{port}")
    tx = agent({"role": "sender", "pattern": "stream", "peers": [f"127.0.0.1:{port}"], "messages": N})
    got = []
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    while len(got) < N + 1 and poller.poll(5000):
        got.append(sub.recv())
    res = result(tx)
    assert res["sent"] == N
    decoded = [decode(p) for p in got]
    assert [s for f, s in decoded if not f & FLAG_END] == list(range(N))
    assert [s for f, s in decoded if f & FLAG_END] == [N]


def test_agent_sub_receives_a_pyzmq_stream(ctx) -> None:
    port = free_port()
    rx = agent({"role": "receiver", "pattern": "stream", "listen": f"127.0.0.1:{port}", "messages": N})
    assert json.loads(rx.stdout.readline())["type"] == "ready"
    pub = ctx.socket(zmq.XPUB)
    pub.connect(f"tcp://127.0.0.1:{port}")
    assert pub.poll(10000), "no subscription from the agent's SUB"
    assert pub.recv()[:1] == b"\x01"
    for i in range(N):
        pub.send(message(i))
    pub.send(message(N, FLAG_END, 32))
    res = result(rx)
    assert res["received"] == N, res
    assert res["complete"] is True
    assert res["bad_messages"] == 0


def test_pyzmq_req_is_answered_by_the_agent_ponger(ctx) -> None:
    port = free_port()
    po = agent({"role": "ponger", "pattern": "ping", "listen": f"127.0.0.1:{port}", "messages": 10})
    assert json.loads(po.stdout.readline())["type"] == "ready"
    req = ctx.socket(zmq.REQ)
    req.connect(f"tcp://127.0.0.1:{port}")
    for i in range(10):
        req.send(message(i))
        assert req.poll(5000), f"no reply to request {i}"
        flags, seq = decode(req.recv())
        assert seq == i and flags & FLAG_REPLY
    req.send(message(10, FLAG_END, 32))
    res = result(po)
    assert res["received"] == 10, res
    assert res["end_reason"] == "end_marker"
