"""Interop: roughnet-agent's dds driver (Cyclone DDS in C) against the `cyclonedds`
Python binding (its own bundled Cyclone DDS), on loopback.

Both sides declare the same IDL type, ``struct Bytes { sequence<octet> data; }``
named ``roughnet::Bytes``, and use unicast discovery on 127.0.0.1 (the agent's
default, multicast off).  A Python DataReader receives the agent's publications
(every sequence number, the end marker); the agent's receiver counts what a Python
DataWriter publishes.  Skips with a reason when cyclonedds or an agent speaking dds
is missing.
"""

# No `from __future__ import annotations`: cyclonedds reads the IDL type from live annotations.

import json
import os
import struct
import subprocess
import time
from dataclasses import dataclass

import pytest

from roughnet.binaries import agent_version, find_binary

pytest.importorskip("cyclonedds", reason="cyclonedds is not installed (pip install cyclonedds)")

from cyclonedds.core import Policy, Qos  # noqa: E402
from cyclonedds.domain import Domain, DomainParticipant  # noqa: E402
from cyclonedds.idl import IdlStruct  # noqa: E402
from cyclonedds.idl.types import sequence, uint8  # noqa: E402
from cyclonedds.pub import DataWriter  # noqa: E402
from cyclonedds.sub import DataReader  # noqa: E402
from cyclonedds.topic import Topic  # noqa: E402
from cyclonedds.util import duration  # noqa: E402

AGENT = find_binary("roughnet-agent")
pytestmark = [
    pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)"),
    pytest.mark.skipif(
        AGENT is not None and "dds" not in agent_version(str(AGENT)).get("protocols", []),
        reason="this roughnet-agent build does not speak dds",
    ),
]

MAGIC = 0x314D4E52
HEADER = struct.Struct("<IHHQQQ")
FLAG_END = 2
N = 300
DOMAIN = 17  # not the default 0, so other loopback DDS traffic stays apart

XML = (
    '<CycloneDDS><Domain Id="any"><General><Interfaces><NetworkInterface address="127.0.0.1"/></Interfaces>'
    "<AllowMulticast>false</AllowMulticast></General><Discovery><ParticipantIndex>auto</ParticipantIndex>"
    '<MaxAutoParticipantIndex>64</MaxAutoParticipantIndex><Peers><Peer address="127.0.0.1"/></Peers>'
    "</Discovery></Domain></CycloneDDS>"
)


@dataclass
class Bytes(IdlStruct, typename="roughnet::Bytes"):
    data: sequence[uint8]


def message(seq: int, flags: int = 0, size: int = 100) -> bytes:
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return HEADER.pack(MAGIC, flags, 32, seq, now, now) + b"\xab" * (size - 32)


def decode(payload: bytes) -> tuple[int, int]:
    magic, flags, hlen, seq, _i, _a = HEADER.unpack_from(payload)
    assert magic == MAGIC and hlen == 32, payload[:32]
    return flags, seq


def agent(cfg: dict) -> subprocess.Popen:
    base = {"v": 1, "protocol": "dds", "payload_bytes": 100, "report_interval_ms": 0, "timeout_ms": 30000,
            "options": {"domain_id": DOMAIN}}
    return subprocess.Popen([str(AGENT), "run", "--config-json", json.dumps(base | cfg)],
                            stdout=subprocess.PIPE, text=True)


def result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate(timeout=60)
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert p.returncode == 0, lines
    return next(x for x in lines if x["type"] == "result")


@pytest.fixture(scope="module")
def participant():
    dom = Domain(DOMAIN, XML)
    dp = DomainParticipant(DOMAIN)
    yield dp
    del dp, dom


def qos() -> Qos:
    return Qos(Policy.Reliability.Reliable(duration(seconds=1)), Policy.History.KeepAll)


def test_python_reader_receives_the_agent_publications(participant) -> None:
    topic = f"roughnet/interop{os.getpid()}a"
    rd = DataReader(participant, Topic(participant, f"{topic}/data", Bytes), qos=qos())
    tx = agent({"role": "sender", "pattern": "stream", "peers": ["127.0.0.1:7400"], "messages": N, "topic": topic})
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < N + 1 and time.monotonic() < deadline:
        for s in rd.take(N=64):
            if isinstance(s, Bytes):
                got.append(bytes(s.data))
        time.sleep(0.005)
    res = result(tx)
    assert res["sent"] == N
    decoded = [decode(p) for p in got]
    assert [s for f, s in decoded if not f & FLAG_END] == list(range(N))
    assert [s for f, s in decoded if f & FLAG_END] == [N]


def test_agent_receiver_receives_python_publications(participant) -> None:
    topic = f"roughnet/interop{os.getpid()}b"
    rx = agent({"role": "receiver", "pattern": "stream", "listen": "127.0.0.1:7400", "messages": N, "topic": topic})
    assert json.loads(rx.stdout.readline())["type"] == "ready"
    dw = DataWriter(participant, Topic(participant, f"{topic}/data", Bytes), qos=qos())
    deadline = time.monotonic() + 20
    while not dw.get_matched_subscriptions() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dw.get_matched_subscriptions(), "the agent's reader never matched"
    time.sleep(0.5)  # the reader's side of the match (a plain DDS peer has no roughnet handshake)
    for i in range(N):
        dw.write(Bytes(data=message(i)))
    dw.write(Bytes(data=message(N, FLAG_END, 32)))
    res = result(rx)
    assert res["received"] == N, res
    assert res["complete"] is True
    assert res["bad_messages"] == 0
