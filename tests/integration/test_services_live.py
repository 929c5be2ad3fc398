"""Managed services in a real 2-host topology: start on host b, use from host a with independent clients.

Each test builds hosts a and b joined by one link, starts one service on b with
``start_services`` (probed by roughnet's own protocol probe), then talks to it
from a's namespace with a client roughnet did not write (mosquitto_pub/sub,
nats-py, confluent-kafka), kills the service and checks ``check_alive`` names it
with log lines, and checks ``stop_services`` leaves no process.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roughnet import services, topo
from roughnet.errors import ServiceError
from roughnet.runspec import Service, Sweep
from roughnet.services.handle import read_proc_usage
from roughnet.services.lifecycle import _which, missing_for
from roughnet.services.netns import socket_in_ns
from roughnet.topo.ledger import process_start_time

pytestmark = pytest.mark.root


def _skip_unless(kind: str) -> None:
    missing = missing_for(kind)
    if missing:
        pytest.skip("; ".join(missing))


@pytest.fixture
def two_hosts(make_run, tmp_path):
    """(run factory, topology factory): a and b on one link; every topology is torn down after the test."""
    made = []

    def build(service: Service, **workload):
        run = make_run(["a", "b"], [("a", "b")], **workload)
        run = dataclasses.replace(run, services=(service,))
        ledger = topo.Ledger(run.run_id[:8], run.run_id)
        t = topo.Topology(run, ledger)
        made.append(t)
        t.build()
        return run, t

    yield build
    for t in made:
        t.teardown()
        assert not t.teardown_errors, t.teardown_errors


def _artifacts(tmp_path: Path) -> Path:
    d = tmp_path / "sweep" / "run"
    d.mkdir(parents=True)
    return d


def _assert_kill_detected_and_stopped(handles, kind: str) -> None:
    h = handles[0]
    assert services.check_alive(handles) is None
    pid = h.pid
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        if not h.alive():
            break
        time.sleep(0.05)
    reason = services.check_alive(handles)
    assert reason is not None and reason.startswith(f"{kind} on host b died"), reason
    log_lines = [ln for ln in h.log_path.read_text(errors="replace").splitlines() if ln.strip()]
    assert log_lines, f"{h.log_path} is empty; expected the service's log"
    assert reason.splitlines()[-1] == log_lines[-1], f"expected the log's last line in the reason: {reason!r}"
    usage = services.stop_services(handles)  # never raises for a dead service
    assert usage[f"{kind}@b"]["stopped"] is True
    assert process_start_time(pid) is None


def _stop_and_check_gone(handles) -> dict:
    pids = [h.pid for h in handles]
    usage = services.stop_services(handles)
    for pid in pids:
        assert process_start_time(pid) is None, f"pid {pid} still runs after stop_services"
    return usage


# ---- mosquitto ----------------------------------------------------------------------------


def _mqtt_roundtrip(t, addr: str, extra: list[str], client: str = "a") -> str:
    """mosquitto_sub on ``client`` waits for one message that mosquitto_pub there sends through the broker."""
    ip, port = addr.split(":")
    common = ["-h", ip, "-p", port, "-t", "roughnet/test", "-q", "1", *extra]
    sub = t.popen(client, ["mosquitto_sub", *common, "-C", "1", "-W", "20"], stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):  # publish until the subscriber got it (it may subscribe after the first publish)
            t.run(client, ["mosquitto_pub", *common, "-m", "hello-from-a"], capture_output=True, timeout=10)
            try:
                out, err = sub.communicate(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            pytest.fail("mosquitto_sub got nothing within 100 publishes")
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    assert sub.returncode == 0, err
    return out.strip()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_mosquitto(two_hosts, tmp_path, tls):
    _skip_unless("mosquitto")
    if _which("mosquitto_pub") is None:
        pytest.skip("mosquitto_pub/mosquitto_sub are not installed (apt-get install -y mosquitto-clients)")
    opts = {"tls": True} if tls else {}
    run, t = two_hosts(Service("mosquitto", "b", options={"max_inflight": 7, "max_queued": 55, "nodelay": True, **opts}),
                       protocol="mqtt")
    art = _artifacts(tmp_path)
    handles = services.start_services(run, t, art)
    try:
        h = handles[0]
        assert h.kind == "mosquitto" and h.host == "b"
        assert h.port == (8883 if tls else 1883)
        addr = h.address("a")
        assert addr == f"{t.address('b', 'a')}:{h.port}"
        conf = (art / "mosquitto.conf").read_text()
        assert f"listener {h.port} {t.address('b', 'a')}" in conf and "max_inflight_messages 7" in conf
        assert "set_tcp_nodelay true" in conf
        extra = []
        if tls:
            ca = h.agent_options["tls_ca"]
            assert Path(ca).is_file() and Path(ca).parent == art.parent / "tls"
            extra = ["--cafile", ca]
        assert _mqtt_roundtrip(t, addr, extra) == "hello-from-a"
        if tls:  # a plain client must not get through a TLS listener
            ip, port = addr.split(":")
            r = t.run("a", ["mosquitto_pub", "-h", ip, "-p", port, "-t", "x", "-m", "y"], capture_output=True,
                      timeout=15)
            assert r.returncode != 0
        assert "New connection from" in (art / "mosquitto.log").read_text()
        time.sleep(1.1)  # at least two sampler ticks
        u = h.usage()
        assert u["samples"] >= 2 and u["rss_max_bytes"] > 100_000 and u["ready_s"] > 0
        _assert_kill_detected_and_stopped(handles, "mosquitto")
    finally:
        services.stop_services(handles)


def test_mosquitto_stop_is_clean(two_hosts, tmp_path):
    _skip_unless("mosquitto")
    run, t = two_hosts(Service("mosquitto", "b"), protocol="mqtt")
    handles = services.start_services(run, t, _artifacts(tmp_path))
    usage = _stop_and_check_gone(handles)
    assert usage["mosquitto@b"]["exit_code"] == 0  # SIGTERM: mosquitto exits cleanly
    assert services.check_alive(handles) is None  # stopped on purpose is not "died"
    assert not [p for p in topo.system.netns_pids(t.ns("b"))], "a process is left in b's namespace"
    assert services.stop_services(handles)["mosquitto@b"]["stopped"] is True  # again: harmless


# ---- nats ----------------------------------------------------------------------------------

NATS_CLIENT = r"""
import asyncio, sys
import nats
async def main(url):
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
    sub = await nc.subscribe("roughnet.test")
    await nc.flush()
    await nc.publish("roughnet.test", b"hello-from-a")
    msg = await sub.next_msg(timeout=5)
    print(msg.data.decode(), nc.connected_server_version)
    await nc.close()
asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.parametrize("jetstream", [False, True], ids=["core", "jetstream"])
def test_nats(two_hosts, tmp_path, jetstream):
    _skip_unless("nats")
    pytest.importorskip("nats", reason="nats-py is not installed in the venv (pip install nats-py)")
    run, t = two_hosts(Service("nats", "b", options={"jetstream": jetstream}), protocol="nats")
    art = _artifacts(tmp_path)
    handles = services.start_services(run, t, art)
    try:
        h = handles[0]
        assert f"jetstream={jetstream}" in h.probe
        r = t.run("a", [sys.executable, "-c", NATS_CLIENT, f"nats://{h.address('a')}"], capture_output=True,
                  text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("hello-from-a ")
        if jetstream:
            assert (art / "nats-data").is_dir()
        _assert_kill_detected_and_stopped(handles, "nats")
    finally:
        services.stop_services(handles)


# ---- kafka ---------------------------------------------------------------------------------

KAFKA_CLIENT = r"""
import sys, time
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
bootstrap, topic, n = sys.argv[1], sys.argv[2], 20
md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
print("partitions", len(md.topics[topic].partitions))
p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
for i in range(n):
    p.produce(topic, value=b"m%d" % i, partition=i % len(md.topics[topic].partitions))
assert p.flush(15) == 0
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "auto.offset.reset": "earliest"})
c.subscribe([topic])
got, deadline = set(), time.monotonic() + 30
while len(got) < n and time.monotonic() < deadline:
    m = c.poll(0.5)
    if m is not None and m.error() is None:
        got.add(m.value())
c.close()
print("consumed", len(got))
"""


def test_kafka(two_hosts, tmp_path):
    _skip_unless("kafka")
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed in the venv")
    run, t = two_hosts(Service("kafka", "b", options={"heap": 384 * 1024 * 1024}), protocol="kafka",
                       options={"partitions": 3})
    art = _artifacts(tmp_path)
    handles = services.start_services(run, t, art)
    try:
        h = handles[0]
        assert h.topic == f"roughnet-{run.run_id}" and "3 partition(s)" in h.probe
        assert (art / "kafka-data" / "meta.properties").is_file()
        r = t.run("a", [sys.executable, "-c", KAFKA_CLIENT, h.address("a"), h.topic], capture_output=True,
                  text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "partitions 3" in r.stdout and "consumed 20" in r.stdout, r.stdout
        u = h.usage()
        assert u["rss_max_bytes"] > 50 * 1024 * 1024 and u["cpu_s"] > 0.5
        _assert_kill_detected_and_stopped(handles, "kafka")
    finally:
        services.stop_services(handles)


def test_kafka_stop_is_graceful(two_hosts, tmp_path):
    _skip_unless("kafka")
    run, t = two_hosts(Service("kafka", "b", options={"heap": 256 * 1024 * 1024}), protocol="kafka")
    handles = services.start_services(run, t, _artifacts(tmp_path))
    usage = _stop_and_check_gone(handles)
    assert usage["kafka@b"]["exit_code"] in (0, 143), usage  # SIGTERM handled (143: JVM exit on TERM)


# ---- failures, preflight -------------------------------------------------------------------


def test_start_failure_reports_log(two_hosts, tmp_path):
    """A service that cannot bind (its address is taken) fails to start with its own log lines."""
    _skip_unless("mosquitto")
    run, t = two_hosts(Service("mosquitto", "b"), protocol="mqtt")
    blocker = socket_in_ns(t.ns("b"))
    blocker.bind((t.address("b", "b"), services.PORTS["mosquitto"]))
    blocker.listen(1)
    try:
        with pytest.raises(ServiceError) as ei:
            services.start_services(run, t, _artifacts(tmp_path))
    finally:
        blocker.close()
    msg = str(ei.value)
    assert "mosquitto on host b exited" in msg and "Address already in use" in msg, msg
    assert not topo.system.netns_pids(t.ns("b"))


def test_preflight_accepts_reuse(make_run):
    # reuse = true is supported (run.group; tests/integration/test_service_reuse.py runs it live).
    if services.missing_for("nats"):
        pytest.skip(f"nats-server is missing: {services.missing_for('nats')}")
    run = dataclasses.replace(make_run(["a", "b"], [("a", "b")]), services=(Service("nats", "b", reuse=True),))
    sweep = Sweep(scenario="t", sweep_id="t-00000000", source="t.toml", axes={}, runs=(run,))
    services.preflight(sweep)


def test_socket_in_ns_stays_out_of_root_namespace(two_hosts):
    """The helper thread's setns does not leak into the calling thread's namespace."""
    _, t = two_hosts(Service("nats", "b"))
    before = os.readlink("/proc/thread-self/ns/net")
    s = socket_in_ns(t.ns("b"))
    s.close()
    assert os.readlink("/proc/thread-self/ns/net") == before
    assert read_proc_usage(os.getpid()) is not None


# ---- zenoh router --------------------------------------------------------------------------

ZENOH_CLIENT = r"""
import sys, time
import zenoh
def session(endpoint):
    c = zenoh.Config()
    c.insert_json5("mode", '"client"')
    c.insert_json5("connect/endpoints", '["%s"]' % endpoint)
    c.insert_json5("scouting/multicast/enabled", "false")
    return zenoh.open(c)
sub_s, pub_s = session(sys.argv[1]), session(sys.argv[1])  # two clients: data must pass the router
got = []
sub = sub_s.declare_subscriber("roughnet/test", lambda s: got.append(s.payload.to_bytes()))
deadline = time.monotonic() + 20
while not got and time.monotonic() < deadline:
    pub_s.put("roughnet/test", b"hello-from-a")
    time.sleep(0.1)
print(got[0].decode() if got else "nothing")
sub_s.close(); pub_s.close()
"""


def test_zenoh_router(two_hosts, tmp_path):
    _skip_unless("zenoh-router")
    pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed in the venv (pip install eclipse-zenoh)")
    run, t = two_hosts(Service("zenoh-router", "b"), protocol="zenoh")
    art = _artifacts(tmp_path)
    handles = services.start_services(run, t, art)
    try:
        h = handles[0]
        assert h.probe.startswith("ready line") and h.port == 7447
        r = t.run("a", [sys.executable, "-c", ZENOH_CLIENT, f"tcp/{h.address('a')}"], capture_output=True,
                  text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip() == "hello-from-a"
        _assert_kill_detected_and_stopped(handles, "zenoh-router")
    finally:
        services.stop_services(handles)


# ---- a broker between two links: each side must be given an address it can reach ------------

KAFKA_ROUNDTRIP = r"""
import sys, time
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
bootstrap, topic, tag = sys.argv[1], sys.argv[2], sys.argv[3].encode()
md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
print("brokers", ",".join(f"{b.host}:{b.port}" for b in md.brokers.values()))
p = Producer({"bootstrap.servers": bootstrap})
p.produce(topic, value=tag)
assert p.flush(15) == 0
c = Consumer({"bootstrap.servers": bootstrap, "group.id": tag.decode(), "auto.offset.reset": "earliest"})
c.subscribe([topic])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    m = c.poll(0.5)
    if m is not None and m.error() is None and m.value() == tag:
        print("consumed", tag.decode())
        break
c.close()
"""


@pytest.mark.parametrize("kind", ["mosquitto", "nats", "kafka"])
def test_broker_between_two_links(make_run, tmp_path, kind):
    """Hosts a - b - c: the broker on b has two addresses; clients on a and on c both get through."""
    _skip_unless(kind)
    if kind == "kafka":
        pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed in the venv")
    if kind == "nats":
        pytest.importorskip("nats", reason="nats-py is not installed in the venv (pip install nats-py)")
    if kind == "mosquitto" and _which("mosquitto_pub") is None:
        pytest.skip("mosquitto_pub/mosquitto_sub are not installed (apt-get install -y mosquitto-clients)")
    protocol = {"mosquitto": "mqtt", "nats": "nats", "kafka": "kafka"}[kind]
    run = make_run(["a", "b", "c"], [("a", "b"), ("b", "c")], protocol=protocol)
    run = dataclasses.replace(run, services=(Service(kind, "b"),))
    t = topo.Topology(run, topo.Ledger(run.run_id[:8], run.run_id))
    handles = []
    try:
        t.build()
        handles = services.start_services(run, t, _artifacts(tmp_path))
        h = handles[0]
        assert h.address("a") != h.address("c")  # one address on each link
        for client in ("a", "c"):
            addr = h.address(client)
            if kind == "mosquitto":
                assert _mqtt_roundtrip(t, addr, [], client) == "hello-from-a"
            elif kind == "nats":
                r = t.run(client, [sys.executable, "-c", NATS_CLIENT, f"nats://{addr}"], capture_output=True,
                          text=True, timeout=30)
                assert r.returncode == 0 and r.stdout.startswith("hello-from-a"), r.stderr
            else:
                r = t.run(client, [sys.executable, "-c", KAFKA_ROUNDTRIP, addr, h.topic, f"from-{client}"],
                          capture_output=True, text=True, timeout=120)
                assert r.returncode == 0, r.stderr[-2000:]
                # the broker advertises, to each client, the address on that client's link
                assert f"brokers {addr}" in r.stdout and f"consumed from-{client}" in r.stdout, r.stdout
        _stop_and_check_gone(handles)
    finally:
        services.stop_services(handles)
        t.teardown()
        assert not t.teardown_errors, t.teardown_errors


def test_kafka_restart_in_same_artifacts(two_hosts, tmp_path):
    """A run retried into the same artifacts folder (resume) formats fresh storage and starts again."""
    _skip_unless("kafka")
    art = _artifacts(tmp_path)
    for _ in range(2):
        run, t = two_hosts(Service("kafka", "b", options={"heap": 256 * 1024 * 1024}), protocol="kafka")
        handles = services.start_services(run, t, art)
        _stop_and_check_gone(handles)
        t.teardown()
    assert (art / "kafka.log").read_text().count("Kafka Server started") == 1  # the log is the last attempt's
