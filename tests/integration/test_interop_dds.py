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
import subprocess
import time
from dataclasses import dataclass

import pytest

from interop import FLAG_END, HEADER_LEN, agent_marks, agent_result, decode, message, start_agent

pytest.importorskip("cyclonedds", reason="cyclonedds is not installed (pip install cyclonedds)")

from cyclonedds.core import Policy, Qos  # noqa: E402
from cyclonedds.domain import Domain, DomainParticipant  # noqa: E402
from cyclonedds.idl import IdlStruct  # noqa: E402
from cyclonedds.idl.types import sequence, uint8  # noqa: E402
from cyclonedds.pub import DataWriter  # noqa: E402
from cyclonedds.sub import DataReader  # noqa: E402
from cyclonedds.topic import Topic  # noqa: E402
from cyclonedds.util import duration  # noqa: E402

pytestmark = agent_marks("dds")

N = 300
PAYLOAD_BYTES = 100
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


def agent(cfg: dict) -> subprocess.Popen:
    base = {"v": 1, "protocol": "dds", "payload_bytes": PAYLOAD_BYTES, "report_interval_ms": 0, "timeout_ms": 30000,
            "options": {"domain_id": DOMAIN}}
    return start_agent(base | cfg)


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
    res = agent_result(tx)
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
        dw.write(Bytes(data=message(i, size=PAYLOAD_BYTES)))
    dw.write(Bytes(data=message(N, FLAG_END, HEADER_LEN)))
    res = agent_result(rx)
    assert res["received"] == N, res
    assert res["complete"] is True
    assert res["bad_messages"] == 0
