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
import subprocess

import pytest

from interop import FLAG_END, FLAG_REPLY, HEADER_LEN, agent_marks, agent_result, decode, free_port, message, start_agent

zmq = pytest.importorskip("zmq", reason="pyzmq is not installed (pip install pyzmq)")

pytestmark = agent_marks("zmq")

N = 500
PAYLOAD_BYTES = 100


def agent(cfg: dict) -> subprocess.Popen:
    base = {"v": 1, "protocol": "zmq", "payload_bytes": PAYLOAD_BYTES, "report_interval_ms": 0, "timeout_ms": 20000}
    return start_agent(base | cfg)


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
    res = agent_result(tx)
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
        pub.send(message(i, size=PAYLOAD_BYTES))
    pub.send(message(N, FLAG_END, HEADER_LEN))
    res = agent_result(rx)
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
        req.send(message(i, size=PAYLOAD_BYTES))
        assert req.poll(5000), f"no reply to request {i}"
        flags, seq = decode(req.recv())
        assert seq == i and flags & FLAG_REPLY
    req.send(message(10, FLAG_END, HEADER_LEN))
    res = agent_result(po)
    assert res["received"] == 10, res
    assert res["end_reason"] == "end_marker"
