"""The independent side of the interop tests (tests/integration/test_interop_*.py), shared by all six.

Owns: the roughnet message header written out again from docs/agent-protocol.md ("Message
layout"), building and decoding messages with it, a free loopback port, finding a server
program and running it on loopback for a module, and starting roughnet-agent with a JSON config and reading its
result line.  The header is deliberately NOT imported from python/roughnet: a header that
roughnet gets wrong must show up here as a failed interop test.

Does not own: the brokers' configurations, the client libraries, each protocol's agent
config (protocol, timeouts, payload size): those stay in the test files, where they differ.
Imported as ``from interop import ...`` (tests/integration is on sys.path, as for conftest).
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from roughnet.binaries import agent_version, find_binary

MAGIC = 0x314D4E52  # "RNM1"
HEADER = struct.Struct("<IHHQQQ")  # magic, flags, header length, seq, intended ns, actual ns
HEADER_LEN = 32
FLAG_END = 2
FLAG_REPLY = 4

AGENT = find_binary("roughnet-agent")


def agent_marks(protocol: str | None = None) -> list[pytest.MarkDecorator]:
    """``pytestmark`` for an interop module: skip (with the reason) without a built roughnet-agent,
    and, given ``protocol``, when the agent build does not speak it."""
    marks = [pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)")]
    if protocol is not None:
        marks.append(pytest.mark.skipif(
            AGENT is not None and protocol not in agent_version(str(AGENT)).get("protocols", []),
            reason=f"this roughnet-agent build does not speak {protocol}",
        ))
    return marks


def find_program(name: str) -> str | None:
    """The path of the program ``name``: on PATH, else in /usr/sbin (where Debian puts servers); None if neither."""
    return shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)


def message(seq: int, flags: int = 0, size: int = 100, fill: bytes = b"\xab") -> bytes:
    """A roughnet message of ``size`` bytes: the header (both send times now) and ``fill`` after it."""
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return HEADER.pack(MAGIC, flags, HEADER_LEN, seq, now, now) + fill * (size - HEADER_LEN)


def decode(payload: bytes) -> tuple[int, int]:
    """``(flags, seq)`` of a roughnet message; asserts the magic and the header length."""
    magic, flags, hlen, seq, _i, _a = HEADER.unpack_from(payload)
    assert magic == MAGIC and hlen == HEADER_LEN, payload[:HEADER_LEN]
    return flags, seq


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def loopback_server(argv: list[str], port: int, log: Path, name: str, timeout_s: float = 30) -> Iterator[str]:
    """Run ``argv`` (a server that listens on 127.0.0.1:``port``, its output to ``log``); yield
    ``"127.0.0.1:port"`` once it accepts a connection; end it by PID afterwards."""
    with open(log, "wb") as out:
        p = subprocess.Popen(argv, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert p.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"{name} did not listen"
                time.sleep(0.02)
        yield f"127.0.0.1:{port}"
    finally:
        p.terminate()
        p.wait(timeout=10)


def _json(cfg: dict | str) -> str:
    return cfg if isinstance(cfg, str) else json.dumps(cfg)


def start_agent(cfg: dict | str) -> subprocess.Popen:
    """roughnet-agent running ``cfg``, its stdout piped as text (stderr left alone)."""
    return subprocess.Popen([str(AGENT), "run", "--config-json", _json(cfg)], stdout=subprocess.PIPE, text=True)


def agent_result(p: subprocess.Popen, timeout_s: float = 60) -> dict:
    """The result line of an agent from start_agent(), once it has ended with exit code 0."""
    out, _ = p.communicate(timeout=timeout_s)
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert p.returncode == 0, lines
    return next(x for x in lines if x["type"] == "result")


def run_agent(cfg: dict | str, timeout_s: float = 60) -> dict:
    """Run roughnet-agent with ``cfg`` to its end (exit code 0) and return its result line."""
    out = subprocess.run([str(AGENT), "run", "--config-json", _json(cfg)], capture_output=True, text=True,
                         timeout=timeout_s, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return next(json.loads(l) for l in out.stdout.splitlines() if json.loads(l)["type"] == "result")


@contextmanager
def ready_agent(cfg: dict | str) -> Iterator[subprocess.Popen]:
    """roughnet-agent running ``cfg`` (stdout and stderr piped as text), yielded once it printed its
    ready line; killed by PID if it still runs when the block ends."""
    p = subprocess.Popen([str(AGENT), "run", "--config-json", _json(cfg)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        ready = json.loads(p.stdout.readline())
        assert ready["type"] == "ready", ready
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
