"""Interop: roughnet-agent's Kafka driver against confluent-kafka (librdkafka's
Python client) and a single-node KRaft Apache Kafka started here.

The broker runs from the Kafka 4.3.1 jars ($ROUGHNET_KAFKA_LIBS, default
/var/cache/roughnet/kafka-4.3.1/libs) on 127.0.0.1 with free ports and a bounded
heap, and is ended by PID.  confluent-kafka's consumer sees the agent's
messages, and the agent's receiver (which creates the topic) counts what
confluent-kafka's producer sends.  Skips with a reason when java, the jars,
confluent-kafka or the agent binary is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interop import AGENT, FLAG_END, HEADER_LEN, agent_marks, decode, free_port, message, ready_agent

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install confluent-kafka)")
ck_admin = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka is not installed")

LIBS = Path(os.environ.get("ROUGHNET_KAFKA_LIBS", "/var/cache/roughnet/kafka-4.3.1/libs"))
HAS_JARS = LIBS.is_dir() and any(p.name.startswith("kafka_2.13") for p in LIBS.iterdir())
pytestmark = [
    *agent_marks(),
    pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed"),
    pytest.mark.skipif(not HAS_JARS, reason=f"no Kafka jars in {LIBS} (set ROUGHNET_KAFKA_LIBS)"),
]

PAYLOAD_BYTES = 64


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("kafka")
    port, cport = free_port(), free_port()
    conf = d / "server.properties"
    conf.write_text("\n".join([
        "process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{cport}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", f"log.dirs={d / 'data'}",
        "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false",
    ]) + "\n")
    cp = f"{LIBS}/*"
    subprocess.run(["java", "-Xmx256m", "-cp", cp, "kafka.tools.StorageTool", "format", "-t",
                    "rnInteropCluster000000", "-c", str(conf)], check=True, capture_output=True, timeout=120)
    with open(d / "log", "wb") as log:
        p = subprocess.Popen(["java", "-Xmx512m", "-cp", cp, "kafka.Kafka", str(conf)], stdout=log, stderr=log)
    try:
        # Ready when the admin API answers (a real protocol operation).
        admin = ck_admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        deadline = time.monotonic() + 90
        while True:
            assert p.poll() is None, (d / "log").read_text()[-3000:]
            try:
                admin.list_topics(timeout=2)
                break
            except ck.KafkaException:
                assert time.monotonic() < deadline, "kafka did not start"
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def agent_config(role: str, broker: str, topic: str, **extra: object) -> str:
    cfg = {"v": 1, "role": role, "protocol": "kafka", "pattern": "stream", "broker": broker, "topic": topic,
           "payload_bytes": PAYLOAD_BYTES, "messages": 100, "timeout_ms": 30000, "report_interval_ms": 0,
           "options": {"linger": 0}}
    cfg.update(extra)
    return json.dumps(cfg)


def test_confluent_kafka_consumes_the_agents_messages(broker: str) -> None:
    topic = "roughnet-interop-a"
    admin = ck_admin.AdminClient({"bootstrap.servers": broker})
    admin.create_topics([ck_admin.NewTopic(topic, 1, 1)])[topic].result(30)
    out = subprocess.run([str(AGENT), "run", "--config-json", agent_config("sender", broker, "roughnet/interop-a")],
                         capture_output=True, text=True, timeout=90, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    res = json.loads(out.stdout.splitlines()[-1])
    assert res["sent"] == 100 and res["ack_latency"]["count"] == 101, res
    c = ck.Consumer({"bootstrap.servers": broker, "group.id": "rn-interop", "auto.offset.reset": "earliest"})
    c.subscribe([topic])  # the agent mapped "roughnet/interop-a" to this name
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 101 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert len(got) == 101
    assert [decode(p)[1] for p in got[:100]] == list(range(100))
    assert decode(got[100]) == (FLAG_END, 100)


def test_the_agent_receives_confluent_kafkas_messages(broker: str) -> None:
    topic = "roughnet/interop-b"
    with ready_agent(agent_config("receiver", broker, topic)) as rx:
        p = ck.Producer({"bootstrap.servers": broker, "linger.ms": 0, "acks": "all"})
        for seq in range(100):
            p.produce("roughnet-interop-b", message(seq, size=PAYLOAD_BYTES, fill=b"\0"))
        p.produce("roughnet-interop-b", message(100, FLAG_END, HEADER_LEN))
        assert p.flush(30) == 0
        out, err = rx.communicate(timeout=60)
    assert rx.returncode == 0, err
    res = json.loads(out.splitlines()[-1])
    assert (res["received"], res["lost"], res["duplicates"], res["complete"]) == (100, 0, 0, True), res
