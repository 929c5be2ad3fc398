"""Interop: roughnet-agent's NATS driver against nats-py.

A nats-server started here on 127.0.0.1 (a free port, ended by PID) carries the
traffic.  nats-py sees the agent's publications, the agent's receiver counts what
nats-py publishes, and request/reply works both ways (nats-py requests answered by
the agent's ponger; the agent's pinger answered by a nats-py responder).  Skips
with a reason when nats-server, nats-py or the agent binary is missing.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Iterator

import pytest

from interop import (AGENT, FLAG_END, FLAG_REPLY, HEADER_LEN, agent_marks, decode, find_program, free_port,
                     loopback_server, message)

nats = pytest.importorskip("nats", reason="nats-py is not installed (pip install nats-py)")

SERVER = find_program("nats-server")
pytestmark = [
    *agent_marks(),
    pytest.mark.skipif(SERVER is None, reason="nats-server is not installed (apt-get install nats-server)"),
]

PAYLOAD_BYTES = 64


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("nats")
    port = free_port()
    with loopback_server([SERVER, "-a", "127.0.0.1", "-p", str(port)], port, d / "log", "nats-server") as address:
        yield address


def agent_config(role: str, server: str, topic: str, pattern: str = "stream", **extra: object) -> str:
    cfg = {"v": 1, "role": role, "protocol": "nats", "pattern": pattern, "broker": server, "topic": topic,
           "payload_bytes": PAYLOAD_BYTES, "messages": 100, "timeout_ms": 20000, "report_interval_ms": 0}
    cfg.update(extra)
    return json.dumps(cfg)


async def agent(cfg: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(str(AGENT), "run", "--config-json", cfg,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def result_of(p: asyncio.subprocess.Process) -> dict:
    out, err = await asyncio.wait_for(p.communicate(), 60)
    assert p.returncode == 0, err.decode()
    return next(json.loads(l) for l in out.decode().splitlines() if json.loads(l)["type"] == "result")


async def wait_ready(p: asyncio.subprocess.Process) -> None:
    assert p.stdout is not None
    line = json.loads(await asyncio.wait_for(p.stdout.readline(), 30))
    assert line["type"] == "ready", line


def test_nats_py_receives_the_agents_publications(server: str) -> None:
    async def main() -> tuple[list[bytes], dict]:
        nc = await nats.connect(f"nats://{server}")
        got: list[bytes] = []
        done = asyncio.Event()

        async def cb(m: object) -> None:
            got.append(m.data)  # type: ignore[attr-defined]
            if decode(m.data)[0] & FLAG_END:  # type: ignore[attr-defined]
                done.set()

        await nc.subscribe("rn.interop.a", cb=cb)
        await nc.flush()
        res = await result_of(await agent(agent_config("sender", server, "rn.interop.a")))
        await asyncio.wait_for(done.wait(), 10)
        await nc.close()
        return got, res

    got, res = asyncio.run(main())
    assert res["sent"] == 100
    seqs = [decode(p)[1] for p in got if not decode(p)[0] & FLAG_END]
    assert seqs == list(range(100))  # core NATS keeps one publisher's order
    assert all(len(p) == 64 for p in got[:100])


def test_the_agent_receives_nats_pys_publications(server: str) -> None:
    async def main() -> dict:
        rx = await agent(agent_config("receiver", server, "rn.interop.b"))
        await wait_ready(rx)
        nc = await nats.connect(f"nats://{server}")
        for seq in range(100):
            await nc.publish("rn.interop.b", message(seq, size=PAYLOAD_BYTES, fill=b"\0"))
        await nc.publish("rn.interop.b", message(100, FLAG_END, HEADER_LEN))
        await nc.flush()
        res = await result_of(rx)
        await nc.close()
        return res

    res = asyncio.run(main())
    assert (res["received"], res["lost"], res["duplicates"], res["complete"]) == (100, 0, 0, True), res


def test_nats_py_requests_are_answered_by_the_agents_ponger(server: str) -> None:
    async def main() -> tuple[list[bytes], dict]:
        po = await agent(agent_config("ponger", server, "rn.interop.c", pattern="ping", messages=20))
        await wait_ready(po)
        nc = await nats.connect(f"nats://{server}")
        replies = []
        for seq in range(20):
            m = await nc.request("rn.interop.c.ping", message(seq, size=PAYLOAD_BYTES, fill=b"\0"), timeout=5)
            replies.append(m.data)
        await nc.publish("rn.interop.c.ping", message(20, FLAG_END, HEADER_LEN))
        await nc.flush()
        res = await result_of(po)
        await nc.close()
        return replies, res

    replies, res = asyncio.run(main())
    assert [decode(r)[1] for r in replies] == list(range(20))
    assert all(decode(r)[0] & FLAG_REPLY for r in replies)
    assert res["received"] == 20


def test_the_agents_requests_are_answered_by_nats_py(server: str) -> None:
    async def main() -> tuple[int, dict]:
        nc = await nats.connect(f"nats://{server}")
        answered = 0

        async def respond(m: object) -> None:
            nonlocal answered
            flags, _seq = decode(m.data)  # type: ignore[attr-defined]
            if not flags & FLAG_END:
                # A pong is the request with the reply flag set.
                data = bytearray(m.data)  # type: ignore[attr-defined]
                struct.pack_into("<H", data, 4, flags | FLAG_REPLY)
                await m.respond(bytes(data))  # type: ignore[attr-defined]
                answered += 1

        await nc.subscribe("rn.interop.d.ping", cb=respond)
        await nc.flush()
        res = await result_of(await agent(agent_config("pinger", server, "rn.interop.d", pattern="ping", messages=30)))
        await nc.close()
        return answered, res

    answered, res = asyncio.run(main())
    assert answered == 30
    assert (res["sent"], res["received"], res["lost"]) == (30, 30, 0), res
    assert res["rtt_actual"]["count"] == 30
