"""Config files and command lines of each managed service (pure: text and lists, no I/O).

Owns what roughnet asks of each broker: mosquitto.conf (one listener per
address of the broker host, anonymous clients, persistence, in-flight and
queue limits, optional TLS), Kafka's server.properties (single-node KRaft, one
listener per host address so each client is handed the address it can reach,
controller on the host's loopback) and its log4j2 config, the JVM and
StorageTool command lines, nats-server's and the Zenoh router's command lines.
``services.lifecycle`` writes these into the run's artifacts and starts them.
Defaults here mirror docs/protocols.md (Services).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
MOSQUITTO_TLS_PORT = 8883
KAFKA_CONTROLLER_PORT = 9093
KAFKA_CONTROLLER_HOST = "127.0.0.1"
#: Settings with no value in the [[service]] table take these (docs/protocols.md).
DEFAULTS: dict[str, dict[str, Any]] = {
    "mosquitto": {"persistence": False, "max_inflight": 20, "max_queued": 1000, "tls": False, "nodelay": False},
    "kafka": {"heap": 512 * MIB},
    "nats": {"jetstream": False},
    "zenoh-router": {},
}
#: Smallest heap Kafka 4.3 starts with here (it fails to allocate its buffers below this).
KAFKA_MIN_HEAP = 128 * MIB
#: JVM flags of Kafka's own kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS), minus GC logging.
KAFKA_JVM_FLAGS = (
    "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
)

#: JVM flags of the one-shot StorageTool: C1 only and the serial GC start it in ~0.95 s
#: instead of ~1.45 s here (measured 2026-11-22); it runs for a moment and exits.
KAFKA_TOOL_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")


def settings(kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """A service's settings: its defaults overridden by what the scenario gave."""
    out = dict(DEFAULTS.get(kind, {}))
    out.update(options)
    return out


# ---- mosquitto --------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path


def mosquitto_conf(addresses: Sequence[str], port: int, opts: Mapping[str, Any], data_dir: Path,
                   log_file: Path, tls: TlsFiles | None = None) -> str:
    """mosquitto.conf for mosquitto 2.0: one listener per address, logging to ``log_file``.

    A log file rather than stdout: mosquitto flushes its file after every line but
    leaves stdout block-buffered, so a pipe would hold the last lines back.
    """
    s = settings("mosquitto", opts)
    lines = [
        "# written by roughnet for one run; see docs/services.md",
        # Stay root: the run's artifacts (persistence, certificates) belong to root; the
        # broker lives in a namespace of ours either way.
        "user root",
        "per_listener_settings false",
        "allow_anonymous true",
        f"max_inflight_messages {int(s['max_inflight'])}",
        f"max_queued_messages {int(s['max_queued'])}",
        f"set_tcp_nodelay {'true' if s['nodelay'] else 'false'}",
        f"log_dest file {log_file}",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        "connection_messages true",
        "log_timestamp true",
        "log_timestamp_format %Y-%m-%dT%H:%M:%S",
    ]
    if s["persistence"]:
        lines += ["persistence true", f"persistence_location {data_dir}/", "autosave_interval 1"]
    else:
        lines.append("persistence false")
    for addr in addresses:
        lines.append("")
        lines.append(f"listener {port} {addr}")
        if tls is not None:
            lines += [f"cafile {tls.ca}", f"certfile {tls.cert}", f"keyfile {tls.key}", "tls_version tlsv1.2"]
    return "\n".join(lines) + "\n"


def mosquitto_argv(binary: str, conf: Path) -> list[str]:
    return [binary, "-c", str(conf)]


# ---- nats -------------------------------------------------------------------------------


def nats_argv(binary: str, addresses: Sequence[str], port: int, opts: Mapping[str, Any], data_dir: Path) -> list[str]:
    """nats-server binds one address: the host's only one, else every address of its namespace."""
    s = settings("nats", opts)
    bind = addresses[0] if len(addresses) == 1 else "0.0.0.0"
    argv = [binary, "-a", bind, "-p", str(port), "-n", "roughnet"]
    if s["jetstream"]:
        argv += ["-js", "-sd", str(data_dir)]
    return argv


# ---- zenoh router -----------------------------------------------------------------------


def zenoh_router_argv(agent: str, addresses: Sequence[str], port: int) -> list[str]:
    argv = [agent, "router"]
    for addr in addresses:
        argv += ["--listen", f"tcp/{addr}:{port}"]
    return argv


# ---- kafka ------------------------------------------------------------------------------


def kafka_cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes in URL-safe base64, as Kafka's Uuid.randomUuid() makes
    (which never starts with '-', since that would read as a command-line flag)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def kafka_listener_names(addresses: Sequence[str]) -> list[str]:
    return [f"RN{i}" for i in range(len(addresses))]


def kafka_listener_ports(addresses: Sequence[str], port: int) -> list[int]:
    """Port of each address's listener: ``port`` for the first, then port+2, port+3, ...

    Kafka refuses two IPv4 listeners on one port even on different addresses
    ("If you have two listeners on the same port then one needs to be IPv4 and
    the other IPv6"), and port+1 is the controller's.
    """
    return [port if i == 0 else port + 1 + i for i in range(len(addresses))]


#: The broker's largest record batch: the agent's largest Kafka message (8 MiB) plus 64 KiB of overhead.
KAFKA_MESSAGE_MAX_BYTES = (8 << 20) + (64 << 10)


def kafka_properties(addresses: Sequence[str], port: int, data_dir: Path) -> str:
    """server.properties of a single-node KRaft broker+controller.

    One listener per address (RN0, RN1, ...), each advertising its own
    address, so that a client reaching the broker over link i is told to use
    the address on link i; each on its own port (``kafka_listener_ports``).
    The controller listens on the host's loopback.
    """
    names = kafka_listener_names(addresses)
    ctrl = f"{KAFKA_CONTROLLER_HOST}:{KAFKA_CONTROLLER_PORT}"
    listeners = [f"{n}://{a}:{p}" for n, a, p in zip(names, addresses, kafka_listener_ports(addresses, port))]
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": ctrl,
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join([*listeners, f"CONTROLLER://{ctrl}"]),
        "advertised.listeners": ",".join(listeners),
        "inter.broker.listener.name": names[0],
        "listener.security.protocol.map": ",".join([*(f"{n}:PLAINTEXT" for n in names),
                                                    "CONTROLLER:PLAINTEXT"]),
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        # a single node: every internal topic has one replica
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # a consumer group of one must not wait 3 s for more members
        "group.initial.rebalance.delay.ms": "0",
        # record batches up to 8 MiB + 64 KiB (SEEDS S0 sends 1024 KB messages, past the default
        # 1048588); the agent's producer uses the same limit (crates/agent/src/drivers/kafka.rs)
        "message.max.bytes": str(KAFKA_MESSAGE_MAX_BYTES),
    }
    head = "# written by roughnet for one run; see docs/services.md\n"
    return head + "".join(f"{k}={v}\n" for k, v in props.items())


def kafka_log4j2() -> str:
    """log4j2 (YAML) config: INFO to stdout, which roughnet captures into artifacts/kafka.log."""
    return (
        "Configuration:\n"
        "  Appenders:\n"
        "    Console:\n"
        "      name: STDOUT\n"
        "      target: SYSTEM_OUT\n"
        "      PatternLayout:\n"
        "        pattern: \"[%d] %p %m (%c)%n\"\n"
        "  Loggers:\n"
        "    Root:\n"
        "      level: INFO\n"
        "      AppenderRef:\n"
        "        - ref: STDOUT\n"
        "    Logger:\n"
        "      - name: kafka.request.logger\n"
        "        level: WARN\n"
        "      - name: org.apache.kafka.controller\n"
        "        level: WARN\n"
    )


def kafka_java_argv(java: str, libs: Path, heap_bytes: int, log4j2: Path, main: str, *args: str,
                    jvm_flags: Sequence[str] = KAFKA_JVM_FLAGS) -> list[str]:
    heap_mib = max(int(heap_bytes) // MIB, 1)
    return [java, f"-Xms{heap_mib}m", f"-Xmx{heap_mib}m", *jvm_flags, f"-Dlog4j2.configurationFile={log4j2}",
            "-cp", f"{libs}/*", main, *args]


def kafka_format_args(cluster_id: str, properties: Path) -> list[str]:
    return ["format", "--standalone", "-t", cluster_id, "-c", str(properties)]
