"""Unit tests of roughnet.services that need no root: config text, probe encoders/parsers on bytes
captured from the real brokers (Kafka 4.3.1, nats-server 2.9.10, mosquitto 2.0.11 on this machine),
/proc parsing, the ready line, and preflight's messages."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from roughnet.errors import PreflightError, ServiceError
from roughnet.runspec import Host, Link, Run, Service, Sweep, Workload
from roughnet.services import configs, handle, kafkawire, lifecycle, probes

# ---- bytes captured from the real brokers started by start_services (KafkaConn over a recording socket) ----
# Kafka responses include their 4-byte size and correlation id; the topic was "roughnet-fixture", 2 partitions.
API_VERSIONS = bytes.fromhex(
    "000001cc0000000100000000004b00000000000d00010004001200020001000b00030000000d00080002000a00090001"
    "000a000a00000006000b00000009000c00000004000d00000005000e00000005000f0000000600100000000500110000"
    "000100120000000400130002000700140001000600150000000200160000000500170002000400180000000500190000"
    "0004001a00000005001b00010002001c00000005001d00010003001e00010003001f0001000300200001000400210000"
    "000200220001000200230001000500240000000200250000000300260001000300270001000200280001000200290001"
    "0003002a00000002002b00000002002c00000001002d00000001002e00000000002f0000000000300000000100310000"
    "0001003200000000003300000000003700000002003900000002003c00000002003d0000000000400000000000410000"
    "0000004200000002004400000001004500000001004a00000001004b00000000004c00010001004d00010001004e0001"
    "0002004f0001000200500000000100510000000000530000000000540000000000550000000100560000000000570000"
    "0001005800000000005900000000005a00000001005b00000000005c00000000"
)
CREATE_TOPICS_NEW = bytes.fromhex(
    "000000220000000200000000000000010010726f7567686e65742d666978747572650000ffff"
)
CREATE_TOPICS_EXISTS = bytes.fromhex(
    "0000004a0000000300000000000000010010726f7567686e65742d6669787475726500240028546f7069632027726f75"
    "67686e65742d666978747572652720616c7265616479206578697374732e"
)
METADATA = bytes.fromhex(
    "0000008f00000004000000000000000100000001000a3139382e31382e302e3200002384ffff00166a77483576335656"
    "5479534f5430427468634f563341000000010000000100000010726f7567686e65742d66697874757265000000000200"
    "000000000000000001000000010000000100000001000000010000000000010000000100000001000000010000000100"
    "000001"
)
METADATA_UNKNOWN = bytes.fromhex(
    "0000005600000005000000000000000100000001000a3139382e31382e302e3200002384ffff00166a77483576335656"
    "5479534f5430427468634f56334100000001000000010003000b6e6f73756368746f7069630000000000"
)
NATS_INFO = bytes.fromhex(
    "494e464f207b227365727665725f6964223a224e43324a4734564e42364d4b423559373754323646554641485552554e"
    "50364445575a49495553374159594144494b334641363433524658222c227365727665725f6e616d65223a22726f7567"
    "686e6574222c2276657273696f6e223a22322e392e3130222c2270726f746f223a312c22676f223a22676f312e31392e"
    "38222c22686f7374223a223139382e31382e302e32222c22706f7274223a343232322c2268656164657273223a747275"
    "652c226d61785f7061796c6f6164223a313034383537362c22636c69656e745f6964223a352c22636c69656e745f6970"
    "223a223139382e31382e302e32227d200d0a"
)
CONNACK = bytes.fromhex(
    "20020000"
)


def _body(frame: bytes) -> bytes:
    """Strip size and correlation id from one captured Kafka response."""
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    return frame[8:]


# ---- Kafka wire ---------------------------------------------------------------------------


def test_api_versions_from_kafka_431():
    v = kafkawire.parse_api_versions(_body(API_VERSIONS))
    assert v[kafkawire.API_API_VERSIONS][0] == 0  # v0 still accepted: the request we send
    lo, hi = v[kafkawire.API_METADATA]
    assert lo <= kafkawire.METADATA_VERSION <= hi
    lo, hi = v[kafkawire.API_CREATE_TOPICS]
    assert any(lo <= x <= hi for x in kafkawire.CREATE_TOPICS_VERSIONS)
    assert len(v) > 40  # Kafka 4.3 lists dozens of APIs


def test_metadata_from_kafka_431():
    m = kafkawire.parse_metadata(_body(METADATA))
    assert m.brokers == [(1, "198.18.0.2", 9092)]
    assert m.controller_id == 1 and m.cluster_id
    t = m.topics["roughnet-fixture"]
    assert t.ready and [p.index for p in t.partitions] == [0, 1] and {p.leader for p in t.partitions} == {1}


def test_metadata_unknown_topic_is_not_ready():
    m = kafkawire.parse_metadata(_body(METADATA_UNKNOWN))
    t = m.topics["nosuchtopic"]
    assert t.error_code == 3 and not t.ready  # UNKNOWN_TOPIC_OR_PARTITION


def test_create_topics_from_kafka_431():
    assert kafkawire.parse_create_topics(_body(CREATE_TOPICS_NEW)) == {"roughnet-fixture": (0, None)}
    err, msg = kafkawire.parse_create_topics(_body(CREATE_TOPICS_EXISTS))["roughnet-fixture"]
    assert err == kafkawire.ERR_TOPIC_ALREADY_EXISTS and "already exists" in msg


def test_request_framing():
    req = kafkawire.api_versions_request(7)
    size, key, ver, cid, n = struct.unpack(">ihhih", req[:14])
    assert (size, key, ver, cid) == (len(req) - 4, 18, 0, 7)
    assert req[14 : 14 + n] == kafkawire.CLIENT_ID.encode()
    ct = kafkawire.create_topics_request(3, 4, "roughnet-x", 5, 1000)
    body = ct[14 + n :]
    # topics array of 1, name, partitions 5, replication 1, no assignments, no configs, timeout, validate_only
    assert body == (struct.pack(">ih", 1, 10) + b"roughnet-x" + struct.pack(">ihii", 5, 1, 0, 0)
                    + struct.pack(">ib", 1000, 0))
    md = kafkawire.metadata_request(1, None)
    assert md.endswith(struct.pack(">ib", -1, 0))  # all topics, no auto-creation
    with pytest.raises(ServiceError, match="CreateTopics version 9"):
        kafkawire.create_topics_request(1, 9, "t", 1, 1)


def test_truncated_response_names_offset():
    with pytest.raises(ServiceError, match="truncated"):
        kafkawire.parse_metadata(_body(METADATA)[:30])


class _FakeSock:
    """Replays captured responses, answering each request with the next one (correlation ids rewritten)."""

    def __init__(self, responses):
        self.responses = list(responses)
        self.buf = b""

    def sendall(self, data):
        cid = struct.unpack(">i", data[8:12])[0]
        r = self.responses.pop(0)
        self.buf += r[:4] + struct.pack(">i", cid) + r[8:]

    def recv(self, n):
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def test_kafka_conn_replay():
    conn = kafkawire.KafkaConn(_FakeSock([API_VERSIONS, CREATE_TOPICS_EXISTS, METADATA]))
    conn.api_versions()
    assert conn.create_topic("roughnet-fixture", 2, 1000)[0] == kafkawire.ERR_TOPIC_ALREADY_EXISTS
    assert conn.metadata(["roughnet-fixture"]).topics["roughnet-fixture"].ready


def test_kafka_conn_rejects_wrong_correlation_id():
    class Wrong(_FakeSock):
        def sendall(self, data):
            self.buf += self.responses.pop(0)  # the captured id (1), whatever was asked
    conn = kafkawire.KafkaConn(Wrong([API_VERSIONS, API_VERSIONS]))
    conn.api_versions()  # first request has id 1: matches
    with pytest.raises(ServiceError, match="correlation id 1; expected 2"):
        conn.api_versions()


# ---- MQTT, NATS ---------------------------------------------------------------------------


def test_mqtt_connect_packet_layout():
    pkt = probes.mqtt_connect_packet("abc", 30)
    assert pkt[0] == 0x10 and pkt[1] == len(pkt) - 2
    assert pkt[2:8] == b"\x00\x04MQTT" and pkt[8] == 4 and pkt[9] == 0x02
    assert pkt[10:12] == b"\x00\x1e" and pkt[12:] == b"\x00\x03abc"


def test_mqtt_remaining_length_varint():
    assert probes._mqtt_remaining_length(127) == b"\x7f"
    assert probes._mqtt_remaining_length(128) == b"\x80\x01"
    assert probes._mqtt_remaining_length(16384) == b"\x80\x80\x01"


def test_connack_from_mosquitto():
    assert probes.parse_connack(CONNACK) == 0
    assert probes.parse_connack(b"\x20\x02\x00\x05") == 5
    with pytest.raises(probes.ProbeFailed, match="expected an MQTT CONNACK"):
        probes.parse_connack(b"\x30\x02\x00\x00")
    with pytest.raises(probes.ProbeFailed, match="got nothing"):
        probes.parse_connack(b"")


def test_nats_info_from_nats_server():
    info = probes.parse_nats_info(NATS_INFO)
    assert info["version"] == "2.9.10" and info["port"] == 4222 and info["server_name"] == "roughnet"
    with pytest.raises(probes.ProbeFailed, match="expected a NATS INFO line"):
        probes.parse_nats_info(b"-ERR 'Authorization Violation'\r\n")
    with pytest.raises(probes.ProbeFailed, match="not JSON"):
        probes.parse_nats_info(b"INFO {broken\r\n")


# ---- configs ------------------------------------------------------------------------------


def test_mosquitto_conf_defaults_and_listeners(tmp_path):
    text = configs.mosquitto_conf(["198.18.0.2", "198.18.1.1"], 1883, {}, tmp_path / "d", tmp_path / "m.log")
    lines = text.splitlines()
    assert "listener 1883 198.18.0.2" in lines and "listener 1883 198.18.1.1" in lines
    assert "allow_anonymous true" in lines and "persistence false" in lines
    assert "max_inflight_messages 20" in lines and "max_queued_messages 1000" in lines  # docs/protocols.md
    assert f"log_dest file {tmp_path / 'm.log'}" in lines
    assert not any(ln.startswith(("cafile", "certfile")) for ln in lines)


def test_mosquitto_conf_settings_and_tls(tmp_path):
    tls = configs.TlsFiles(Path("/x/ca.pem"), Path("/x/s.pem"), Path("/x/s.key"))
    text = configs.mosquitto_conf(["198.18.0.2"], 8883, {"persistence": True, "max_inflight": 3, "max_queued": 9},
                                  tmp_path / "d", tmp_path / "m.log", tls)
    lines = text.splitlines()
    assert "persistence true" in lines and f"persistence_location {tmp_path / 'd'}/" in lines
    assert "max_inflight_messages 3" in lines and "max_queued_messages 9" in lines
    i = lines.index("listener 8883 198.18.0.2")
    assert lines[i + 1 : i + 4] == ["cafile /x/ca.pem", "certfile /x/s.pem", "keyfile /x/s.key"]


def test_kafka_properties_one_listener_per_address(tmp_path):
    text = configs.kafka_properties(["198.18.0.2", "198.18.3.1"], 9092, tmp_path / "data")
    props = dict(ln.split("=", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))
    # Kafka refuses two IPv4 listeners on one port: the second address gets 9094 (9093 is the controller's)
    assert props["listeners"] == "RN0://198.18.0.2:9092,RN1://198.18.3.1:9094,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "RN0://198.18.0.2:9092,RN1://198.18.3.1:9094"
    assert configs.kafka_listener_ports(["x", "y", "z"], 9092) == [9092, 9094, 9095]
    assert props["listener.security.protocol.map"] == "RN0:PLAINTEXT,RN1:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert props["inter.broker.listener.name"] == "RN0"
    assert props["process.roles"] == "broker,controller"
    assert props["log.dirs"] == str(tmp_path / "data")
    assert props["offsets.topic.replication.factor"] == "1" and props["auto.create.topics.enable"] == "false"


def test_kafka_java_argv_bounds_heap():
    argv = configs.kafka_java_argv("/usr/bin/java", Path("/k/libs"), 512 * configs.MIB, Path("/a/l.yaml"),
                                   "kafka.Kafka", "/a/server.properties")
    assert argv[:3] == ["/usr/bin/java", "-Xms512m", "-Xmx512m"]  # as Kafka's own scripts: both bounds
    assert argv[-4:] == ["-cp", "/k/libs/*", "kafka.Kafka", "/a/server.properties"]
    assert "-Dlog4j2.configurationFile=/a/l.yaml" in argv


def test_kafka_cluster_id_shape():
    ids = {configs.kafka_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 22 and not cid.startswith("-") and set(cid) <= set(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_nats_and_zenoh_argv(tmp_path):
    assert configs.nats_argv("nats-server", ["198.18.0.2"], 4222, {}, tmp_path) == [
        "nats-server", "-a", "198.18.0.2", "-p", "4222", "-n", "roughnet"]
    js = configs.nats_argv("nats-server", ["198.18.0.2", "198.18.1.1"], 4222, {"jetstream": True}, tmp_path)
    assert js[2] == "0.0.0.0" and js[-3:] == ["-js", "-sd", str(tmp_path)]
    assert configs.zenoh_router_argv("agent", ["198.18.0.2", "198.18.1.1"], 7447) == [
        "agent", "router", "--listen", "tcp/198.18.0.2:7447", "--listen", "tcp/198.18.1.1:7447"]


# ---- /proc, ready line, topic -------------------------------------------------------------

STAT = ("1234 (java worker) S 1 1234 1234 0 -1 4194560 5000 0 0 0 250 130 0 0 20 0 40 0 987654 "
        "3000000000 90000 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")
STATUS = "Name:\tjava\nState:\tS (sleeping)\nVmRSS:\t  345600 kB\nThreads:\t40\n"


def test_parse_proc_usage():
    cpu_s, rss = handle.parse_proc_usage(STAT, STATUS)
    assert cpu_s == pytest.approx((250 + 130) / handle._CLK_TCK)
    assert rss == 345600 * 1024
    assert handle.parse_proc_usage(STAT.replace(") S ", ") Z "), STATUS) is None


def test_usage_sampler_on_this_process():
    import os
    s = handle.UsageSampler(os.getpid(), interval_s=0.01)
    s.start()
    s.stop()
    snap = s.snapshot()
    assert snap["samples"] >= 1 and snap["rss_max_bytes"] > 1_000_000 and snap["cpu_s"] > 0


def test_ready_line_seen(tmp_path):
    p = tmp_path / "zenoh-router.log"
    assert not lifecycle.ready_line_seen(p)
    p.write_text("2026 INFO starting\n{\"v\":1,\"type\":\"interval\"}\n")
    assert not lifecycle.ready_line_seen(p)
    p.write_text(p.read_text() + '{"v":1,"type":"ready","role":"router","listen":"tcp/198.18.0.2:7447"}\n')
    assert lifecycle.ready_line_seen(p)


def _run(services=(), protocol="mqtt", **opts):
    w = Workload(pattern="stream", protocol=protocol, sender="a", receivers=("b",), payload_bytes=100, options=opts)
    return Run(scenario="t", sweep_id="t-00000000", run_id="0123456789ab", index=0, params={"loss": "1%"}, seed=1,
               repeat=0, hosts=(Host("a"), Host("b")), links=(Link(0, ("a", "b")),), workload=w, services=services)


def _sweep(*runs):
    return Sweep(scenario="t", sweep_id="t-00000000", source="t.toml", axes={}, runs=tuple(runs))


def test_kafka_topic_rule():
    assert lifecycle.kafka_topic(_run()) == "roughnet-0123456789ab"


# ---- preflight ----------------------------------------------------------------------------


def test_preflight_accepts_reuse(monkeypatch):
    # reuse = true is supported (run.reuse, run.group; tests/unit/test_reuse_groups.py): preflight lets it through.
    monkeypatch.setattr(lifecycle, "missing_for", lambda kind, tls_needed=False: [])
    lifecycle.preflight(_sweep(_run((Service("mosquitto", "b", reuse=True),))))


def test_preflight_rejects_unknown_host_and_small_heap(monkeypatch):
    monkeypatch.setattr(lifecycle, "missing_for", lambda kind, tls_needed=False: [])
    with pytest.raises(PreflightError, match="host 'zz'"):
        lifecycle.preflight(_sweep(_run((Service("nats", "zz"),))))
    with pytest.raises(PreflightError, match="at least 128 MiB"):
        lifecycle.preflight(_sweep(_run((Service("kafka", "b", options={"heap": 1024}),), protocol="kafka")))


def test_preflight_names_missing_binary_and_install_command(monkeypatch):
    monkeypatch.setattr(lifecycle, "_which", lambda name: None)
    with pytest.raises(PreflightError) as ei:
        lifecycle.preflight(_sweep(_run((Service("mosquitto", "b", options={"tls": True}),))))
    msg = str(ei.value)
    assert "apt-get install -y mosquitto" in msg and "openssl" in msg


def test_preflight_names_missing_kafka_jars(monkeypatch, tmp_path):
    monkeypatch.setattr(lifecycle, "KAFKA_HOME", tmp_path / "nokafka")
    monkeypatch.setattr(lifecycle, "_which", lambda name: "/usr/bin/java" if name == "java" else None)
    monkeypatch.setattr(lifecycle, "_java_major", lambda java: 17)
    problems = lifecycle.missing_for("kafka")
    assert len(problems) == 1 and "bash scripts/fetch-kafka.sh" in problems[0] and "nokafka" in problems[0]
    monkeypatch.setattr(lifecycle, "_java_major", lambda java: 11)
    assert any("needs 17 or newer" in p for p in lifecycle.missing_for("kafka"))


def test_preflight_passes_without_services():
    lifecycle.preflight(_sweep(_run(), dataclasses.replace(_run(), index=1)))


# ---- start/stop logic with a stand-in process (no namespace, no network) -----------------

class _LocalTopology:
    """Starts processes in this namespace: enough for the lifecycle's logic (no sockets are used)."""

    def __init__(self):
        import subprocess
        self._sp = subprocess
        self.started = []

    def popen(self, host, argv, **kw):
        p = self._sp.Popen(argv, **kw)
        self.started.append(p)
        return p

    def address(self, host, seen_from):
        return "198.18.0.2"


def _fake_kind(monkeypatch, tmp_path, script, probe, timeout_s=5.0):
    import sys
    monkeypatch.setitem(lifecycle.READY_TIMEOUT_S, "mosquitto", timeout_s)

    def prepare(svc, run, topology, artifacts):
        return lifecycle._Prepared([sys.executable, "-c", script], artifacts / "fake.log", probe, 1883)

    monkeypatch.setitem(lifecycle._PREPARE, "mosquitto", prepare)
    return _run((Service("mosquitto", "b"),)), _LocalTopology(), tmp_path / "run"


def test_start_retries_probe_until_ready_then_stops(monkeypatch, tmp_path):
    attempts = []

    def probe(deadline):
        attempts.append(deadline)
        if len(attempts) < 3:
            raise probes.ProbeFailed("not yet")
        return "fine"

    run, t, art = _fake_kind(monkeypatch, tmp_path, "import time; print('up', flush=True); time.sleep(60)", probe)
    handles = lifecycle.start_services(run, t, art)
    h = handles[0]
    assert len(attempts) == 3 and h.probe == "fine" and h.alive()
    assert h.address("a") == "198.18.0.2:1883"
    assert lifecycle.check_alive(handles) is None
    usage = lifecycle.stop_services(handles)["mosquitto@b"]
    assert usage["stopped"] is True and usage["exit_code"] == -15 and not h.alive()  # SIGTERM ended it
    assert usage["samples"] >= 1


def test_start_failure_when_process_exits_quotes_log(monkeypatch, tmp_path):
    def probe(deadline):
        raise ConnectionRefusedError(111, "Connection refused")

    # It lives long enough for a probe to fail first (else "last probe" is "no attempt finished").
    script = "import sys, time; print('line one'); print('fatal: cannot bind', flush=True); time.sleep(0.5); sys.exit(3)"
    run, t, art = _fake_kind(monkeypatch, tmp_path, script, probe)
    with pytest.raises(ServiceError) as ei:
        lifecycle.start_services(run, t, art)
    msg = str(ei.value)
    assert "exited with code 3 before it was ready" in msg and msg.endswith("line one\nfatal: cannot bind")
    assert "Connection refused" in msg


def test_start_timeout_stops_the_process(monkeypatch, tmp_path):
    def probe(deadline):
        raise probes.ProbeFailed("still nothing")

    run, t, art = _fake_kind(monkeypatch, tmp_path, "import time; print('waiting', flush=True); time.sleep(60)",
                             probe, timeout_s=0.3)
    with pytest.raises(ServiceError, match=r"not ready within 0.3 s \(last probe: still nothing\)"):
        lifecycle.start_services(run, t, art)
    assert all(p.poll() is not None for p in t.started)  # no process left running


def test_fatal_probe_answer_is_not_retried(monkeypatch, tmp_path):
    attempts = []

    def probe(deadline):
        attempts.append(1)
        raise probes.ProbeFatal("topic exists with 2 partitions; expected 3")

    run, t, art = _fake_kind(monkeypatch, tmp_path, "import time; time.sleep(60)", probe)
    with pytest.raises(ServiceError, match="mosquitto on host b: topic exists"):
        lifecycle.start_services(run, t, art)
    assert len(attempts) == 1 and all(p.poll() is not None for p in t.started)


def test_check_alive_names_dead_service(monkeypatch, tmp_path):
    run, t, art = _fake_kind(monkeypatch, tmp_path,
                             "import time; print('serving', flush=True); time.sleep(0.5); print('oops', flush=True)",
                             lambda d: "ok")
    handles = lifecycle.start_services(run, t, art)
    handles[0].proc.wait(timeout=10)
    reason = lifecycle.check_alive(handles)
    assert reason == "mosquitto on host b died (exit 0); last lines of fake.log:\nserving\noops"
    assert lifecycle.stop_services(handles)["mosquitto@b"]["stopped"] is True  # already dead: no error
