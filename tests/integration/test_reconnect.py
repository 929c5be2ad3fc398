"""The brokered drivers' `reconnect` knob: a sender and a receiver survive their broker's death.

A broker started here on 127.0.0.1 (a free port; ended by PID, never by name) carries a
stream of 100 msg/s for 6 s between a receiver and a sender agent, both with
``reconnect = true``.  Two seconds in, the broker is SIGKILLed and, a second later,
started again on the same port.  Both agents must end with a result line (not an
error), count at least one reconnect and some disconnected time, and the receiver's
trace (``trace_path``) must hold messages sent after the restart.  Loopback only, so no
root is needed.  Skips with a reason when the broker or the agent binary is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from interop import AGENT, agent_marks, find_program, free_port

MOSQUITTO = find_program("mosquitto")
NATS_SERVER = find_program("nats-server")

RATE = 100
DURATION_MS = 6000
KILL_AFTER_S = 2.0
DOWN_S = 1.0
RX_RECORD = struct.Struct("<QQQQ")  # seq, intended_ns, actual_ns, recv_ns (crate::trace)

pytestmark = agent_marks()


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def wait_listening(port: int, p: subprocess.Popen, log: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert p.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"the broker did not listen: {log.read_text()[-2000:]}"
            time.sleep(0.02)


class Broker:
    """A broker process started from ``argv`` (its output appended to ``log``), restartable."""

    def __init__(self, argv: list[str], port: int, log: Path) -> None:
        self.argv, self.port, self.log = argv, port, log
        self.p: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.p = subprocess.Popen(self.argv, stdout=out, stderr=out)
        wait_listening(self.port, self.p, self.log)

    def kill(self) -> None:
        assert self.p is not None
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(timeout=10)

    def stop(self) -> None:
        if self.p is not None and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


@contextmanager
def running(broker: Broker) -> Iterator[Broker]:
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def config(role: str, protocol: str, address: str, topic: str, options: dict, duration_ms: int = DURATION_MS,
           **extra: object) -> str:
    cfg = {"v": 1, "role": role, "protocol": protocol, "pattern": "stream", "broker": address, "topic": topic,
           "payload_bytes": 64, "duration_ms": duration_ms, "rate_msgs_per_s": RATE,
           "timeout_ms": duration_ms + 40000, "report_interval_ms": 0, "options": {"reconnect": True, **options}}
    cfg.update(extra)
    return json.dumps(cfg)


def result_of(p: subprocess.Popen, name: str, timeout_s: float = 90) -> dict:
    out, err = p.communicate(timeout=timeout_s)
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert p.returncode == 0, f"{name} failed ({p.returncode}): {lines} {err[-3000:]}"
    return next(x for x in lines if x["type"] == "result")


def outage(broker: Broker, protocol: str, topic: str, options: dict, tmp: Path,
           before_sender: Callable[[], None] | None = None, duration_ms: int = DURATION_MS,
           kill_after_s: float = KILL_AFTER_S) -> tuple[dict, dict, list[tuple[int, int, int, int]], int]:
    """Receiver and sender through ``broker`` with a SIGKILL and a restart mid-stream: (sender result,
    receiver result, receiver trace records, monotonic ns when the broker listened again)."""
    address = f"127.0.0.1:{broker.port}"
    trace = tmp / f"{protocol}-rx.trace"
    procs: list[subprocess.Popen] = []
    try:
        rx = subprocess.Popen([str(AGENT), "run", "--config-json",
                               config("receiver", protocol, address, topic, options, duration_ms,
                                      trace_path=str(trace))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(rx)
        assert rx.stdout is not None
        ready = json.loads(rx.stdout.readline() or "{}")
        assert ready.get("type") == "ready", (ready, rx.stderr.read() if rx.poll() is not None else "")
        if before_sender is not None:
            before_sender()
        tx = subprocess.Popen([str(AGENT), "run", "--config-json",
                               config("sender", protocol, address, topic, options, duration_ms)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(tx)
        time.sleep(kill_after_s)
        broker.kill()
        time.sleep(DOWN_S)
        broker.start()
        back_ns = now_ns()
        tx_res = result_of(tx, "sender")
        rx_res = result_of(rx, "receiver")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    data = trace.read_bytes()
    records = [RX_RECORD.unpack_from(data, i) for i in range(0, len(data) - len(data) % RX_RECORD.size, RX_RECORD.size)]
    return tx_res, rx_res, records, back_ns


def check_survived(tx: dict, rx: dict, records: list[tuple[int, int, int, int]], back_ns: int,
                   duration_ms: int = DURATION_MS, stamped_after: bool = True) -> None:
    """Both results count a reconnect, and messages reached the receiver after the restart: messages
    the sender stamped after it (``stamped_after``), or else any received after it."""
    for name, res in (("sender", tx), ("receiver", rx)):
        assert res["reconnects"] >= 1, (name, res)
        assert res["disconnected_s"] > 0, (name, res)
    assert tx["end_reason"] == "complete", tx
    assert tx["sent"] > RATE * duration_ms / 1000 * 0.8, tx
    # Messages the sender stamped (or the receiver got) after the broker listened again.
    after = [r for r in records if (r[2] if stamped_after else r[3]) > back_ns]
    assert len(after) > RATE * 1, (len(after), len(records), rx)
    assert rx["received"] == len(records) - rx["duplicates"], rx


# ---- mqtt ---------------------------------------------------------------------------------


def mosquitto(tmp: Path, persistence: bool) -> Broker:
    port = free_port()
    conf = tmp / "mosquitto.conf"
    lines = [f"listener {port} 127.0.0.1", "allow_anonymous true"]
    if os.geteuid() == 0:
        lines.append("user root")  # else mosquitto drops to its own user and cannot write tmp (root's)
    if persistence:
        data = tmp / "data"
        data.mkdir()
        lines += ["persistence true", f"persistence_location {data}/", "autosave_interval 1"]
    else:
        lines.append("persistence false")
    conf.write_text("\n".join(lines) + "\n")
    return Broker([MOSQUITTO or "mosquitto", "-c", str(conf)], port, tmp / "log")


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)")
@pytest.mark.parametrize(("version", "qos"), [("3.1.1", 1), ("5", 1), ("3.1.1", 0)])
def test_mqtt_clean_session_survives_a_broker_kill(tmp_path: Path, version: str, qos: int) -> None:
    with running(mosquitto(tmp_path, persistence=False)) as broker:
        tx, rx, records, back = outage(broker, "mqtt", f"rn/reconnect/{version}/{qos}",
                                       {"version": version, "qos": qos}, tmp_path)
    check_survived(tx, rx, records, back)


@pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)")
def test_mqtt_persistent_session_resumes_after_a_broker_kill(tmp_path: Path) -> None:
    """clean_session = false and mosquitto persistence: the subscription outlives the broker
    (the receiver is not subscribed again, yet gets messages sent after the restart)."""
    with running(mosquitto(tmp_path, persistence=True)) as broker:
        # Let mosquitto save the receiver's session (autosave_interval 1) before it is killed.
        tx, rx, records, back = outage(broker, "mqtt", "rn/reconnect/persistent",
                                       {"qos": 1, "clean_session": False}, tmp_path,
                                       before_sender=lambda: time.sleep(1.5))
    check_survived(tx, rx, records, back)
    # The broker kept the receiver's queue and the sender's unacknowledged messages: QoS 1
    # loses nothing (duplicates allowed).
    assert tx["abandoned"] == 0, tx
    assert rx["lost"] == 0 and rx["complete"], rx


# ---- nats ---------------------------------------------------------------------------------


@pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed (apt-get install nats-server)")
def test_nats_survives_a_server_kill(tmp_path: Path) -> None:
    port = free_port()
    server = Broker([NATS_SERVER or "nats-server", "-a", "127.0.0.1", "-p", str(port)], port, tmp_path / "log")
    with running(server):
        tx, rx, records, back = outage(server, "nats", "rn.reconnect", {}, tmp_path)
    check_survived(tx, rx, records, back)


# ---- kafka --------------------------------------------------------------------------------

KAFKA_LIBS = Path(os.environ.get("ROUGHNET_KAFKA_LIBS", "/var/cache/roughnet/kafka-4.3.1/libs"))
HAS_KAFKA = KAFKA_LIBS.is_dir() and any(p.name.startswith("kafka_2.13") for p in KAFKA_LIBS.iterdir())
KAFKA_DURATION_MS = 15000


@pytest.mark.skipif(shutil.which("java") is None or not HAS_KAFKA,
                    reason=f"java or the Kafka jars ({KAFKA_LIBS}; set ROUGHNET_KAFKA_LIBS) are missing")
def test_kafka_survives_a_broker_kill(tmp_path: Path) -> None:
    """Single-node KRaft Kafka (as test_interop_kafka.py starts it), SIGKILLed 4 s in and started
    again on the same data: librdkafka reconnects, the producer retries what was not acknowledged."""
    port, cport = free_port(), free_port()
    conf = tmp_path / "server.properties"
    conf.write_text("\n".join([
        "process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{cport}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", f"log.dirs={tmp_path / 'data'}",
        "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false",
    ]) + "\n")
    cp = f"{KAFKA_LIBS}/*"
    subprocess.run(["java", "-Xmx256m", "-cp", cp, "kafka.tools.StorageTool", "format", "-t",
                    "rnReconnectCluster0000", "-c", str(conf)], check=True, capture_output=True, timeout=120)
    kafka = Broker(["java", "-Xmx512m", "-cp", cp, "kafka.Kafka", str(conf)], port, tmp_path / "log")
    with running(kafka):
        tx, rx, records, back = outage(kafka, "kafka", "roughnet/reconnect", {"linger": 0}, tmp_path,
                                       duration_ms=KAFKA_DURATION_MS, kill_after_s=4.0)
    # A JVM restart with log recovery can outlast the stream (librdkafka queues meanwhile): what
    # arrived after the restart is what counts.
    check_survived(tx, rx, records, back, KAFKA_DURATION_MS, stamped_after=False)
    # acks = "all" and librdkafka's endless retries: nothing is lost (duplicates are allowed).
    assert tx["unacked"] == 0 and tx["delivery_errors"] == 0, tx
    assert rx["lost"] == 0 and rx["complete"], rx


@pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed (apt-get install nats-server)")
def test_nats_jetstream_loses_nothing_across_a_server_kill(tmp_path: Path) -> None:
    """jetstream = true on a server with JetStream (-js, a store dir, as the nats service's
    jetstream = true starts it): the stream and the durable consumer outlive the restart."""
    port = free_port()
    server = Broker([NATS_SERVER or "nats-server", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd",
                     str(tmp_path / "js")], port, tmp_path / "log")
    with running(server):
        tx, rx, records, back = outage(server, "nats", "rn.reconnect.js", {"jetstream": True}, tmp_path)
    check_survived(tx, rx, records, back)
    assert tx["js_unacked"] == 0, tx
    assert rx["lost"] == 0 and rx["complete"], rx
