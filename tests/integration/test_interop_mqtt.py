"""Interop: roughnet-agent's MQTT driver against independent MQTT clients.

A mosquitto broker started here on 127.0.0.1 (a free port, ended by PID) carries
the traffic.  paho-mqtt and mosquitto_sub see the agent's publications (valid
roughnet headers, every sequence number once), and the agent's receiver counts
what paho-mqtt publishes.  Skips with a reason when mosquitto, paho-mqtt or the
agent binary is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator

import pytest

from interop import (FLAG_END, HEADER_LEN, agent_marks, decode, find_program, free_port, loopback_server, message,
                     ready_agent, run_agent)

paho = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt is not installed (pip install paho-mqtt)")

MOSQUITTO = find_program("mosquitto")
pytestmark = [
    *agent_marks(),
    pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto is not installed (apt-get install mosquitto)"),
]

PAYLOAD_BYTES = 64


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("mosquitto")
    port = free_port()
    conf = d / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    with loopback_server([MOSQUITTO, "-c", str(conf)], port, d / "log", "mosquitto") as address:
        yield address


def agent_config(role: str, broker: str, topic: str, **extra: object) -> str:
    cfg = {"v": 1, "role": role, "protocol": "mqtt", "pattern": "stream", "broker": broker, "topic": topic,
           "payload_bytes": PAYLOAD_BYTES, "messages": 100, "timeout_ms": 20000, "report_interval_ms": 0}
    cfg.update(extra)
    return json.dumps(cfg)


def paho_client(broker: str, version: str) -> paho.Client:
    proto = paho.MQTTv5 if version == "5" else paho.MQTTv311
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, protocol=proto)
    host, port = broker.rsplit(":", 1)
    c.connect(host, int(port))
    return c


@pytest.mark.parametrize(("version", "qos"), [("3.1.1", 1), ("5", 2), ("3.1.1", 0)])
def test_paho_receives_the_agents_publications(broker: str, version: str, qos: int) -> None:
    topic = f"rn/interop/a{version}{qos}"
    got: list[bytes] = []
    subscribed = threading.Event()
    done = threading.Event()
    c = paho_client(broker, version)

    def on_message(_c: object, _u: object, m: paho.MQTTMessage) -> None:
        got.append(m.payload)
        if decode(m.payload)[0] & FLAG_END:
            done.set()

    c.on_message = on_message
    c.on_subscribe = lambda *_a: subscribed.set()
    c.subscribe(topic, qos=qos)
    c.loop_start()
    try:
        assert subscribed.wait(10), "no SUBACK"
        res = run_agent(agent_config("sender", broker, topic, options={"version": version, "qos": qos}))
        assert done.wait(10), f"no end marker among {len(got)} messages"
    finally:
        c.loop_stop()
        c.disconnect()
    assert res["sent"] == 100
    data = [decode(p) for p in got if not decode(p)[0] & FLAG_END]
    assert sorted(seq for _f, seq in data) == list(range(100))
    assert all(len(p) == 64 for p in got if not decode(p)[0] & FLAG_END)
    end = next(p for p in got if decode(p)[0] & FLAG_END)
    assert decode(end)[1] == 100  # the end marker counts what was sent


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_the_agent_receives_pahos_publications(broker: str, version: str) -> None:
    topic = f"rn/interop/b{version}"
    with ready_agent(agent_config("receiver", broker, topic, options={"version": version, "qos": 1})) as rx:
        c = paho_client(broker, version)
        c.loop_start()
        for seq in range(100):
            c.publish(topic, message(seq, size=PAYLOAD_BYTES, fill=b"\0"), qos=1).wait_for_publish(10)
        c.publish(topic, message(100, FLAG_END, HEADER_LEN), qos=1).wait_for_publish(10)
        c.loop_stop()
        c.disconnect()
        out, err = rx.communicate(timeout=30)
    assert rx.returncode == 0, err
    res = json.loads(out.splitlines()[-1])
    assert res["type"] == "result"
    assert (res["received"], res["lost"], res["duplicates"], res["complete"]) == (100, 0, 0, True), res
    assert res["latency_actual"]["count"] == 100


def test_mosquitto_sub_sees_the_agents_messages(broker: str) -> None:
    sub_bin = shutil.which("mosquitto_sub")
    if sub_bin is None:
        pytest.skip("mosquitto_sub is not installed (apt-get install mosquitto-clients)")
    host, port = broker.rsplit(":", 1)
    topic = "rn/interop/c"
    # -C 101: the 100 messages and one end marker; %l prints each payload's length.
    stdbuf = shutil.which("stdbuf")
    if stdbuf is None:
        pytest.skip("stdbuf (coreutils) is not installed: mosquitto_sub's piped output would be block-buffered")
    # Line-buffered, so its SUBACK line arrives before it has seen anything.
    sub = subprocess.Popen([stdbuf, "-oL", sub_bin, "-h", host, "-p", port, "-t", topic, "-q", "1", "-V", "5", "-C", "101",
                            "-F", "%l", "-d"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert sub.stdout is not None
        seen = ""
        while "SUBACK" not in seen:  # -d prints the broker's SUBACK: subscribed
            line = sub.stdout.readline()
            assert line, f"mosquitto_sub ended: {seen}"
            seen += line
        res = run_agent(agent_config("sender", broker, topic, options={"qos": 1}))
        out, _err = sub.communicate(timeout=20)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    lengths = [l for l in out.splitlines() if l.isdigit()]
    assert res["sent"] == 100
    assert lengths.count("64") == 100 and lengths.count("32") == 1, out[-2000:]
