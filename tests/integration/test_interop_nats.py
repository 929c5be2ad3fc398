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
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from roughnet.binaries import find_binary

nats = pytest.importorskip("nats", reason="nats-py is not installed (pip install nats-py)")

AGENT = find_binary("roughnet-agent")
SERVER = shutil.which("nats-server") or ("/usr/sbin/nats-server" if Path("/usr/sbin/nats-server").exists() else None)
pytestmark = [
    pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)"),
    pytest.mark.skipif(SERVER is None, reason="nats-server is not installed (apt-get install nats-server)"),
]

MAGIC = 0x314D4E52
HEADER = struct.Struct("<IHHQQQ")
FLAG_END, FLAG_REPLY = 2, 4


def header(seq: int, flags: int = 0, size: int = 64) -> bytes:
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return HEADER.pack(MAGIC, flags, 32, seq, now, now) + b"\0" * (size - 32)


def decode(payload: bytes) -> tuple[int, int]:
    magic, flags, hlen, seq, _i, _a = HEADER.unpack_from(payload)
    assert magic == MAGIC and hlen == 32, payload[:32]
    return flags, seq


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("nats")
    port = free_port()
    with open(d / "log", "wb") as log:
        p = subprocess.Popen([SERVER, "-a", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert p.poll() is None, (d / "log").read_text()
                assert time.monotonic() < deadline, "nats-server did not listen"
                time.sleep(0.02)
        yield f"127.0.0.1:{port}"
    finally:
        p.terminate()
        p.wait(timeout=10)


def agent_config(role: str, server: str, topic: str, pattern: str = "stream", **extra: object) -> str:
    cfg = {"v": 1, "role": role, "protocol": "nats", "pattern": pattern, "broker": server, "topic": topic,
           "payload_bytes": 64, "messages": 100, "timeout_ms": 20000, "report_interval_ms": 0}
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
            await nc.publish("rn.interop.b", header(seq))
        await nc.publish("rn.interop.b", header(100, FLAG_END, 32))
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
            m = await nc.request("rn.interop.c.ping", header(seq), timeout=5)
            replies.append(m.data)
        await nc.publish("rn.interop.c.ping", header(20, FLAG_END, 32))
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
