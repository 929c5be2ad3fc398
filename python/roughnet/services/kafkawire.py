"""Just enough of the Kafka wire protocol to probe a broker and create a topic.

Owns encoding three requests and decoding their responses (pure functions,
tested on bytes in tests/unit) plus ``KafkaConn``, which sends them over a
socket it is given: ApiVersions v0 (which API versions the broker speaks),
Metadata v4 (brokers, topics, partition leaders) and CreateTopics v2-v4.
Only the non-flexible (pre-KIP-482) encodings are used, which Kafka 4.x still
accepts; a broker that does not is refused with a message naming the ranges.
Reference: https://kafka.apache.org/protocol (request header v1, response
header v0).  It knows nothing about namespaces or processes.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

from ..errors import ServiceError

API_METADATA = 3
API_API_VERSIONS = 18
API_CREATE_TOPICS = 19
METADATA_VERSION = 4
CREATE_TOPICS_VERSIONS = (2, 3, 4)  # same non-flexible layout in all three
CLIENT_ID = "roughnet-probe"
#: Kafka error codes that the probe handles by name.
ERR_NONE = 0
ERR_LEADER_NOT_AVAILABLE = 5
ERR_TOPIC_ALREADY_EXISTS = 36
#: A response larger than this is not something these three requests produce.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ServiceError(f"Kafka response truncated: wanted {n} bytes at offset {self.pos}, "
                               f"have {len(self.data) - self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode("utf-8", "replace")

    def array_len(self) -> int:
        n = self.i32()
        return max(n, 0)


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def frame_request(api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """Size prefix + request header v1 (key, version, correlation id, client id) + body."""
    header = struct.pack(">hhi", api_key, api_version, correlation_id) + _str(CLIENT_ID)
    msg = header + body
    return struct.pack(">i", len(msg)) + msg


def api_versions_request(correlation_id: int) -> bytes:
    return frame_request(API_API_VERSIONS, 0, correlation_id, b"")


def parse_api_versions(body: bytes) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 response body (after the correlation id): api key -> (min, max)."""
    r = _Reader(body)
    err = r.i16()
    if err != ERR_NONE:
        raise ServiceError(f"Kafka ApiVersions answered error code {err}; expected 0")
    out = {}
    for _ in range(r.array_len()):
        key, lo, hi = r.i16(), r.i16(), r.i16()
        out[key] = (lo, hi)
    return out


def metadata_request(correlation_id: int, topics: list[str] | None) -> bytes:
    """Metadata v4: the named topics (None: all), never auto-creating them."""
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics)) + b"".join(_str(t) for t in topics)
    body += struct.pack(">b", 0)  # allow_auto_topic_creation = false
    return frame_request(API_METADATA, METADATA_VERSION, correlation_id, body)


@dataclass
class PartitionMeta:
    index: int
    error_code: int
    leader: int


@dataclass
class TopicMeta:
    name: str
    error_code: int
    partitions: list[PartitionMeta] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """Every partition has a leader (a producer and a consumer can use it)."""
        return (self.error_code == ERR_NONE and bool(self.partitions)
                and all(p.error_code == ERR_NONE and p.leader >= 0 for p in self.partitions))


@dataclass
class Metadata:
    brokers: list[tuple[int, str, int]]  # (node id, host, port)
    cluster_id: str | None
    controller_id: int
    topics: dict[str, TopicMeta]


def parse_metadata(body: bytes) -> Metadata:
    """Metadata v4 response body (after the correlation id)."""
    r = _Reader(body)
    r.i32()  # throttle_time_ms
    brokers = []
    for _ in range(r.array_len()):
        node, host, port = r.i32(), r.string() or "", r.i32()
        r.string()  # rack
        brokers.append((node, host, port))
    cluster_id = r.string()
    controller = r.i32()
    topics = {}
    for _ in range(r.array_len()):
        err, name = r.i16(), r.string() or ""
        r.i8()  # is_internal
        parts = []
        for _ in range(r.array_len()):
            perr, idx, leader = r.i16(), r.i32(), r.i32()
            for _ in range(r.array_len()):  # replica_nodes
                r.i32()
            for _ in range(r.array_len()):  # isr_nodes
                r.i32()
            parts.append(PartitionMeta(idx, perr, leader))
        topics[name] = TopicMeta(name, err, sorted(parts, key=lambda p: p.index))
    return Metadata(brokers, cluster_id, controller, topics)


def create_topics_request(correlation_id: int, version: int, topic: str, partitions: int,
                          timeout_ms: int) -> bytes:
    """CreateTopics v2-v4 for one topic, replication factor 1, no configs."""
    if version not in CREATE_TOPICS_VERSIONS:
        raise ServiceError(f"CreateTopics version {version} is not encoded here; expected one of "
                           f"{CREATE_TOPICS_VERSIONS}")
    body = struct.pack(">i", 1) + _str(topic) + struct.pack(">ihii", partitions, 1, 0, 0)
    body += struct.pack(">ib", timeout_ms, 0)  # timeout, validate_only = false
    return frame_request(API_CREATE_TOPICS, version, correlation_id, body)


def parse_create_topics(body: bytes) -> dict[str, tuple[int, str | None]]:
    """CreateTopics v2-v4 response body: topic -> (error code, error message)."""
    r = _Reader(body)
    r.i32()  # throttle_time_ms
    out = {}
    for _ in range(r.array_len()):
        name = r.string() or ""
        err = r.i16()
        out[name] = (err, r.string())
    return out


class KafkaConn:
    """Requests over one connected socket (the caller made it, possibly in a namespace)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._next_id = 1
        self.versions: dict[int, tuple[int, int]] = {}

    def _call(self, make) -> bytes:
        cid = self._next_id
        self._next_id += 1
        self.sock.sendall(make(cid))
        size = struct.unpack(">i", _recv_exact(self.sock, 4))[0]
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise ServiceError(f"Kafka response size {size} is out of range; expected 4..{MAX_RESPONSE_BYTES} "
                               f"(is this a Kafka broker?)")
        data = _recv_exact(self.sock, size)
        got = struct.unpack(">i", data[:4])[0]
        if got != cid:
            raise ServiceError(f"Kafka response has correlation id {got}; expected {cid}")
        return data[4:]

    def api_versions(self) -> dict[int, tuple[int, int]]:
        self.versions = parse_api_versions(self._call(api_versions_request))
        lo, hi = self.versions.get(API_METADATA, (1, 0))
        if not lo <= METADATA_VERSION <= hi:
            raise ServiceError(f"this Kafka broker speaks Metadata v{lo}-v{hi}; roughnet's probe needs "
                               f"v{METADATA_VERSION}")
        return self.versions

    def metadata(self, topics: list[str] | None = None) -> Metadata:
        return parse_metadata(self._call(lambda cid: metadata_request(cid, topics)))

    def create_topic(self, topic: str, partitions: int, timeout_ms: int) -> tuple[int, str | None]:
        lo, hi = self.versions.get(API_CREATE_TOPICS, (1, 0))
        usable = [v for v in CREATE_TOPICS_VERSIONS if lo <= v <= hi]
        if not usable:
            raise ServiceError(f"this Kafka broker speaks CreateTopics v{lo}-v{hi}; roughnet needs one of "
                               f"{CREATE_TOPICS_VERSIONS}")
        body = self._call(lambda cid: create_topics_request(cid, max(usable), topic, partitions, timeout_ms))
        res = parse_create_topics(body)
        if topic not in res:
            raise ServiceError(f"Kafka CreateTopics answered for {sorted(res)}; expected topic {topic!r}")
        return res[topic]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ServiceError(f"Kafka broker closed the connection after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)
