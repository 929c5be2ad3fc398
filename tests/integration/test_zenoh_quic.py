"""Zenoh over QUIC: the agent against eclipse-zenoh (Python) with TLS files from services.tls, on loopback.

QUIC always runs TLS 1.3: the listening side presents a certificate naming its address, the
connecting side trusts the CA that signed it.  The certificates come from the same code the
runner uses (a CA, then a server certificate with an IP SAN), so these tests also check that
zenoh's QUIC link accepts what roughnet makes.  Both directions: an eclipse-zenoh subscriber
listening on quic receives the agent's publications, the agent's receiver listening on quic
receives an eclipse-zenoh publisher's.  And the agent refuses quic without its TLS files.
Skips with a reason when openssl, eclipse-zenoh or an agent speaking zenoh is missing.
"""

from __future__ import annotations

import contextlib

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from roughnet.binaries import agent_version, find_binary
from roughnet.services import tls
from test_interop_zenoh import FLAG_END, decode, free_port, message

zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (pip install eclipse-zenoh)")

AGENT = find_binary("roughnet-agent")
pytestmark = [
    pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)"),
    pytest.mark.skipif(
        AGENT is not None and "zenoh" not in agent_version(str(AGENT)).get("protocols", []),
        reason="this roughnet-agent build does not speak zenoh",
    ),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed"),
]

N = 200


@pytest.fixture
def certs(tmp_path: Path) -> tls.TlsFiles:
    ca, key = tls.ensure_ca(tmp_path / "ca")
    return tls.server_cert(ca, key, tmp_path / "run", "zenoh-quic", ["127.0.0.1"])


@contextlib.contextmanager
def quic_session(listen: list[str], connect: list[str], files: tls.TlsFiles, listener: bool):
    """An eclipse-zenoh peer over QUIC; closing it may time out once the agent has gone (not a failure)."""
    s = _open_quic(listen, connect, files, listener)
    try:
        yield s
    finally:
        try:
            s.close()
        except zenoh.ZError as e:
            if "close operation timed out" not in str(e):
                raise


def _open_quic(listen: list[str], connect: list[str], files: tls.TlsFiles, listener: bool) -> zenoh.Session:
    conf = zenoh.Config()
    conf.insert_json5("mode", '"peer"')
    conf.insert_json5("listen/endpoints", json.dumps(listen))
    conf.insert_json5("connect/endpoints", json.dumps(connect))
    conf.insert_json5("scouting/multicast/enabled", "false")
    conf.insert_json5("transport/link/tls/root_ca_certificate", json.dumps(str(files.ca)))
    if listener:
        conf.insert_json5("transport/link/tls/listen_certificate", json.dumps(str(files.cert)))
        conf.insert_json5("transport/link/tls/listen_private_key", json.dumps(str(files.key)))
    return zenoh.open(conf)


def agent(cfg: dict) -> subprocess.Popen:
    return subprocess.Popen([str(AGENT), "run", "--config-json", json.dumps(cfg)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def lines_of(p: subprocess.Popen, timeout: float = 60) -> tuple[int, list[dict]]:
    out, _err = p.communicate(timeout=timeout)
    return p.returncode, [json.loads(x) for x in out.splitlines() if x.strip()]


def test_python_subscriber_over_quic_receives_the_agent_publications(certs) -> None:
    port = free_port()
    topic = f"roughnet/quic{port}"
    got: list[bytes] = []
    with quic_session([f"quic/127.0.0.1:{port}"], [], certs, listener=True) as s:
        sub = s.declare_subscriber(f"{topic}/data", lambda sample: got.append(sample.payload.to_bytes()))
        token = s.liveliness().declare_token(f"{topic}/rx/127.0.0.1_{port}")
        tx = agent({"v": 1, "role": "sender", "protocol": "zenoh", "pattern": "stream",
                    "peers": [f"127.0.0.1:{port}"], "payload_bytes": 100, "messages": N,
                    "report_interval_ms": 0, "timeout_ms": 20000, "topic": topic,
                    "options": {"transport": "quic", "tls_ca": str(certs.ca)}})
        rc, lines = lines_of(tx)
        deadline = time.monotonic() + 5
        while len(got) < N + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        token.undeclare()
        sub.undeclare()
    assert rc == 0, lines
    res = next(x for x in lines if x["type"] == "result")
    assert res["sent"] == N
    decoded = [decode(p) for p in got]
    assert [seq for flags, seq in decoded if not flags & FLAG_END] == list(range(N))
    assert [seq for flags, seq in decoded if flags & FLAG_END] == [N]


def test_agent_receiver_over_quic_receives_python_publications(certs) -> None:
    port = free_port()
    topic = f"roughnet/quic{port}"
    rx = agent({"v": 1, "role": "receiver", "protocol": "zenoh", "pattern": "stream",
                "listen": f"127.0.0.1:{port}", "payload_bytes": 100, "messages": N,
                "report_interval_ms": 0, "timeout_ms": 20000, "topic": topic,
                "options": {"transport": "quic", "tls_ca": str(certs.ca), "tls_cert": str(certs.cert),
                            "tls_key": str(certs.key)}})
    ready = json.loads(rx.stdout.readline())
    assert ready["type"] == "ready", ready
    with quic_session([], [f"quic/127.0.0.1:{port}"], certs, listener=False) as s:
        pub = s.declare_publisher(f"{topic}/data", congestion_control=zenoh.CongestionControl.BLOCK)
        deadline = time.monotonic() + 10
        while not pub.matching_status.matching and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pub.matching_status.matching, "the agent's subscriber never matched over quic"
        for i in range(N):
            pub.put(message(i))
        pub.put(message(N, FLAG_END, 32))
        rc, lines = lines_of(rx)
        pub.undeclare()
    assert rc == 0, lines
    res = next(x for x in lines if x["type"] == "result")
    assert res["received"] == N and res["complete"] is True, res
    assert res["bad_messages"] == 0


@pytest.mark.parametrize("options,expected", [
    pytest.param({"transport": "quic"}, "options.tls_ca", id="no-ca"),
    pytest.param({"transport": "quic", "tls_ca": "CA"}, "options.tls_cert", id="listener-without-cert"),
    pytest.param({"transport": "quic", "tls_ca": "/nonexistent/ca.pem", "tls_cert": "CERT", "tls_key": "KEY"},
                 "readable PEM file", id="missing-file"),
    pytest.param({"transport": "tcp", "tls_ca": "CA"}, 'unless transport = "quic"', id="tls-without-quic"),
])
def test_agent_refuses_quic_without_its_tls_files(certs, options, expected) -> None:
    opts = {k: (str(certs.ca) if v == "CA" else str(certs.cert) if v == "CERT" else str(certs.key) if v == "KEY"
                else v) for k, v in options.items()}
    rx = agent({"v": 1, "role": "receiver", "protocol": "zenoh", "pattern": "stream", "listen": "127.0.0.1:0",
                "payload_bytes": 100, "messages": 10, "timeout_ms": 5000, "options": opts})
    rc, lines = lines_of(rx, timeout=20)
    assert rc == 2, lines
    err = next(x for x in lines if x["type"] == "error")
    assert err["kind"] == "config" and expected in err["message"], err
