#!/usr/bin/env python3
"""roughnet-agent's Kafka driver against Kafka's own perf tools, on one broker.

- Produce throughput: the agent's stream sender (as fast as possible) against
  `org.apache.kafka.tools.ProducerPerformance`, same record count and size, same
  acks / linger / batch size, each to a fresh one-partition topic.  The agent's
  figure counts from its first send to its last acknowledgement (duration_s plus
  the largest ack latency, an upper bound), so it includes the final flush as
  ProducerPerformance's does.  Target: at least 0.9x.
- End-to-end latency: the agent's stream (sender and receiver, 200 msg/s so every
  message travels alone, linger 0, fetch wait 0) against
  `org.apache.kafka.tools.EndToEndLatency` (send one, wait until consumed, repeat;
  it also uses linger 0 and fetch wait 0).  EndToEndLatency prints percentiles in
  whole (truncated) milliseconds and the mean with decimals, so both are compared.
  Target: p50 within 1.10x.

The broker is a single-node KRaft Kafka started here on 127.0.0.1 from the jars
($ROUGHNET_KAFKA_LIBS, default /var/cache/roughnet/kafka-4.3.1/libs), or the one
given with --broker.  Rounds alternate which tool goes first.

Usage: python bench/kafka_bench.py [--rounds 3] [--records 200000] [--size 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from roughnet.binaries import require_binary  # noqa: E402

LIBS = Path(os.environ.get("ROUGHNET_KAFKA_LIBS", "/var/cache/roughnet/kafka-4.3.1/libs"))
CP = f"{LIBS}/*"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def kafka_broker() -> Iterator[str]:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import KafkaException

    with tempfile.TemporaryDirectory(prefix="rn-kafka-bench-") as d:
        port, cport = free_port(), free_port()
        conf = Path(d) / "server.properties"
        conf.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1", f"controller.quorum.voters=1@127.0.0.1:{cport}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", f"log.dirs={d}/data",
            "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0",
        ]) + "\n")
        subprocess.run(["java", "-Xmx256m", "-cp", CP, "kafka.tools.StorageTool", "format", "-t",
                        "rnBenchCluster00000000", "-c", str(conf)], check=True, capture_output=True)
        with open(Path(d) / "log", "wb") as log:
            p = subprocess.Popen(["java", "-Xmx512m", "-cp", CP, "kafka.Kafka", str(conf)], stdout=log, stderr=log)
        try:
            while True:  # listening first, so the admin client does not log refusals
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if p.poll() is not None:
                        raise RuntimeError("kafka exited: " + (Path(d) / "log").read_text()[-2000:])
                    time.sleep(0.1)
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
            deadline = time.monotonic() + 90
            while True:
                if p.poll() is not None:
                    raise RuntimeError("kafka exited: " + (Path(d) / "log").read_text()[-2000:])
                try:
                    admin.list_topics(timeout=2)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            yield f"127.0.0.1:{port}"
        finally:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def create_topic(broker: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker})  # kept alive until the topic exists
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def agent_cfg(role: str, broker: str, topic: str, **kw: object) -> str:
    c = {"v": 1, "role": role, "protocol": "kafka", "pattern": "stream", "broker": broker, "topic": topic,
         "report_interval_ms": 0, "timeout_ms": 120000}
    c.update(kw)
    return json.dumps(c)


def result(stdout: str) -> dict:
    return next(json.loads(l) for l in reversed(stdout.splitlines()) if json.loads(l).get("type") == "result")


def agent_produce(agent: Path, broker: str, topic: str, records: int, size: int, props: dict) -> float:
    """Records per second from the agent's sender alone (first send to last ack)."""
    create_topic(broker, topic)
    opts = {"acks": props["acks"], "linger": int(props["linger.ms"]) * 1_000_000,
            "batch_size": int(props["batch.size"])}
    out = subprocess.run([str(agent), "run", "--config-json",
                          agent_cfg("sender", broker, topic, payload_bytes=size, messages=records, options=opts)],
                         capture_output=True, text=True, check=True, timeout=300)
    r = result(out.stdout)
    span = r["duration_s"] + r["ack_latency"]["max_us"] / 1e6
    return r["sent"] / span


def java_produce(broker: str, topic: str, records: int, size: int, props: dict) -> float:
    create_topic(broker, topic)
    pp = [f"{k}={v}" for k, v in props.items()]
    out = subprocess.run(["java", "-Xmx512m", "-cp", CP, "org.apache.kafka.tools.ProducerPerformance",
                          "--topic", topic, "--num-records", str(records), "--record-size", str(size),
                          "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker}", *pp],
                         capture_output=True, text=True, check=True, timeout=300)
    last = [l for l in out.stdout.splitlines() if "records sent" in l][-1]
    return float(re.search(r"([\d.]+) records/sec", last).group(1))


def agent_e2e(agent: Path, broker: str, topic: str, n: int, size: int) -> tuple[float, float]:
    """(p50 ms, mean ms) of one-way latency from the agent's receiver."""
    opts = {"acks": "1", "linger": 0, "fetch_max_wait": 0}
    rx = subprocess.Popen([str(agent), "run", "--config-json",
                           agent_cfg("receiver", broker, topic, payload_bytes=size, messages=n, options=opts)],
                          stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None
    assert json.loads(rx.stdout.readline())["type"] == "ready"
    subprocess.run([str(agent), "run", "--config-json",
                    agent_cfg("sender", broker, topic, payload_bytes=size, messages=n, rate_msgs_per_s=200.0,
                              warmup=50, options=opts)], capture_output=True, check=True, timeout=300)
    out, _ = rx.communicate(timeout=120)
    lat = result(out)["latency_actual"]
    return lat["p50_us"] / 1000, lat["mean_us"] / 1000


def java_e2e(broker: str, topic: str, n: int, size: int) -> tuple[float, float]:
    create_topic(broker, topic)
    out = subprocess.run(["java", "-Xmx512m", "-cp", CP, "org.apache.kafka.tools.EndToEndLatency",
                          "--bootstrap-server", broker, "--topic", topic, "--num-records", str(n),
                          "--producer-acks", "1", "--record-size", str(size)],
                         capture_output=True, text=True, check=True, timeout=600)
    mean = float(re.search(r"Avg latency: ([\d.]+) ms", out.stdout).group(1))
    p50 = float(re.search(r"50th = ([\d.]+)", out.stdout).group(1))
    return p50, mean


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", help="use this broker (IP:PORT) instead of starting one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--e2e-records", type=int, default=2000)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    agent = require_binary("roughnet-agent")
    props = {"acks": "1", "linger.ms": "5", "batch.size": "262144"}
    with (kafka_broker() if a.broker is None else _given(a.broker)) as broker:
        rows = []
        for r in range(a.rounds):
            tag = f"{os.getpid()}-{r}"
            order = [0, 1] if r % 2 == 0 else [1, 0]
            tp, e2e = {}, {}
            for i in order:
                if i == 0:
                    tp["agent"] = agent_produce(agent, broker, f"bench-pa-{tag}", a.records, a.size, props)
                    e2e["agent"] = agent_e2e(agent, broker, f"bench/ea-{tag}", a.e2e_records, a.size)
                else:
                    tp["java"] = java_produce(broker, f"bench-pj-{tag}", a.records, a.size, props)
                    e2e["java"] = java_e2e(broker, f"bench-ej-{tag}", a.e2e_records, a.size)
            row = {"round": r, "agent_rec_s": tp["agent"], "pp_rec_s": tp["java"],
                   "tput_ratio": tp["agent"] / tp["java"],
                   "agent_p50_ms": e2e["agent"][0], "e2el_p50_ms": e2e["java"][0],
                   "agent_mean_ms": e2e["agent"][1], "e2el_mean_ms": e2e["java"][1]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "round"}
    # EndToEndLatency truncates to whole ms: its p50 of N means N..N+1 ms.
    summary = {
        "throughput_ratio_median": med["tput_ratio"], "throughput_target_met": med["tput_ratio"] >= 0.9,
        "agent_p50_ms": med["agent_p50_ms"], "e2el_p50_ms_truncated": med["e2el_p50_ms"],
        "p50_target_met": med["agent_p50_ms"] <= 1.10 * (med["e2el_p50_ms"] + 1),
        "mean_ratio": med["agent_mean_ms"] / med["e2el_mean_ms"],
    }
    print(json.dumps(summary))
    if a.json:
        a.json.write_text(json.dumps({"rounds": rows, "summary": summary}, indent=1))


@contextmanager
def _given(broker: str) -> Iterator[str]:
    yield broker


if __name__ == "__main__":
    main()
