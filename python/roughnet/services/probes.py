"""Readiness probes: one real protocol operation against each kind of service.

Owns the MQTT CONNECT/CONNACK exchange (3.1.1), the NATS INFO + CONNECT/PING/PONG
exchange, Kafka's ApiVersions + Metadata + CreateTopics (through
``services.kafkawire``) and the plain TCP connect used for the Zenoh router;
the encoders and parsers are pure functions (tested on bytes), and each
``probe_*`` function does one attempt over a socket opened inside the broker
client's namespace (``services.netns``).  Retrying until a deadline is the
caller's (``services.lifecycle``).  A failed attempt raises ``ProbeFailed``
with what was seen.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ServiceError
from . import kafkawire
from .netns import connect_in_ns

MQTT_KEEPALIVE_S = 30
MQTT_CLIENT_ID = "roughnet-probe"
#: CONNACK return codes of MQTT 3.1.1 (section 3.2.2.3).
CONNACK_CODES = {
    0: "accepted",
    1: "unacceptable protocol version",
    2: "identifier rejected",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorized",
}
NATS_MAX_LINE = 64 * 1024


class ProbeFailed(ServiceError):
    """One probe attempt did not get the expected answer (the caller may retry)."""


class ProbeFatal(ServiceError):
    """The service answered, and the answer cannot change by waiting (the caller must not retry)."""


# ---- MQTT -------------------------------------------------------------------------------


def _mqtt_remaining_length(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def mqtt_connect_packet(client_id: str = MQTT_CLIENT_ID, keepalive_s: int = MQTT_KEEPALIVE_S) -> bytes:
    """An MQTT 3.1.1 CONNECT with a clean session and no credentials."""
    cid = client_id.encode()
    var = b"\x00\x04MQTT" + bytes([4, 0x02]) + struct.pack(">H", keepalive_s)
    payload = struct.pack(">H", len(cid)) + cid
    body = var + payload
    return bytes([0x10]) + _mqtt_remaining_length(len(body)) + body


MQTT_DISCONNECT = bytes([0xE0, 0x00])


def parse_connack(data: bytes) -> int:
    """Return code of a CONNACK (4 bytes); ProbeFailed if it is not one."""
    if len(data) < 4 or data[0] != 0x20 or data[1] != 0x02:
        raise ProbeFailed(f"expected an MQTT CONNACK (20 02 ..), got {data[:8].hex(' ') or 'nothing'}")
    return data[3]


def probe_mqtt(ns: str | None, ip: str, port: int, timeout_s: float, ca_file: Path | None = None) -> str:
    """CONNECT, read CONNACK (accepted), DISCONNECT.  With ``ca_file``: over TLS, verifying the server."""
    sock = connect_in_ns(ns, ip, port, timeout_s)
    try:
        if ca_file is not None:
            ctx = ssl.create_default_context(cafile=str(ca_file))
            sock = ctx.wrap_socket(sock, server_hostname=ip)
        sock.sendall(mqtt_connect_packet())
        data = _recv_at_least(sock, 4)
        code = parse_connack(data)
        if code != 0:
            raise ProbeFailed(f"MQTT CONNACK refused the connection: code {code} "
                              f"({CONNACK_CODES.get(code, 'unknown')}); expected 0 (accepted)")
        sock.sendall(MQTT_DISCONNECT)
        return f"CONNACK accepted{' over TLS' if ca_file else ''}"
    finally:
        sock.close()


# ---- NATS -------------------------------------------------------------------------------


def parse_nats_info(line: bytes) -> dict:
    """The JSON object of a NATS ``INFO {...}`` line."""
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith("INFO "):
        raise ProbeFailed(f"expected a NATS INFO line, got {text[:80]!r}")
    try:
        info = json.loads(text[5:])
    except json.JSONDecodeError as e:
        raise ProbeFailed(f"NATS INFO line is not JSON ({e}): {text[:80]!r}") from e
    if not isinstance(info, dict):
        raise ProbeFailed(f"NATS INFO holds {type(info).__name__}; expected an object")
    return info


NATS_CONNECT = (b'CONNECT {"verbose":false,"pedantic":false,"name":"roughnet-probe","lang":"python",'
                b'"version":"0","protocol":1}\r\nPING\r\n')


def probe_nats(ns: str | None, ip: str, port: int, timeout_s: float) -> str:
    """Read INFO, send CONNECT + PING, expect PONG.  Returns a short description of the server."""
    sock = connect_in_ns(ns, ip, port, timeout_s)
    try:
        with sock.makefile("rb") as f:
            info = parse_nats_info(f.readline(NATS_MAX_LINE))
            sock.sendall(NATS_CONNECT)
            line = f.readline(NATS_MAX_LINE).strip()
        if line != b"PONG":
            raise ProbeFailed(f"NATS answered {line[:80]!r} to PING; expected PONG")
        return f"nats-server {info.get('version', '?')} PONG (jetstream={bool(info.get('jetstream'))})"
    finally:
        sock.close()


# ---- Kafka ------------------------------------------------------------------------------


@dataclass
class KafkaReady:
    cluster_id: str | None
    brokers: list[tuple[int, str, int]]
    topic: str
    partitions: int


def probe_kafka(ns: str | None, ip: str, port: int, timeout_s: float, topic: str, partitions: int,
                deadline: float) -> KafkaReady:
    """ApiVersions, Metadata (the broker lists itself), create ``topic`` and wait until every
    partition has a leader (until ``deadline``, time.monotonic())."""
    sock = connect_in_ns(ns, ip, port, timeout_s)
    try:
        conn = kafkawire.KafkaConn(sock)
        conn.api_versions()
        meta = conn.metadata([])
        if not meta.brokers:
            raise ProbeFailed("Kafka Metadata lists no broker yet")
        err, msg = conn.create_topic(topic, partitions, int(timeout_s * 1000))
        if err not in (kafkawire.ERR_NONE, kafkawire.ERR_TOPIC_ALREADY_EXISTS):
            raise ProbeFailed(f"Kafka CreateTopics {topic!r} ({partitions} partitions) failed: error {err}: {msg}")
        while True:
            tm = conn.metadata([topic]).topics.get(topic)
            if tm is not None and tm.ready:
                if len(tm.partitions) != partitions:
                    raise ProbeFatal(f"Kafka topic {topic!r} exists with {len(tm.partitions)} partitions; "
                                       f"expected {partitions}")
                return KafkaReady(meta.cluster_id, meta.brokers, topic, len(tm.partitions))
            if time.monotonic() > deadline:
                raise ProbeFailed(f"Kafka topic {topic!r} has no leader for every partition yet: {tm}")
            time.sleep(0.05)
    finally:
        sock.close()


# ---- plain TCP (zenoh router) -----------------------------------------------------------


def probe_tcp(ns: str | None, ip: str, port: int, timeout_s: float) -> str:
    sock = connect_in_ns(ns, ip, port, timeout_s)
    sock.close()
    return "TCP connect accepted"


def _recv_at_least(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    return bytes(buf)
