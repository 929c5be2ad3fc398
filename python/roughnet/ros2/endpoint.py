"""roughnet's ROS 2 endpoint: a real rclpy node that speaks roughnet-agent's protocol.

    python -m roughnet.ros2.endpoint version
    python -m roughnet.ros2.endpoint run --config FILE      (or --config-json '{...}')

The same configuration object in and the same JSON lines out as roughnet-agent
(docs/agent-protocol.md), protocol ``ros2``, patterns ``stream``, ``bulk``, ``ping`` and ``ramp``.  Exit codes:
0 done (an incomplete receiver included), 1 runtime error, 2 bad configuration; errors are also a
JSON line.  SIGTERM/SIGINT: print the result so far (``end_reason`` ``signal``) and exit 0.

ROS 2 names under the run's topic (``roughnet/0123ab`` -> ``/roughnet/r0123ab``, the naming of the
dds driver's ROS 2 mode): ``<base>/data`` (stream, bulk), ``<base>/ping`` (requests), ``<base>/pong/<key>``
(each ponger's replies; ``<key>`` is its listen address as a legal token, ``a198_18_0_2_5201``),
``<base>/ready``.  Messages are ``std_msgs/msg/UInt8MultiArray`` (roughnet.ros2.wire says why).

Handshake (the dds driver's, so that the agent in its ROS 2 mode and this endpoint wait for each
other): a volatile reader drops what arrives before it matched the writer, so a receiver (ponger)
publishes on ``<base>/ready`` (reliable, keep last 1, transient local) the GUIDs of the writers its
subscription matched, 16 bytes each, sorted, as the ``data`` of a UInt8MultiArray, again whenever
that set changes; a sender (pinger) sends nothing before every peer's list holds its writer's GUID.
A peer that is not roughnet never lists anything: after 5 s (HANDSHAKE_GRACE_S) with every reader matched the sender
goes ahead on matching alone.

Environment (set here, before rclpy starts the middleware): ``FASTDDS_BUILTIN_TRANSPORTS=UDPv4``
(Fast DDS's shared-memory transport would carry traffic between namespaces of one machine past the
emulated link), ``ROS_STATIC_PEERS`` the peers' addresses (sender, pinger: unicast discovery over
links without multicast routes), and with loopback addresses only ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``
(no multicast discovery onto the machine's own networks).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import time
from typing import Any

from . import qos as qosmod
from . import trace as tracemod
from . import wire

VERSION = "0.1.0"
PATTERNS = ("stream", "ping", "ramp", "bulk")
ROLES = {"stream": ("sender", "receiver"), "ping": ("pinger", "ponger"), "ramp": ("pinger", "ponger"),
         "bulk": ("sender", "receiver")}
PAYLOAD_MIN, PAYLOAD_MAX = wire.HEADER_LEN, 64 << 20
KEYS = {"v", "role", "protocol", "pattern", "listen", "peers", "payload_bytes", "messages", "duration_ms",
        "rate_msgs_per_s", "interval_ns", "step_bytes", "warmup", "timeout_ms", "reply_timeout_ms", "linger_ms",
        "report_interval_ms", "seed", "options", "broker", "topic", "trace_path"}  # fmt: skip
DEFAULT_TOPIC = "roughnet"
END_COPIES, END_GAP_S = 5, 0.010
#: A reliable sender waits for the acknowledgement of everything it sent until the run's timeout, but at least
#: this long: Fast DDS repairs a loss after its next heartbeat (about 3 s here), and a lost heartbeat or
#: ACKNACK costs another; with a fixed 5 s, a 5 % lossy link once left the last 60 of 300 messages unrepaired.
ACK_WAIT_S = 5.0
ACK_POLL_S = 0.1
#: How long a sender whose readers all matched waits for their lists (the agent waits 2 s): over a lossy
#: link Fast DDS announces the new ready writer late (seen: more than 2 s at 5 % loss).
HANDSHAKE_GRACE_S = 5.0
SPIN_S = 0.05
GUID_BYTES = 16
#: How often a receiver looks at the writers it matched (a ROS graph query).
ANNOUNCE_EVERY_NS = 20_000_000
log = logging.getLogger("roughnet.ros2.endpoint")
_ADDR = re.compile(r"^(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})$")


class ConfigError(Exception):
    pass


class IoError(Exception):
    pass


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"v": 1} | obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


# ---- names ------------------------------------------------------------------------------------------------

def ros_name(topic: str) -> str:
    """``roughnet/0123`` -> ``/roughnet/r0123``: tokens of [A-Za-z0-9_], none starting with a digit."""
    toks = []
    for t in topic.split("/"):
        if not t:
            continue
        t = re.sub(r"[^A-Za-z0-9_]", "_", t)
        toks.append("r" + t if t[0].isdigit() else t)
    return "/" + "/".join(toks)


def addr_token(addr: str) -> str:
    """``198.18.0.2:5201`` -> ``a198_18_0_2_5201`` (a legal ROS 2 name token)."""
    return "a" + re.sub(r"[^A-Za-z0-9]", "_", addr)


# ---- configuration ----------------------------------------------------------------------------------------

def _int(cfg: dict, key: str, lo: int, hi: int | None = None, *, required: bool = False) -> int | None:
    v = cfg.get(key)
    if v is None:
        if required:
            raise ConfigError(f"{key}: missing; expected an integer")
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise ConfigError(f"{key}: {v!r}; expected an integer from {lo}" + (f" to {hi}" if hi is not None else ""))
    return v


def _addr(key: str, v: Any) -> str:
    if not isinstance(v, str) or not _ADDR.match(v):
        raise ConfigError(f"{key}: {v!r}; expected IP:PORT")
    return v


def check_config(cfg: Any) -> dict[str, Any]:
    """The configuration with defaults filled in; ConfigError naming the key otherwise."""
    if not isinstance(cfg, dict):
        raise ConfigError("configuration: expected one JSON object")
    unknown = sorted(set(cfg) - KEYS)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key; expected one of: {', '.join(sorted(KEYS))}")
    if cfg.get("v") != 1:
        raise ConfigError(f"v: {cfg.get('v')!r}; expected 1")
    if cfg.get("protocol") != "ros2":
        raise ConfigError(f"protocol: {cfg.get('protocol')!r}; expected \"ros2\" (this is the ROS 2 endpoint)")
    pattern = cfg.get("pattern")
    if pattern not in PATTERNS:
        raise ConfigError(f"pattern: {pattern!r}; protocol \"ros2\" has " + ", ".join(f'"{p}"' for p in PATTERNS))
    role = cfg.get("role")
    if role not in ROLES[pattern]:
        raise ConfigError(f"role: {role!r}; pattern \"{pattern}\" has roles " + " and ".join(ROLES[pattern]))
    out = dict(cfg)
    active = role in ("sender", "pinger")
    if active:
        peers = cfg.get("peers")
        if not isinstance(peers, list) or not 1 <= len(peers) <= 1024:
            raise ConfigError(f"peers: {peers!r}; expected a list of 1 to 1024 IP:PORT addresses")
        out["peers"] = [_addr(f"peers[{i}]", p) for i, p in enumerate(peers)]
        if cfg.get("listen") is not None:
            raise ConfigError(f"listen: not for role {role}")
    else:
        out["listen"] = _addr("listen", cfg.get("listen"))
        if cfg.get("peers") is not None:
            raise ConfigError(f"peers: not for role {role}")
    if cfg.get("broker") is not None:
        raise ConfigError("broker: protocol \"ros2\" has no broker (ROS 2 discovery is peer to peer)")
    tp = cfg.get("trace_path")
    if tp is not None and (pattern != "stream" or not isinstance(tp, str) or not tp):
        raise ConfigError(f"trace_path: {tp!r}; expected a file path, for pattern stream only")
    out["payload_bytes"] = _int(cfg, "payload_bytes", PAYLOAD_MIN, PAYLOAD_MAX, required=True)
    out["messages"] = _int(cfg, "messages", 1)
    out["duration_ms"] = _int(cfg, "duration_ms", 1)
    if pattern == "stream" and (out["messages"] is None) == (out["duration_ms"] is None):
        raise ConfigError("messages: stream takes exactly one of messages and duration_ms")
    if pattern == "bulk":
        if out["duration_ms"] is None or out["messages"] is not None:
            raise ConfigError("duration_ms: pattern \"bulk\" takes duration_ms (and no messages)")
        if cfg.get("warmup"):
            raise ConfigError("warmup: not for pattern \"bulk\"")
    if pattern in ("ping", "ramp"):
        if out["messages"] is None:
            raise ConfigError(f"messages: missing; pattern \"{pattern}\" needs it")
        if out["duration_ms"] is not None:
            raise ConfigError(f"duration_ms: not for pattern \"{pattern}\"")
    rate = cfg.get("rate_msgs_per_s")
    if rate is not None and (pattern != "stream" or isinstance(rate, bool) or not isinstance(rate, (int, float))
                             or rate <= 0):
        raise ConfigError(f"rate_msgs_per_s: {rate!r}; expected a number > 0, for pattern stream only")
    out["interval_ns"] = _int(cfg, "interval_ns", 1)
    if out["interval_ns"] is not None and pattern in ("stream", "bulk"):
        raise ConfigError("interval_ns: for patterns ping and ramp only")
    out["step_bytes"] = _int(cfg, "step_bytes", 0)
    if (out["step_bytes"] is None) != (pattern != "ramp"):
        raise ConfigError("step_bytes: " + ("missing; pattern ramp needs it" if pattern == "ramp" else
                                            "for pattern ramp only"))
    if pattern == "ramp":
        last = out["payload_bytes"] + out["step_bytes"] * (out["messages"] - 1)
        if last > PAYLOAD_MAX:
            raise ConfigError(f"step_bytes: the last message would be {last} B; expected at most {PAYLOAD_MAX} B")
    out["warmup"] = _int(cfg, "warmup", 0) or 0
    out["timeout_ms"] = _int(cfg, "timeout_ms", 1) or 60000
    out["reply_timeout_ms"] = _int(cfg, "reply_timeout_ms", 1) or 1000
    out["linger_ms"] = _int(cfg, "linger_ms", 0)
    if out["linger_ms"] is None:
        out["linger_ms"] = 500
    out["report_interval_ms"] = _int(cfg, "report_interval_ms", 0)
    if out["report_interval_ms"] is None:
        out["report_interval_ms"] = 1000
    options = cfg.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError("options: expected an object of ros2 knobs")
    try:
        out["qos"] = qosmod.from_options(options)
    except qosmod.QosError as e:
        raise ConfigError(str(e)) from None
    topic = cfg.get("topic") or DEFAULT_TOPIC
    if not isinstance(topic, str) or not re.search(r"[A-Za-z0-9_]", topic):
        raise ConfigError(f"topic: {topic!r}; expected a name with at least one letter, digit or underscore")
    out["base"] = ros_name(topic)
    check_names(out)
    out["service"] = options.get("request_reply", "topics") == "service"
    if out["service"] and pattern not in ("ping", "ramp"):
        raise ConfigError(f"options.request_reply: \"service\" is for patterns ping and ramp, not {pattern!r}")
    out["trace"] = None
    if tp is not None:  # created (or truncated) now, so that a path we cannot write is a configuration error
        try:
            out["trace"] = tracemod.Trace(tp, tracemod.TX if role == "sender" else tracemod.RX)
        except OSError as e:
            raise ConfigError(f"trace_path: {tp!r}: cannot create it ({e.strerror})") from None
    return out


def check_names(cfg: dict[str, Any]) -> None:
    """Every ROS name the run creates passes rclpy's own validation (length above all: 255 - 8 characters);
    ConfigError naming ``topic`` otherwise.  Without rclpy (the spec's checks) nothing is checked here."""
    try:
        from rclpy.exceptions import InvalidTopicNameException
        from rclpy.validate_full_topic_name import validate_full_topic_name
    except ImportError:
        return
    base = cfg["base"]
    keys = [addr_token(a) for a in (cfg.get("peers") or [cfg["listen"]])]
    names = [f"{base}/{w}" for w in ("data", "ping", "ready")]
    names += [f"{base}/pong/{k}" for k in keys] + [service_name(base, a) for a in (cfg.get("peers") or [cfg["listen"]])]
    for n in names:
        try:
            validate_full_topic_name(n)
        except InvalidTopicNameException as e:
            msg = str(e).splitlines()[0]
            raise ConfigError(f"topic: {cfg.get('topic')!r} gives the ROS 2 name {n[:60]!r}..., which ROS refuses "
                              f"({msg})") from None


# ---- the node ---------------------------------------------------------------------------------------------

_stop = False


def _on_signal(signum, frame) -> None:  # noqa: ARG001
    global _stop
    _stop = True


class Node:
    """rclpy, its node and executor, the run's QoS; one per process."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        os.environ["FASTDDS_BUILTIN_TRANSPORTS"] = "UDPv4"
        ips = [a.rsplit(":", 1)[0] for a in cfg.get("peers") or [cfg["listen"]]]
        if cfg.get("peers"):
            os.environ["ROS_STATIC_PEERS"] = ";".join(ips)
        if all(ip.startswith("127.") for ip in ips):  # on loopback: no multicast discovery onto the machine's networks
            os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
        from rclpy.signals import SignalHandlerOptions
        from std_msgs.msg import UInt8MultiArray

        self.rclpy = rclpy
        self.Bytes = UInt8MultiArray
        self.context = rclpy.Context()
        rclpy.init(context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        name = f"roughnet_{cfg['role']}_{os.getpid()}"
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.qos = qosmod.to_rclpy(cfg["qos"])
        self.ready_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                    durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.reliable = cfg["qos"].reliable

    def spin(self, timeout_s: float) -> None:
        self.executor.spin_once(timeout_sec=max(0.0, timeout_s))

    def close(self) -> None:
        try:
            self.executor.shutdown()
            self.node.destroy_node()
            self.rclpy.shutdown(context=self.context)
        except Exception:  # noqa: BLE001 (at exit, the result line is out already)
            pass


class Intervals:
    """``interval`` lines every ``report_interval_ms``."""

    def __init__(self, role: str, every_ms: int) -> None:
        self.role, self.every_ns = role, every_ms * 1_000_000
        self.t0 = now_ns()
        self.next = self.t0 + self.every_ns
        self.messages = self.bytes = 0

    def add(self, n_bytes: int) -> None:
        self.messages += 1
        self.bytes += n_bytes

    def tick(self, t: int) -> None:
        if self.every_ns and t >= self.next:
            span = (t - self.next + self.every_ns) / 1e9
            emit({"type": "interval", "role": self.role, "t_ms": (t - self.t0) // 1_000_000, "messages": self.messages,
                  "bytes": self.bytes, "rate_bps": self.bytes * 8 / span if span > 0 else 0.0})
            self.messages = self.bytes = 0
            self.next = t + self.every_ns


def sleep_until(node: Node | None, t_ns: int) -> None:
    """Sleep (spinning the node, if given) until ``t_ns``; the last 200 us busy-waiting."""
    while not _stop:
        left = t_ns - now_ns()
        if left <= 0:
            return
        if left > 2_000_000 and node is not None:
            node.spin(min(SPIN_S, (left - 1_000_000) / 1e9))
        elif left > 200_000:
            time.sleep((left - 200_000) / 1e9)


def _ready_topic(node: Node) -> str:
    return node.base + "/ready"


class ReadyLists:
    """The sender's side of the handshake: the lists of matched writers each peer published."""

    def __init__(self, node: Node) -> None:
        self.lists: dict[str, bytes] = {}

        def cb(raw: bytes, info) -> None:
            data = wire.from_cdr(raw)
            if data is not None:
                self.lists[repr(info.get("publisher_gid"))] = bytes(data)
        self.sub = node.node.create_subscription(node.Bytes, _ready_topic(node), cb, node.ready_qos, raw=True)

    def confirming(self, guid: bytes) -> int:
        return sum(any(lst[i:i + GUID_BYTES] == guid for i in range(0, len(lst) - GUID_BYTES + 1, GUID_BYTES))
                   for lst in self.lists.values())


class ReadyAnnouncer:
    """The receiver's side: publishes the GUIDs of the writers ``sub`` matched, whenever they change."""

    def __init__(self, node: Node, topic: str, sub) -> None:
        self.node, self.topic, self.sub = node, topic, sub
        self.pub = node.node.create_publisher(node.Bytes, _ready_topic(node), node.ready_qos)
        self.announced: bytes | None = None
        self.next_ns = 0

    def update(self, t: int, also=lambda: True) -> None:
        if t < self.next_ns:
            return
        self.next_ns = t + ANNOUNCE_EVERY_NS
        writers = self.node.node.get_publishers_info_by_topic(self.topic)
        if not writers or self.sub.get_publisher_count() < len(writers) or not also():
            return  # some writer the graph knows is not matched yet
        guids = b"".join(sorted(bytes(w.endpoint_gid[:GUID_BYTES]) for w in writers))
        if guids != self.announced:
            log.info("matched %d writer(s) of %s: %s", len(writers), self.topic,
                     " ".join(guids[i:i + GUID_BYTES].hex() for i in range(0, len(guids), GUID_BYTES)))
            self.pub.publish(wire.to_cdr(guids))
            self.announced = guids


def own_guid(node: Node, topic: str) -> bytes | None:
    """The GUID of this node's writer on ``topic`` (as the ROS graph lists it)."""
    me = node.node.get_name()
    for w in node.node.get_publishers_info_by_topic(topic):
        if w.node_name == me:
            return bytes(w.endpoint_gid[:GUID_BYTES])
    return None


def await_peers(node: Node, cfg: dict[str, Any], topic: str, matched, ready: ReadyLists, deadline_ns: int) -> None:
    """Until ``matched()`` (every reader of ours matched) and every peer listed our writer on ``topic``;
    2 s after the match without every confirmation (peers that are not roughnet) go ahead."""
    peers = len(cfg["peers"])
    matched_at = None
    seen = 0
    guid = None
    while not _stop:
        t = now_ns()
        guid = guid or own_guid(node, topic)
        if matched():
            matched_at = matched_at or t
            seen = ready.confirming(guid) if guid else 0
            if seen >= peers or t - matched_at > HANDSHAKE_GRACE_S * 1e9:
                late = " (no list from the others in time: not roughnet, or late); going ahead"
                log.info("%d of %d peers confirmed %s%s", seen, peers, topic, "" if seen >= peers else late)
                return
        if t > deadline_ns:
            raise IoError(f"waiting for the {peers} peer(s) of {topic} to match and confirm "
                          f"({seen} confirmed) until timeout_ms")
        node.spin(SPIN_S)


def publish(pub, raw: bytes, deadline_ns: int) -> bool:
    """Publish, waiting while a KEEP_ALL history is full: Fast DDS blocks a publish for the writer's
    max_blocking_time and then refuses it (rclpy raises RCLError "cannot publish data"); like the dds
    driver, try again until the run's timeout (IoError) or a signal (False; the message is not sent).
    The time counts as held in the schedule."""
    from rclpy._rclpy_pybind11 import RCLError

    while True:
        try:
            pub.publish(raw)
            return True
        except RCLError as e:
            if _stop:
                return False
            if now_ns() >= deadline_ns:
                raise IoError(f"publishing to {pub.topic_name}: {e} (history full until timeout_ms)") from None


def send_end(node: Node, pub, seq: int, deadline_ns: int) -> None:
    """The end marker (``seq`` = messages sent before it): once and wait for acknowledgements when
    reliable (until ``deadline_ns``, at least ACK_WAIT_S, or a signal), else END_COPIES copies END_GAP_S
    apart."""
    from rclpy.duration import Duration

    t = now_ns()
    raw = wire.to_cdr(wire.message(wire.FLAG_END, seq, t, t, wire.HEADER_LEN))
    if node.reliable:
        if not publish(pub, raw, deadline_ns):
            return
        until = max(deadline_ns, t + int(ACK_WAIT_S * 1e9))
        acked = False
        while not acked and not _stop and now_ns() < until:
            acked = pub.wait_for_all_acked(Duration(nanoseconds=int(ACK_POLL_S * 1e9)))
        log.info("end marker: %s after %.3f s", "all acknowledged" if acked else "gave up waiting for acknowledgements",
                 (now_ns() - t) / 1e9)
    else:
        for i in range(END_COPIES):
            pub.publish(raw)
            if i + 1 < END_COPIES:
                time.sleep(END_GAP_S)


# ---- stream -----------------------------------------------------------------------------------------------

def run_sender(node: Node, cfg: dict[str, Any]) -> dict[str, Any]:
    trace = cfg["trace"]
    deadline = now_ns() + cfg["timeout_ms"] * 1_000_000
    topic = node.base + "/data"
    pub = node.node.create_publisher(node.Bytes, topic, node.qos)
    ready = ReadyLists(node)
    await_peers(node, cfg, topic, lambda: pub.get_subscription_count() >= len(cfg["peers"]), ready, deadline)
    size, warmup = cfg["payload_bytes"], cfg["warmup"]
    rate = cfg.get("rate_msgs_per_s")
    period_ns = int(1e9 / rate) if rate else 0
    total = None if cfg["messages"] is None else cfg["messages"] + warmup
    stop_at = None if cfg["duration_ms"] is None else None
    sched = wire.Schedule()
    iv = Intervals("sender", cfg["report_interval_ms"])
    buf = bytearray(wire.to_cdr(bytes(size)))
    off = wire.CDR_OVERHEAD
    start = now_ns()
    if cfg["duration_ms"] is not None:
        stop_at = start + (warmup * period_ns) + cfg["duration_ms"] * 1_000_000
    seq = sent = 0
    first = last = None
    prev_return = start
    end_reason = "complete"
    while True:
        if total is not None and seq >= total:
            break
        intended = start + seq * period_ns if period_ns else now_ns()
        if stop_at is not None and intended >= stop_at and seq >= warmup:
            break
        if period_ns:
            sleep_until(None, intended)
        if _stop:
            end_reason = "signal"
            break
        actual = now_ns()
        if actual > deadline:
            end_reason = "timeout"
            break
        counted = seq >= warmup
        wire.HEADER.pack_into(buf, off, wire.MAGIC, 0 if counted else wire.FLAG_WARMUP, wire.HEADER_LEN, seq,
                              intended if period_ns else actual, actual)
        if not publish(pub, bytes(buf), deadline):
            end_reason = "signal"
            break
        if counted:
            sched.record(intended if period_ns else actual, actual, prev_return)
            sent += 1
            first = first if first is not None else actual
            last = actual
            iv.add(size)
            if trace is not None:
                trace.add(seq, intended if period_ns else actual, actual)
        prev_return = now_ns()
        iv.tick(prev_return)
        if trace is not None:
            trace.tick(prev_return)
        seq += 1
    t_end = now_ns()
    traced = trace.close() if trace is not None else {}
    send_end(node, pub, seq, deadline)
    finish_s = (now_ns() - t_end) / 1e9
    dur = (last - first) / 1e9 if first is not None and last is not None and last > first else 0.0
    return {"type": "result", "role": "sender", "pattern": cfg["pattern"], "protocol": "ros2",
            "end_reason": end_reason, "sent": sent, "warmup_sent": min(seq, warmup), "peers": len(cfg["peers"]), "bytes": sent * size,
            "duration_s": dur, "throughput_bps": sent * size * 8 / dur if dur else 0.0, "finish_s": finish_s,
            "send_errors": 0, "schedule": sched.result(), "qos": cfg["qos"].describe(), "cpu": wire.cpu(), **traced}


def run_receiver(node: Node, cfg: dict[str, Any]) -> dict[str, Any]:
    warmup = cfg["warmup"]
    trace = cfg["trace"]
    st = {"received": 0, "dup": 0, "reord": 0, "warm": 0, "bad": 0, "bytes": 0, "max": -1, "first": None,
          "last": None, "end_at": None, "expected": cfg["messages"]}
    seqs: set[int] = set()
    lat_i: list[int] = []
    lat_a: list[int] = []
    iv = Intervals("receiver", cfg["report_interval_ms"])

    def cb(raw: bytes) -> None:
        t = now_ns()
        data = wire.from_cdr(raw)
        h = wire.parse(data) if data is not None else None
        if h is None:
            st["bad"] += 1
            return
        if h.flags & wire.FLAG_END:
            if st["expected"] is None:
                st["expected"] = max(0, h.seq - warmup)
            st["end_at"] = st["end_at"] or t
            return
        if h.flags & wire.FLAG_WARMUP:
            st["warm"] += 1
            return
        if trace is not None:
            trace.add(h.seq, h.intended_ns, h.actual_ns, t)
        if h.seq in seqs:
            st["dup"] += 1
            return
        if h.seq < st["max"]:
            st["reord"] += 1
        st["max"] = max(st["max"], h.seq)
        seqs.add(h.seq)
        st["received"] += 1
        st["bytes"] += len(data)
        st["first"] = st["first"] or t
        st["last"] = t
        lat_i.append(t - h.intended_ns)
        lat_a.append(t - h.actual_ns)
        iv.add(len(data))

    sub = node.node.create_subscription(node.Bytes, node.base + "/data", cb, node.qos, raw=True)
    announcer = ReadyAnnouncer(node, node.base + "/data", sub)
    emit({"type": "ready", "role": "receiver", "listen": cfg["listen"]})
    deadline = now_ns() + cfg["timeout_ms"] * 1_000_000
    end_reason = "timeout"
    while True:
        t = now_ns()
        if _stop:
            end_reason = "signal"
            break
        announcer.update(t)
        if trace is not None:
            trace.tick(t)
        exp = st["expected"]
        if exp is not None and st["received"] >= exp:
            end_reason = "complete"
            break
        if st["end_at"] is not None and t - st["end_at"] >= cfg["linger_ms"] * 1_000_000:
            end_reason = "end_marker"
            break
        if t >= deadline:
            break
        iv.tick(t)
        node.spin(SPIN_S)
    exp = st["expected"]
    rec = st["received"]
    lost = (exp - rec) if exp is not None else max(0, st["max"] + 1 - warmup - rec)
    dur = (st["last"] - st["first"]) / 1e9 if st["first"] is not None and st["last"] > st["first"] else 0.0
    return {"type": "result", "role": "receiver", "pattern": cfg["pattern"], "protocol": "ros2",
            "end_reason": end_reason, **({"sent": exp} if cfg["pattern"] == "bulk" else {}), "expected": exp, "received": rec, "lost": max(0, lost), "duplicates": st["dup"],
            "reordered": st["reord"], "warmup_received": st["warm"], "bytes": st["bytes"], "duration_s": dur,
            "throughput_bps": st["bytes"] * 8 / dur if dur else 0.0, "complete": exp is not None and rec >= exp,
            "latency_intended": wire.latency_object(lat_i), "latency_actual": wire.latency_object(lat_a),
            "bad_messages": st["bad"], "cpu": wire.cpu(), **(trace.close() if trace is not None else {})}


# ---- ping, ramp -------------------------------------------------------------------------------------------

class Replies:
    """What a pinger counts of its replies, the same over topics and over services: one reply per
    (sequence, ponger), duplicates, reordering, malformed replies, both round-trip times, the ramp's
    points and the interval reports."""

    def __init__(self, cfg: dict[str, Any], n_peers: int) -> None:
        self.pattern = cfg["pattern"]
        self.n_peers = n_peers
        self.st = {"received": 0, "dup": 0, "reord": 0, "bad": 0}
        self.got: dict[int, set[int]] = {}  # seq -> pongers that replied
        self.maxseq = [-1] * n_peers
        self.rtt_i: list[int] = []
        self.rtt_a: list[int] = []
        self.points: list[list[float]] = []
        self.iv = Intervals("pinger", cfg["report_interval_ms"])

    def bad(self) -> None:
        self.st["bad"] += 1

    def add(self, k: int, t: int, data: bytes | None) -> None:
        """Ponger k's reply ``data`` (None: not a message), arrived at t."""
        h = wire.parse(data) if data is not None else None
        if h is None or not h.flags & wire.FLAG_REPLY:
            self.st["bad"] += 1
            return
        peers_of = self.got.setdefault(h.seq, set())
        if k in peers_of:
            self.st["dup"] += 1
            return
        peers_of.add(k)
        if h.flags & wire.FLAG_WARMUP:
            return
        if h.seq < self.maxseq[k]:
            self.st["reord"] += 1
        self.maxseq[k] = max(self.maxseq[k], h.seq)
        self.st["received"] += 1
        self.rtt_i.append(t - h.intended_ns)
        self.rtt_a.append(t - h.actual_ns)
        if self.pattern == "ramp":
            self.points.append([len(data), (t - h.actual_ns) / 1e3])
        self.iv.add(len(data))

    def complete(self, seq: int) -> bool:
        return len(self.got.get(seq, ())) >= self.n_peers

    def result(self, end_reason: str, sent: int, warmup_sent: int, sched: wire.Schedule) -> dict[str, Any]:
        st = self.st
        return {"type": "result", "role": "pinger", "pattern": self.pattern, "protocol": "ros2",
                "end_reason": end_reason, "peers": self.n_peers, "sent": sent, "warmup_sent": warmup_sent,
                "received": st["received"], "lost": max(0, sent * self.n_peers - st["received"]),
                "duplicates": st["dup"], "reordered": st["reord"], "bad_messages": st["bad"], "send_errors": 0,
                "rtt_intended": wire.latency_object(self.rtt_i), "rtt_actual": wire.latency_object(self.rtt_a),
                "schedule": sched.result(), "cpu": wire.cpu(),
                **({"points": self.points} if self.pattern == "ramp" else {})}


def ping_loop(node: Node, cfg: dict[str, Any], replies: Replies, send, deadline: int) -> tuple[str, int, int, Any]:
    """The pinger's requests (paced, or closed loop when there is no interval), then the wait for the
    last replies.  ``send(message)`` sends one request to every ponger and says False when the run
    must stop.  Returns the end reason, the counted requests sent, the total sequence numbers used and
    the schedule."""
    pattern = cfg["pattern"]
    warmup = cfg["warmup"]
    interval = cfg["interval_ns"]
    reply_ns = cfg["reply_timeout_ms"] * 1_000_000
    sched = wire.Schedule()
    total = warmup + cfg["messages"]
    start = now_ns()
    prev_return = start
    sent = 0
    end_reason = "complete"
    for seq in range(total):
        counted = seq >= warmup
        size = cfg["payload_bytes"] + (cfg["step_bytes"] * (seq - warmup) if pattern == "ramp" and counted else 0)
        intended = start + seq * interval if interval else now_ns()
        if interval:
            sleep_until(node, intended)
        if _stop:
            end_reason = "signal"
            break
        actual = now_ns()
        if actual > deadline:
            end_reason = "timeout"
            break
        msg = wire.message(0 if counted else wire.FLAG_WARMUP, seq, intended if interval else actual, actual, size)
        if not send(msg):
            end_reason = "signal"
            break
        if counted:
            sched.record(intended if interval else actual, actual, prev_return)
            sent += 1
        prev_return = now_ns()
        replies.iv.tick(prev_return)
        if not interval:  # closed loop: the next request after every reply, or after reply_timeout_ms
            until = actual + reply_ns
            while not _stop and not replies.complete(seq) and now_ns() < until:
                node.spin(min(SPIN_S, (until - now_ns()) / 1e9))
    until = now_ns() + reply_ns
    while not _stop and now_ns() < until and not all(replies.complete(s) for s in range(warmup, total)):
        node.spin(min(SPIN_S, (until - now_ns()) / 1e9))
    return end_reason, sent, total, sched


def run_pinger(node: Node, cfg: dict[str, Any]) -> dict[str, Any]:
    deadline = now_ns() + cfg["timeout_ms"] * 1_000_000
    peers = cfg["peers"]
    pub = node.node.create_publisher(node.Bytes, node.base + "/ping", node.qos)
    ready = ReadyLists(node)
    replies = Replies(cfg, len(peers))

    def on_reply(k: int):
        def cb(raw: bytes) -> None:
            t = now_ns()
            replies.add(k, t, wire.from_cdr(raw))
        return cb

    subs = [node.node.create_subscription(node.Bytes, f"{node.base}/pong/{addr_token(p)}", on_reply(k), node.qos,
                                          raw=True) for k, p in enumerate(peers)]  # fmt: skip
    await_peers(node, cfg, node.base + "/ping", lambda: pub.get_subscription_count() >= len(peers)
                and all(s.get_publisher_count() >= 1 for s in subs), ready, deadline)
    end_reason, sent, total, sched = ping_loop(
        node, cfg, replies, lambda msg: publish(pub, wire.to_cdr(msg), deadline), deadline)
    send_end(node, pub, total, deadline)
    return replies.result(end_reason, sent, min(cfg["warmup"], total), sched)


def run_ponger(node: Node, cfg: dict[str, Any]) -> dict[str, Any]:
    st = {"received": 0, "warm": 0, "bytes": 0, "errors": 0, "bad": 0, "end": False}
    pong = node.node.create_publisher(node.Bytes, f"{node.base}/pong/{addr_token(cfg['listen'])}", node.qos)

    def cb(raw: bytes) -> None:
        data = wire.from_cdr(raw)
        h = wire.parse(data) if data is not None else None
        if h is None or h.flags & wire.FLAG_REPLY:
            st["bad"] += 1
            return
        if h.flags & wire.FLAG_END:
            st["end"] = True
            return
        reply = bytearray(data)
        wire.HEADER.pack_into(reply, 0, wire.MAGIC, h.flags | wire.FLAG_REPLY, wire.HEADER_LEN, h.seq,
                              h.intended_ns, h.actual_ns)
        try:
            pong.publish(wire.to_cdr(reply))
        except Exception:  # noqa: BLE001 (counted: an rmw error on one reply does not end the run)
            st["errors"] += 1
        if h.flags & wire.FLAG_WARMUP:
            st["warm"] += 1
        else:
            st["received"] += 1
            st["bytes"] += len(data)

    sub = node.node.create_subscription(node.Bytes, node.base + "/ping", cb, node.qos, raw=True)
    announcer = ReadyAnnouncer(node, node.base + "/ping", sub)
    emit({"type": "ready", "role": "ponger", "listen": cfg["listen"]})
    deadline = now_ns() + cfg["timeout_ms"] * 1_000_000
    end_reason = "timeout"
    while True:
        if _stop:
            end_reason = "signal"
            break
        if st["end"]:
            end_reason = "end_marker"
            break
        announcer.update(now_ns(), lambda: pong.get_subscription_count() >= 1)
        if now_ns() >= deadline:
            break
        node.spin(SPIN_S)
    if node.reliable:
        from rclpy.duration import Duration

        pong.wait_for_all_acked(Duration(seconds=1))
    return {"type": "result", "role": "ponger", "pattern": cfg["pattern"], "protocol": "ros2",
            "end_reason": end_reason, "received": st["received"], "warmup_received": st["warm"],
            "bytes": st["bytes"], "reply_errors": st["errors"], "bad_messages": st["bad"], "cpu": wire.cpu()}


# ---- ping, ramp as a ROS 2 service ------------------------------------------------------------------------

def service_name(base: str, listen: str) -> str:
    """Each ponger's service: ``<base>/service/<key>`` (DDS: ``rq/<base>/service/<key>Request``, ``rr/...Reply``)."""
    return f"{base}/service/{addr_token(listen)}"


def _service_type(node: Node):
    from . import typegen

    if not typegen.installed():
        raise IoError("options.request_reply = \"service\" needs roughnet_msgs/srv/Bytes: build it with make extras "
                      "(python -m roughnet.ros2.typegen)")
    return typegen.load()


def run_service_pinger(node: Node, cfg: dict[str, Any]) -> dict[str, Any]:
    """Ping/ramp as ROS 2 service calls: one client per ponger, each request a call (the message in
    ``data``), each response the ponger's reply.  Same measurements and result as over topics."""
    Bytes = _service_type(node)
    deadline = now_ns() + cfg["timeout_ms"] * 1_000_000
    peers = cfg["peers"]
    clients = [node.node.create_client(Bytes, service_name(node.base, p), qos_profile=node.qos) for p in peers]
    replies = Replies(cfg, len(peers))

    def on_reply(k: int):
        def cb(fut) -> None:
            t = now_ns()
            try:
                data = bytes(fut.result().data)
            except Exception:  # noqa: BLE001 (a failed call: counted as bad)
                replies.bad()
                return
            replies.add(k, t, data)
        return cb

    while not all(c.service_is_ready() for c in clients):
        if _stop:
            break
        if now_ns() > deadline:
            raise IoError(f"waiting for the {len(peers)} service(s) {service_name(node.base, peers[0])}... "
                          "until timeout_ms")
        node.spin(SPIN_S)
    # A matched server may not have matched our reply reader yet (rmw_fastrtps answers only known clients):
    # the same grace as the topics' handshake gives a non-roughnet peer.
    settle = now_ns() + int(0.5e9)
    while not _stop and now_ns() < settle:
        node.spin(SPIN_S)
    cbs = [on_reply(k) for k in range(len(peers))]

    def send(msg: bytes) -> bool:
        for k, c in enumerate(clients):
            c.call_async(Bytes.Request(data=msg)).add_done_callback(cbs[k])
        return True

    end_reason, sent, total, sched = ping_loop(node, cfg, replies, send, deadline)
    end_service_calls(node, clients, Bytes, total, cfg["reply_timeout_ms"] * 1_000_000, deadline)
    return replies.result(end_reason, sent, min(cfg["warmup"], total), sched)


def end_service_calls(node: Node, clients: list, Bytes, total: int, reply_ns: int, deadline_ns: int) -> None:
    """The end marker as a call to each ponger (its response is not counted): the ponger ends its run on it.
    As the topics' reliable end marker waits for its acknowledgement, this waits for each ponger's response
    until the run's deadline (at least ``reply_ns``), calling again every ``reply_ns`` the pongers that have
    not answered: a call is not repaired once its client is gone, so a lost end request left the ponger
    waiting for its own timeout.  The ponger takes a second end marker as the first."""
    t0 = now_ns()
    until = max(deadline_ns, t0 + reply_ns)
    futures: list[list] = [[] for _ in clients]  # each ponger's end calls (any answered will do)
    last = [0] * len(clients)  # when each was last called
    while not _stop:
        t = now_ns()
        done = [any(f.done() for f in fs) for fs in futures]
        if all(done) or t >= until:
            break
        for k, c in enumerate(clients):
            if not done[k] and (not futures[k] or t - last[k] >= reply_ns):
                msg = wire.message(wire.FLAG_END, total, t, t, wire.HEADER_LEN)
                futures[k].append(c.call_async(Bytes.Request(data=msg)))
                last[k] = t
        node.spin(SPIN_S)
    answered = sum(any(f.done() for f in fs) for fs in futures)
    calls = sum(len(fs) for fs in futures)
    log.info("end marker: %d of %d ponger(s) answered after %.3f s (%d call(s))", answered, len(clients),
             (now_ns() - t0) / 1e9, calls)


def run_service_ponger(node: Node, cfg: dict[str, Any]) -> dict[str, Any]:
    """The ponger as a ROS 2 service server: answers each call with the request's message flagged as a reply."""
    Bytes = _service_type(node)
    st = {"received": 0, "warm": 0, "bytes": 0, "bad": 0, "end": None}

    def cb(req, resp):
        data = bytes(req.data)
        h = wire.parse(data)
        if h is None or h.flags & wire.FLAG_REPLY:
            st["bad"] += 1
            return resp
        if h.flags & wire.FLAG_END:
            st["end"] = st["end"] or now_ns()
            resp.data = data
            return resp
        reply = bytearray(data)
        wire.HEADER.pack_into(reply, 0, wire.MAGIC, h.flags | wire.FLAG_REPLY, wire.HEADER_LEN, h.seq,
                              h.intended_ns, h.actual_ns)
        resp.data = bytes(reply)
        if h.flags & wire.FLAG_WARMUP:
            st["warm"] += 1
        else:
            st["received"] += 1
            st["bytes"] += len(data)
        return resp

    srv = node.node.create_service(Bytes, service_name(node.base, cfg["listen"]), cb, qos_profile=node.qos)
    emit({"type": "ready", "role": "ponger", "listen": cfg["listen"]})
    deadline = now_ns() + cfg["timeout_ms"] * 1_000_000
    end_reason = "timeout"
    while True:
        if _stop:
            end_reason = "signal"
            break
        # After the end marker's call, a moment for its response to leave.
        if st["end"] is not None and now_ns() - st["end"] >= cfg["linger_ms"] * 1_000_000:
            end_reason = "end_marker"
            break
        if now_ns() >= deadline:
            break
        node.spin(SPIN_S)
    node.node.destroy_service(srv)
    return {"type": "result", "role": "ponger", "pattern": cfg["pattern"], "protocol": "ros2",
            "end_reason": end_reason, "received": st["received"], "warmup_received": st["warm"],
            "bytes": st["bytes"], "reply_errors": 0, "bad_messages": st["bad"], "cpu": wire.cpu()}


ROLE_RUN = {"sender": run_sender, "receiver": run_receiver, "pinger": run_pinger, "ponger": run_ponger}
SERVICE_RUN = {"pinger": run_service_pinger, "ponger": run_service_ponger}


def run(cfg: dict[str, Any]) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    node = Node(cfg)
    node.base = cfg["base"]
    try:
        emit((SERVICE_RUN if cfg["service"] else ROLE_RUN)[cfg["role"]](node, cfg))
        return 0
    except IoError as e:
        emit({"type": "error", "kind": "io", "message": str(e)})
        return 1
    finally:
        node.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="roughnet-ros2-endpoint", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("version")
    r = sub.add_parser("run")
    g = r.add_mutually_exclusive_group(required=True)
    g.add_argument("--config")
    g.add_argument("--config-json")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if args.command == "version":
        emit({"type": "version", "agent": f"roughnet-ros2-endpoint {VERSION}", "protocols": ["ros2"],
              "patterns": list(PATTERNS), "message_type": wire.MSG_TYPE})
        return 0
    try:
        if args.config_json is not None:
            raw = args.config_json
        elif args.config == "-":
            raw = sys.stdin.read()
        else:
            with open(args.config, encoding="utf-8") as f:
                raw = f.read()
        try:
            cfg = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ConfigError(f"configuration: not JSON ({e})") from None
        cfg = check_config(cfg)
    except (ConfigError, OSError) as e:
        emit({"type": "error", "kind": "config", "message": str(e)})
        return 2
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
