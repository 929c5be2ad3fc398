"""Protocol knob tables (``[workload.<protocol>]``) and their conversion into agent options.

This module owns which knobs each protocol has (docs/protocols.md is the contract:
the same names, values and defaults), the kind of each knob's value, and how a
given knob becomes an agent option (``options`` in docs/agent-protocol.md): sizes in
bytes, durations in nanoseconds, booleans, integers and strings as written.  A knob
left out is not sent: the agent applies the protocol's default (the one the
descriptions name).  Rules between keys (a table for another protocol than the
run's, a knob that needs a service) are ``spec.checks``'.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from .. import units
from ..ros2 import qos as ros2_qos
from . import kinds
from .table import Table, field

INT32_MAX = 2**31 - 1
SECOND_NS = 1_000_000_000


class Knobs(Table):
    """The base of a protocol's knob table (``protocol``: the table's name under [workload])."""

    protocol: ClassVar[str] = ""
    key_noun: ClassVar[str] = "knob"


#: A congestion control algorithm's name (``tcp.congestion``).
CONGESTION = kinds.name(r"^[a-z][a-z0-9_]{0,15}$", 'a congestion control name like "cubic", "reno" or "bbr"')


class TcpKnobs(Knobs):
    """``[workload.tcp]``: TCP socket options."""

    protocol: ClassVar[str] = "tcp"
    key_owner: ClassVar[str] = 'protocol "tcp"'

    nodelay: kinds.boolean().type() = field("TCP_NODELAY (the agent's default: true).", None)
    mss: kinds.size().type() = field("TCP_MAXSEG: " + kinds.SIZE + ", 88 B to 65535 B.", None)
    send_buffer: kinds.size().type() = field("SO_SNDBUF (forced past rmem/wmem limits): " + kinds.SIZE + ".", None)
    recv_buffer: kinds.size().type() = field("SO_RCVBUF (forced past rmem/wmem limits): " + kinds.SIZE + ".", None)
    send_size: kinds.size().type() = field("Bytes per write call (bulk pattern): " + kinds.SIZE + ".", None)
    congestion: CONGESTION.type() = field(
        "TCP_CONGESTION: the congestion control algorithm (" + CONGESTION.expected + "), as the kernel names "
        "it. Unset: the namespace's default (net.ipv4.tcp_congestion_control).", None)


class UdpKnobs(Knobs):
    """``[workload.udp]``: UDP socket options."""

    protocol: ClassVar[str] = "udp"
    key_owner: ClassVar[str] = 'protocol "udp"'

    send_buffer: kinds.size().type() = field("SO_SNDBUF: " + kinds.SIZE + ".", None)
    recv_buffer: kinds.size().type() = field("SO_RCVBUF: " + kinds.SIZE + ".", None)
    broadcast: kinds.boolean().type() = field(
        "Send each message once to the broadcast address of the sender's segment (SO_BROADCAST) instead of a "
        "copy per receiver; every receiver on that segment counts it (pattern stream or bulk; the sender and "
        "every receiver on one [[link]]). Default false.", None)


_RELIABILITY = kinds.choice(("reliable", "best_effort"))
#: Bounds of the Zenoh timing knobs (the agent checks the same: crates/agent zenoh.rs).
ZENOH_TIMING_MIN_NS = 100_000_000
ZENOH_TIMING_MAX_NS = 3600 * SECOND_NS


class ZenohKnobs(Knobs):
    """``[workload.zenoh]``: Zenoh session and publisher settings."""

    protocol: ClassVar[str] = "zenoh"
    key_owner: ClassVar[str] = 'protocol "zenoh"'

    mode: kinds.choice(("peer", "client")).type() = field(
        'Session mode, "peer" (default) or "client"; client mode needs a [[service]] of kind "zenoh-router" '
        "(every agent connects to it).", None)
    transport: kinds.choice(("tcp", "udp", "quic")).type() = field(
        'Transport of the session links: "tcp" (default), "udp" or "quic" (peer mode only; the runner makes the TLS '
        "files).", None)
    reliability: _RELIABILITY.type() = field('Publisher reliability: "reliable" (default) or "best_effort".', None)
    congestion_control: kinds.choice(("block", "drop")).type() = field(
        'What a publisher does when the queue is full: "block" (default) or "drop".', None)
    express: kinds.boolean().type() = field("Send each message at once, without batching (default false).", None)
    priority: kinds.integer(1, 7, "an integer from 1 to 7").type() = field(
        'Publisher priority, 1 (real time) to 7 (background); default 5 ("data").', None)
    multicast_scouting: kinds.boolean().type() = field(
        "Discover peers by multicast scouting (default false: peers connect to the endpoints roughnet gives them).",
        None)
    open_timeout: kinds.bounded_duration(ZENOH_TIMING_MIN_NS, ZENOH_TIMING_MAX_NS, ("10 s", "60 s")).type() = field(
        "Session open timeout (zenoh's transport/unicast open_timeout and accept_timeout: the link's connection and "
        "the InitSyn/InitAck/OpenSyn/OpenAck handshake): " + kinds.DURATION + ", 100 ms to 1 h. Default: zenoh's "
        "10 s, or on a slow link 4 round trips of the run's slowest path (docs/protocols.md).", None)
    lease: kinds.bounded_duration(ZENOH_TIMING_MIN_NS, ZENOH_TIMING_MAX_NS, ("10 s", "60 s")).type() = field(
        "Link lease (zenoh's transport/link/tx/lease; a keep-alive every lease / 4, the link is closed after a lease "
        "with nothing received): " + kinds.DURATION + ", 100 ms to 1 h. Default: zenoh's 10 s, or on a slow link "
        "4 round trips of the run's slowest path.", None)
    wait_before_close: kinds.bounded_duration(ZENOH_TIMING_MIN_NS, ZENOH_TIMING_MAX_NS, ("5 s", "60 s")).type() = field(
        "How long a message of a blocking publisher (congestion_control = \"block\", the default) may wait for "
        "room in the link's transmit queue before zenoh closes the transport (zenoh's transport/link/tx/queue/"
        "congestion_control/block/wait_before_close): " + kinds.DURATION + ", 100 ms to 1 h. Default: zenoh's 5 s. "
        "On a slow or lossy link TCP's backoff can hold the queue full longer than that: zenoh then closes the link "
        "and reconnects, and the sender's tokens of its peers go with it (transport_drops); raise it to keep the "
        "session through such stalls, lower it to see the closure sooner.", None)


class ZmqKnobs(Knobs):
    """``[workload.zmq]``: ZeroMQ socket options."""

    protocol: ClassVar[str] = "zmq"
    key_owner: ClassVar[str] = 'protocol "zmq"'

    sndhwm: kinds.integer(0, INT32_MAX, "an integer >= 0 (messages; 0 = no limit)").type() = field(
        "ZMQ_SNDHWM, in messages (default 1000, libzmq's; 0 = no limit).", None)
    rcvhwm: kinds.integer(0, INT32_MAX, "an integer >= 0 (messages; 0 = no limit)").type() = field(
        "ZMQ_RCVHWM, in messages (default 1000, libzmq's; 0 = no limit).", None)
    transport: kinds.choice(("tcp",)).type() = field('ZeroMQ transport: "tcp" (the only one so far).', None)


#: DDS ``batch`` bounds (bytes): Cyclone's FragmentSize (a smaller MaxMessageSize leaves no room for one
#: fragment per message) to the largest UDP payload; the agent checks the same (crates/agent dds.rs).
DDS_BATCH_MIN = 1344
DDS_BATCH_MAX = 65507
_DDS_BATCH_EXPECTED = f"{kinds.SIZE}: 0 B (no batching) or {DDS_BATCH_MIN} B to {DDS_BATCH_MAX} B"


def _dds_batch() -> kinds.Kind:
    """A size that is 0 (off) or within Cyclone's MaxMessageSize bounds."""

    def check(value: Any) -> None:
        try:
            n = units.parse_size_bytes(value)
        except ValueError as e:
            raise ValueError(str(e).split("; expected ", 1)[0] + "; expected " + _DDS_BATCH_EXPECTED) from None
        if n and not DDS_BATCH_MIN <= n <= DDS_BATCH_MAX:
            raise ValueError(f"{'below' if n < DDS_BATCH_MIN else 'above'} the bounds; expected {_DDS_BATCH_EXPECTED}")

    schema = {"type": "string", "examples": ["0 B", "8 KiB", "14720 B"]}
    return kinds.Kind(_DDS_BATCH_EXPECTED, check, schema, convert=units.parse_size_bytes)


class DdsKnobs(Knobs):
    """``[workload.dds]``: DDS QoS and discovery settings."""

    protocol: ClassVar[str] = "dds"
    key_owner: ClassVar[str] = 'protocol "dds"'

    reliability: _RELIABILITY.type() = field('Reliability QoS: "reliable" (default) or "best_effort".', None)
    history_depth: kinds.integer(0, INT32_MAX, "an integer >= 0 (0 = keep all)").type() = field(
        "History QoS depth; 0 = keep all. Default: 0 with reliable, 1 with best effort; 10 with ros2 = true "
        "(ROS's default profile, as an rclpy node).", None)
    durability: kinds.choice(("volatile", "transient_local")).type() = field(
        'Durability QoS: "volatile" (default) or "transient_local".', None)
    multicast: kinds.boolean().type() = field(
        "Use multicast discovery and data (default false: unicast peers from the topology's addresses).", None)
    ros2: kinds.boolean().type() = field(
        "ROS 2 mode: topic `rt/<name>`, type `std_msgs/msg/UInt8MultiArray` (`std_msgs::msg::dds_::UInt8MultiArray_`), "
        "legal ROS 2 names, so rclpy nodes (protocol ros2) talk to it (default false).", None)
    domain_id: kinds.integer(0, 232, "an integer from 0 to 232").type() = field("DDS domain id (default 0).", None)
    batch: _dds_batch().type() = field(
        "Writer batching: " + _DDS_BATCH_EXPECTED + "; default 0 B (off). On, the data writers use Cyclone's "
        "writer_batching QoS and General/MaxMessageSize is this size: samples are packed into RTPS messages (UDP "
        "payloads) of up to this many bytes, sent when the next sample would not fit, and flushed after the end "
        "marker and after every ping request and reply. Not RTI perftest's -batchSize (docs/protocols.md).", None)
    request_reply: kinds.choice(ros2_qos.REQUEST_REPLY).type() = field(
        'With ros2 = true, ping and ramp over "topics" (default) or as the ROS 2 "service" roughnet_msgs/srv/Bytes '
        "(rq/<name>Request, rr/<name>Reply; docs/protocols.md, ROS 2).", None)


class MqttKnobs(Knobs):
    """``[workload.mqtt]``: MQTT client settings (needs a [[service]] of kind "mosquitto")."""

    protocol: ClassVar[str] = "mqtt"
    key_owner: ClassVar[str] = 'protocol "mqtt"'

    version: kinds.choice(("3.1.1", "5")).type() = field('Protocol version: "3.1.1" (default) or "5".', None)
    qos: kinds.integer(0, 2, "0, 1 or 2").type() = field("QoS of publications and subscriptions: 0 (default), 1 "
                                                         "or 2.", None)  # fmt: skip
    clean_session: kinds.boolean().type() = field("Clean session (MQTT 5: clean start); default true.", None)
    keep_alive: kinds.bounded_duration(0, 65535 * SECOND_NS, ("30 s", "60 s"), whole_seconds=True).type() = field(
        "Keep-alive interval: " + kinds.DURATION + ", whole seconds, 0 s (off) to 65535 s; default 30 s.", None)
    inflight: kinds.integer(1, 65535, "an integer from 1 to 65535").type() = field(
        "Client's maximum of unacknowledged QoS 1/2 messages in flight (default 100). An upper bound: an MQTT "
        "3.1.1 QoS 2 publisher lowers it to the broker's receive maximum (mosquitto's max_inflight), which "
        "3.1.1 cannot announce and past which mosquitto refuses messages silently (docs/protocols.md).", None)
    tls: kinds.boolean().type() = field(
        'Connect over TLS (default false); needs `tls = true` on the "mosquitto" service.', None)
    reconnect: kinds.boolean().type() = field(
        "Survive a lost broker connection (default false: it ends the run with an error): reconnect with a "
        "100 ms to 1 s backoff, subscribe again when the broker forgot the session; results gain `reconnects`, "
        "`disconnected_s` and `abandoned` (docs/protocols.md, Reconnecting).", None)
    nodelay: kinds.boolean().type() = field(
        "TCP_NODELAY on the client's connection to the broker (Nagle's algorithm off); default false, the "
        "client library's (rumqttc) default: a small message waits for the ACK of the one before when the round "
        "trip is longer than the gap between messages (docs/scenarios.md, networks).", None)


class KafkaKnobs(Knobs):
    """``[workload.kafka]``: Kafka producer and consumer settings (needs a [[service]] of kind "kafka")."""

    protocol: ClassVar[str] = "kafka"
    key_owner: ClassVar[str] = 'protocol "kafka"'

    acks: kinds.choice(("0", "1", "all")).type() = field(
        'Producer acks, a string: "0", "1" or "all" (default).', None)
    linger: kinds.bounded_duration(0, 900 * SECOND_NS, ("0 ms", "5 ms", "100 ms")).type() = field(
        "Producer linger.ms: " + kinds.DURATION + ", 0 to 15 min; default 5 ms (librdkafka's).", None)
    batch_size: kinds.bounded_size(1, INT32_MAX, ("16 KiB", "1 MB")).type() = field(
        "Producer batch.size: " + kinds.SIZE + ", 1 B to 2147483647 B; default 1 MB (librdkafka's).", None)
    compression: kinds.choice(("none", "gzip", "snappy", "lz4", "zstd")).type() = field(
        'Producer compression: "none" (default), "gzip", "snappy", "lz4" or "zstd".', None)
    idempotence: kinds.boolean().type() = field(
        'Idempotent producer (default false); needs acks = "all" (its default).', None)
    partitions: kinds.integer(1, None, "an integer >= 1").type() = field(
        "Partitions of the topic the runner creates (default 1).", None)
    fetch_min_bytes: kinds.bounded_size(1, 100_000_000, ("1 B", "64 KiB")).type() = field(
        "Consumer fetch.min.bytes: " + kinds.SIZE + ", 1 B to 100 MB; default 1 B.", None)
    fetch_max_wait: kinds.bounded_duration(0, 300 * SECOND_NS, ("10 ms", "500 ms")).type() = field(
        "Consumer fetch.wait.max.ms: " + kinds.DURATION + ", 0 to 5 min; default 500 ms.", None)
    reconnect: kinds.boolean().type() = field(
        "Survive the broker going away and coming back (default false: it ends the run with an error): librdkafka "
        "reconnects (100 ms to 1 s backoff) and retries what it queued; results gain `reconnects` and "
        "`disconnected_s` (docs/protocols.md, Reconnecting).", None)


class NatsKnobs(Knobs):
    """``[workload.nats]``: NATS client settings (core publish/subscribe; request/reply for ping and ramp)."""

    protocol: ClassVar[str] = "nats"
    key_owner: ClassVar[str] = 'protocol "nats"'

    reconnect: kinds.boolean().type() = field(
        "Survive a lost server connection (default false: it ends the run with an error): async-nats reconnects "
        "with a 100 ms to 1 s backoff and subscribes again; results gain `reconnects` and `disconnected_s` "
        "(docs/protocols.md, Reconnecting).", None)
    jetstream: kinds.boolean().type() = field(
        "Carry stream and bulk messages through a JetStream stream (default false: core NATS): the receiver "
        "creates the stream and a durable consumer and acknowledges each message, the sender publishes with "
        "PubAcks and message ids and sends again what is not acknowledged; needs `jetstream = true` on the "
        '"nats" service. With `reconnect`, nothing is lost across a server restart.', None)


_ROS2_DEPTH = kinds.integer(0, ros2_qos.DEPTH_MAX, f"an integer from 0 (keep all) to {ros2_qos.DEPTH_MAX}")


class Ros2Knobs(Knobs):
    """``[workload.ros2]``: the QoS of the ROS 2 endpoints' topics (a named rclpy profile refined key by key)."""

    protocol: ClassVar[str] = "ros2"
    key_owner: ClassVar[str] = 'protocol "ros2"'

    profile: kinds.choice(tuple(ros2_qos.PROFILES)).type() = field(
        'The rclpy QoS profile the others refine: "default" (reliable, keep last 10, volatile; the default), '
        '"sensor_data" (best effort, keep last 5, volatile) or "services_default" (reliable, keep last 10, '
        "volatile).", None)
    reliability: _RELIABILITY.type() = field('Reliability QoS: "reliable" or "best_effort"; default: the '
                                             "profile's.", None)  # fmt: skip
    history_depth: _ROS2_DEPTH.type() = field(
        "History QoS: keep last this many; 0 = keep all. Default: the profile's.", None)
    durability: kinds.choice(ros2_qos.DURABILITY).type() = field(
        'Durability QoS: "volatile" or "transient_local"; default: the profile\'s.', None)
    request_reply: kinds.choice(ros2_qos.REQUEST_REPLY).type() = field(
        'Ping and ramp over "topics" (the default: a request topic and a reply topic per ponger, as the dds '
        'driver does) or as a ROS 2 "service" (roughnet_msgs/srv/Bytes, built by make extras; one service per '
        "ponger).", None)


#: Knob table per protocol: the key under [workload] is the protocol's name.
KNOB_TABLES: dict[str, type[Knobs]] = {
    t.protocol: t for t in (TcpKnobs, UdpKnobs, ZenohKnobs, ZmqKnobs, DdsKnobs, MqttKnobs, KafkaKnobs, NatsKnobs,
                                     Ros2Knobs)
}


def options(table: BaseModel | None) -> dict[str, Any]:
    """The knobs given in ``table`` (no placeholders left) as agent options, in base units."""
    if table is None:
        return {}
    fields = type(table).model_fields
    return {key: kinds.to_base(fields[key].metadata, value)
            for key, value in table.model_dump().items() if value is not None}  # fmt: skip
