"""Every protocol through `roughnet run` on impaired links (root, namespaces, the built agent, brokers).

Properties, not exact numbers: reliable modes (TCP, Zenoh reliable, DDS reliable, ZeroMQ over
TCP, MQTT QoS 1/2, Kafka acks=all, NATS request/reply) deliver every message over a lossy link;
best-effort modes report the loss; a broker killed in mid-run fails that run with the broker's
own words and the sweep goes on; fan-out gives one result per subscriber.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli_run import RUNS, fetch, needs, roughnet_run, run_argv
from roughnet.binaries import find_binary
from conftest import BOUND_P, binomial_bounds, toml_hosts, toml_stream

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)")


def link_counters(r: dict, link: int = 0) -> dict:
    """The run's counters of link ``link`` (the a-m link, the lossy one, is 0)."""
    lc = r["link_counters"]
    return (json.loads(lc) if isinstance(lc, str) else lc)[str(link)]


def extra_of(r: dict) -> dict:
    extra = r["metrics_extra"]
    return json.loads(extra) if isinstance(extra, str) else extra


def run_scenario(tmp_path: Path, body: str, timeout: float = 600) -> list[dict]:
    """The stored runs of scenario ``body`` (a failed run is a result here: exit code 0 or 1), each with
    every receiver row of the sweep under ``_receivers``."""
    path = tmp_path / "s.toml"
    path.write_text(body)
    res = tmp_path / "res"
    roughnet_run(path, res, timeout=timeout, exit_codes=(0, 1))
    rows = fetch(res, RUNS)
    rx = fetch(res, "select * from receivers") if rows else []
    for r in rows:
        r["_receivers"] = rx
    return rows


HEAD = """
[scenario]
name = "proto"
seed = 1
timeout = "120 s"
""" + toml_hosts("a", "b", "m") + """\
[[link]]
between = ["a", "m"]
{link}
[[link]]
between = ["m", "b"]
"""


def stream(protocol: str, knobs: str = "", messages: int = 400, rate: str = "200 msg/s", loss: str = "10%",
           services: str = "", to: str = '["b"]', payload: str = "512 B", link: str | None = None) -> str:
    """A stream from a through the broker host m to ``to``; ``link``: the a-m link's keys (default: ``loss``)."""
    return (HEAD.format(link=link or f'loss = "{loss}"') + services + "\n"
            + toml_stream(protocol, to, payload, messages, rate) + knobs + "\n")


MOSQUITTO = '\n[[service]]\nkind = "mosquitto"\nhost = "m"\n'
KAFKA = '\n[[service]]\nkind = "kafka"\nhost = "m"\n'
NATS = '\n[[service]]\nkind = "nats"\nhost = "m"\n'

RELIABLE = [
    pytest.param("tcp", "", "", id="tcp"),
    pytest.param("zenoh", '[workload.zenoh]\nreliability = "reliable"', "", marks=needs("zenoh"), id="zenoh-reliable"),
    # QUIC (TLS 1.3 with a per-run certificate from services.tls): QUIC retransmits, like TCP.
    pytest.param("zenoh", '[workload.zenoh]\ntransport = "quic"', "", marks=needs("zenoh"), id="zenoh-quic"),
    pytest.param("zmq", "", "", marks=needs("zmq"), id="zmq-tcp"),
    pytest.param("dds", '[workload.dds]\nreliability = "reliable"', "", marks=needs("dds"), id="dds-reliable"),
    pytest.param("mqtt", "[workload.mqtt]\nqos = 1", MOSQUITTO, marks=needs("mqtt"), id="mqtt-qos1"),
    # QoS 2 once lost about half of the 400 here: mosquitto holds each incoming QoS 2 message
    # until its PUBREL and refused the ones beyond `max_inflight` (20) with a PUBREC that a 3.1.1
    # client takes for success, and the lossy leg kept more than 20 waiting (docs/protocols.md, MQTT).
    pytest.param("mqtt", "[workload.mqtt]\nqos = 2", MOSQUITTO, marks=needs("mqtt"), id="mqtt-qos2"),
    pytest.param("mqtt", '[workload.mqtt]\nqos = 2\nversion = "5"', MOSQUITTO, marks=needs("mqtt"), id="mqtt5-qos2"),
    pytest.param("kafka", '[workload.kafka]\nacks = "all"', KAFKA, marks=needs("kafka"), id="kafka-acks-all"),
]


@pytest.mark.parametrize("protocol,knobs,services", RELIABLE)
def test_reliable_modes_deliver_everything_over_a_lossy_link(tmp_path, protocol, knobs, services):
    (r,) = run_scenario(tmp_path, stream(protocol, knobs, services=services))
    assert r["status"] == "ok", r["failure_reason"]
    assert r["received"] == 400 and r["lost"] == 0, (r["received"], r["lost"])
    assert r["link_drops"] and r["link_drops"] > 0  # the link did drop frames: the protocol recovered them
    if protocol == "zenoh":
        # the receiver's leave was seen as one (a token gone with a dropped transport is waited for 15 s)
        extra = r["metrics_extra"]
        assert (json.loads(extra) if isinstance(extra, str) else extra)["sender_finish_s"] < 10


BEST_EFFORT = [
    pytest.param("udp", "", "", id="udp"),
    # zenoh over the lossy UDP hop: discovery sometimes never completes (ZENOH_UDP_DISCOVERY below); then the test
    # asserts that failure, and only that one, and reports it as an expected failure (xfail), kept visible.
    pytest.param("zenoh", '[workload.zenoh]\nreliability = "best_effort"\ntransport = "udp"', "",
                 marks=needs("zenoh"), id="zenoh-best-effort-udp"),
    # DDS best effort: discovery over the lossy hop used to fail now and then (Cyclone 11 sent a
    # unicast peer ONE participant announcement and pruned it 30 s later; the agent now repeats it
    # every second, SPDPInterval 1 s). Keep-all reader history so that the loss counted is the
    # link's: with best effort's default KEEP_LAST 1 a receiver that falls one sample behind
    # (a busy CPU) overwrites samples in its own history, which adds loss beyond the link's 10 %.
    pytest.param("dds", '[workload.dds]\nreliability = "best_effort"\nhistory_depth = 0', "", id="dds-best-effort",
                 marks=needs("dds")),
]


#: The one failure zenoh over the lossy UDP hop is allowed, in the sender's words (crates/agent zenoh.rs). zenoh's
#: UDP link does not retransmit: the session open is retried (a lost InitSyn..OpenAck costs open_timeout), but what
#: follows is sent once, and when a frame of it is lost the sender never sees the receiver's subscriber and gives
#: up at the run's timeout. Seen here 1 run in 18 (earlier 1 in 6): the sender's "Scouting delay elapsed before
#: start conditions are met", then 20 s later its next open "Received an invalid message in response to an
#: OpenSyn" (the receiver answered with frames of the transport it had already opened: its OpenAck was the frame
#: lost) and no subscriber until the 120 s timeout; once before, a lost key-expression declaration ("Unknown wire
#: expr" at the sender). zenoh 1.10 has no setting to repeat either over an unreliable link (docs/protocols.md).
ZENOH_UDP_DISCOVERY = "sender@a: io: gave up on waiting for the zenoh subscribers of every peer at the timeout"


@pytest.mark.parametrize("protocol,knobs,services", BEST_EFFORT)
def test_best_effort_modes_report_the_loss(tmp_path, protocol, knobs, services):
    (r,) = run_scenario(tmp_path, stream(protocol, knobs, services=services, messages=1000, rate="500 msg/s"))
    if protocol == "zenoh" and r["status"] == "failed":
        # stored incomplete with the receiver's figures (issue 26): "incomplete: " and then the sender's words
        assert (r["failure_reason"] or "").startswith("incomplete: " + ZENOH_UDP_DISCOVERY), r["failure_reason"]
        pytest.xfail("zenoh over a lossy UDP link: a handshake or declaration frame lost (sent once, never "
                     "repeated) left discovery incomplete until the timeout: " + r["failure_reason"])
    assert r["status"] == "ok", r["failure_reason"]
    check_best_effort_loss(r, protocol)


def check_best_effort_loss(r: dict, protocol: str) -> None:
    """1000 messages of 512 B at 500 msg/s over the a-m hop that drops 10 % of frames (the kernel engine's
    nftables numgen random: each frame independently, not seeded, `loss_reproducible` false); m-b loses nothing."""
    link = link_counters(r)
    fwd = link["forward"]
    assert link["engine"] == "kernel" and link["loss_reproducible"] is False, link
    # The link did its part: its forward drops are Binomial(frames seen, 0.10) (seen: 90-119 of 952-1027 frames).
    lo, hi = binomial_bounds(fwd["seen_at_loss_hook"], 0.10, BOUND_P)
    assert lo <= fwd["drops_loss"] <= hi, (lo, hi, fwd)
    # Each message is one datagram (one frame at 512 B), lost for good when its frame is dropped: lost ~
    # Binomial(1000, 0.10), mean 100, sd 9.5; outside binomial_bounds' [61, 144] (ratio 6.1-14.4 %) with
    # probability < 1e-5 (exact tails; 4.5 sigma would be 57-143). Seen: udp 95, 100; dds 94, 89 (2 runs each);
    # zenoh 88-118 (17 runs). Before: 4-18 %. zenoh's datagrams may carry several messages (below): with 1000
    # messages in 952 frames (48 pairs) the sd grows from 9.5 to 9.9, so its bound is taken at 1e-6, [57, 149],
    # which is again 4.5 of those sds.
    lo, hi = binomial_bounds(1000, 0.10, BOUND_P / 10 if protocol == "zenoh" else BOUND_P)
    assert r["sent"] == 1000 and r["received"] + r["lost"] == 1000, (r["sent"], r["received"], r["lost"])
    assert lo <= r["lost"] <= hi, (lo, hi, r["lost"], r["loss_ratio"])
    if protocol != "zenoh":
        # Nothing else loses a message (no rate, no queue drops): every lost one is a frame the link dropped
        # (the drops also count end markers, discovery and ARP frames: <=). zenoh is left out: its UDP link
        # batches what is queued at once into one datagram (as after a sender fell behind its schedule on this
        # busy machine), so one dropped frame can lose several: seen 1000 messages in 952 forward frames (8.7 % of
        # sends late), 113 lost for 97 frames dropped; 6 of 17 runs lost more than the link dropped.
        assert r["lost"] <= fwd["drops_loss"], (r["lost"], fwd)


@needs("mqtt")
def test_mqtt_qos0_over_tcp_reports_no_loss_but_retransmits(tmp_path):
    # QoS 0 over TCP: TCP recovers the frames, so messages arrive; the retransmissions show the cost.
    (r,) = run_scenario(tmp_path, stream("mqtt", "[workload.mqtt]\nqos = 0", services=MOSQUITTO))
    assert r["status"] == "ok", r["failure_reason"]
    assert r["tcp_retrans_segs"] > 0


@needs("mqtt")
def test_mqtt_qos2_window_above_the_brokers_limit_loses_nothing(tmp_path):
    # A 3.1.1 publisher asking for a window (100) far above mosquitto's max_inflight (5): the
    # broker would refuse the excess QoS 2 messages with a PUBREC that 3.1.1 cannot tell from
    # success; the agent keeps its window at the broker's receive maximum, so nothing is lost. 100 messages
    # (the publisher is 95 ahead of the broker's limit at once; 200 took 21 s over the 10 % lossy link).
    svc = '\n[[service]]\nkind = "mosquitto"\nhost = "m"\nmax_inflight = 5\n'
    (r,) = run_scenario(tmp_path, stream("mqtt", "[workload.mqtt]\nqos = 2\ninflight = 100", services=svc,
                                         messages=100))
    assert r["status"] == "ok", r["failure_reason"]
    assert r["received"] == 100 and r["lost"] == 0, (r["received"], r["lost"])
    assert r["link_drops"] and r["link_drops"] > 0


@needs("nats")
def test_nats_request_reply_loses_nothing(tmp_path):
    # A reply that comes later than the pinger's reply timeout counts as lost, as a NATS request with that timeout
    # fails. TCP recovers every loss, but a segment lost k times in a row waits 200 + 400 + ... ms of backed-off
    # retransmission timeouts (Linux's minimum RTO is 200 ms): three losses, 1.4 s, passed the 1 s default (seen
    # in a CI simulation: 297 lost behind one stall; at 5 % loss p^3 x ~600 segments is about 7 % a run). With
    # 5 s, a reply is lost only behind five losses of one segment (6.2 s): 0.05^5 x 600 = 2e-4 a run.
    body = HEAD.format(link='loss = "5%"') + NATS + """
[workload]
pattern = "ping"
protocol = "nats"
from = "a"
to = "b"
payload = "256 B"
messages = 300
interval = "5 ms"
reply_timeout = "5 s"
"""
    (r,) = run_scenario(tmp_path, body)
    assert r["status"] == "ok", r["failure_reason"]
    assert r["lost"] == 0 and r["received"] == 300
    assert r["link_drops"] and r["link_drops"] > 0  # the link did lose frames: TCP recovered them
    assert r["tcp_retrans_segs"] and r["tcp_retrans_segs"] > 0  # by retransmission, what the 5 s leave time for


@pytest.mark.slowlink(seconds=33)  # 3 s each way; 3.5 s of CPU in 44 s
@needs("nats")
@pytest.mark.skipif(find_binary("roughnet-wire") is None, reason="roughnet-wire is not built (make build)")
def test_nats_connects_over_a_link_slower_than_a_fixed_connect_timeout(tmp_path):
    """3 s each way: the client's handshake (TCP, INFO, CONNECT) takes several 6 s round trips.

    A fixed 5 s connection timeout, not retried, failed this at once (and, rarely, a 10 %
    lossy link too: a lost handshake segment waits for its retransmission)."""
    body = stream("nats", messages=20, rate="10 msg/s", services=NATS, payload="256 B",
                  link='engine = "wire"\ndelay = "3 s"')
    (r,) = run_scenario(tmp_path, body)
    assert r["status"] == "ok", r["failure_reason"]
    assert r["received"] == 20 and r["lat_p50_us"] > 3e6  # one crossing of the slow link


@pytest.mark.slowlink(seconds=50)  # 400 kbit/s; 13.5 s of CPU (the JVM) in 63 s
@needs("kafka")
def test_kafka_producer_waits_for_acks_longer_than_a_fixed_flush(tmp_path):
    """200 x 10 KB queue in the producer in 2 s and need about 41 s to cross a 400 kbit/s link.

    The flush at the end used to give up after 30 s and drop what was still queued (at 25 % drop
    a stalled connection lost 69 of 150 that way); an acknowledged producer waits for the run's
    timeout, like MQTT QoS 1."""
    body = stream("kafka", '[workload.kafka]\nacks = "all"', messages=200, rate="100 msg/s", services=KAFKA,
                  payload="10 KB", link='rate = "400 kbit/s"')
    (r,) = run_scenario(tmp_path, body)
    assert r["status"] == "ok", r["failure_reason"]
    assert r["received"] == 200 and r["lost"] == 0, (r["received"], r["validity_reasons"])
    extra = r["metrics_extra"]
    assert (json.loads(extra) if isinstance(extra, str) else extra)["sender_unacked"] == 0
    # the last messages arrived more than 30 s after they were sent: a 30 s flush would have lost them
    assert r["lat_max_us"] > 30e6, r["lat_max_us"]


@pytest.mark.slowlink(seconds=23)  # 400 kbit/s; 2.8 s of CPU in 24 s
@needs("zenoh")
def test_zenoh_reliable_sender_stays_until_its_receiver_has_everything(tmp_path):
    """100 x 10 KB need about 21 s to cross a 400 kbit/s link (sent in 1 s); zenoh's blocking congestion
    control holds the sender's puts, and after the last one its transmission queue and the TCP socket still
    hold several seconds of them. (It ran 200 of them, 41 s, until the CI time was counted: the
    property needs only that the sender's last put returns seconds before the receiver has it.)

    The sender used to close its session 3 s after its end marker, or at once when its liveliness
    query (500 ms, queued behind that data) went unanswered; closing discarded what zenoh still
    held (old agent here: 191 of 200, the receiver waited for the rest until the timeout; CI, 25 %
    drop: 128 of 150). It now follows the receiver's liveliness token and stays until it goes, as
    long as the run allows.

    zenoh itself used to close the transport now and then over this link (seen at 200 kbit/s, and once in
    CI at 400: the rate limiter's queue dropped 413 frames, TCP's backed-off retransmission held a put
    blocked past zenoh's `wait_before_close` of 5 s, "Unable to push non droppable network message ...
    Closing transport!"; 186 of 200 arrived), and the test then accepted any received > 0. Such a loss
    has no bound the test could state: the closed transport takes its queue, and every put the sender
    makes (it is behind its schedule, so all the remaining ones at once) before zenoh reconnects goes
    nowhere: with `wait_before_close = "100 ms"` on this link zenoh closed once and 189 of 200 were lost.
    So the closure is taken out of what this test measures: `wait_before_close = "60 s"`, twelve times
    zenoh's default and far beyond a retransmission stall here (longest put-to-arrival seen: 8.1, 9.1 s),
    and then nothing may be lost and no transport dropped (the closure itself is the next test's)."""
    body = stream("zenoh", '[workload.zenoh]\nreliability = "reliable"\nwait_before_close = "60 s"', messages=100,
                  rate="100 msg/s", payload="10 KB", link='rate = "400 kbit/s"')
    (r,) = run_scenario(tmp_path, body)
    assert r["status"] == "ok", r["failure_reason"]
    extra = extra_of(r)
    assert extra["sender_transport_drops"] == 0, extra
    assert r["received"] == 100 and r["lost"] == 0, (r["received"], r["validity_reasons"])
    # the last ones arrived seconds after their put returned: the sender had to stay, and did,
    # longer than the old fixed 3 s
    assert r["lat_actual_max_us"] > 3e6, r["lat_actual_max_us"]
    assert extra["sender_finish_s"] > 3


@pytest.mark.slowlink(seconds=28)  # an outage; 2.8 s of CPU in 35 s
@needs("zenoh")
def test_zenoh_reliable_sender_waits_for_a_receiver_whose_transport_dropped(tmp_path):
    """The link goes down from 6 to 20 s while 800 x 1 KB are sent (8 s) and the end marker follows.

    zenoh's lease (10 s) closes the transport at both ends, with what its queue still held, and
    reconnects once the link is back. The receiver's token went with the transport, without the
    `-left` token a receiver declares when it leaves, so the sender waits for it to come back and
    sends the end marker again: the run ends with the loss counted instead of the receiver waiting
    for the marker until the timeout (120 s)."""
    outage = ('loss = "0%"\n[[link.schedule]]\nat = "6 s"\ndown = true\n'
              '[[link.schedule]]\nat = "20 s"\nup = true\n')
    body = stream("zenoh", '[workload.zenoh]\nreliability = "reliable"', messages=800, rate="100 msg/s",
                  payload="1 KB", link=outage)
    (r,) = run_scenario(tmp_path, body)
    assert r["status"] == "ok", r["failure_reason"]
    # the end marker came (again) after the outage: the receiver did not wait for the timeout
    assert "timeout" not in str(r["validity_reasons"]), r["validity_reasons"]
    # Not statistics (no random loss here): the schedule's timing. The link is back at 20 s (the wire's clock,
    # which starts no later than the sender's first message); zenoh, whose transport closed at the lease (~16 s),
    # retries its connection every 1 s growing to 4 s, so it is back within about 4 s, and then the token and the
    # end marker cross a loss-free link. Seen (3 runs): 26.7, 26.4, 27.8 s. 40 s leaves 12 s for a busy machine and
    # is a third of the timeout the old behaviour waited for.
    assert r["duration_s"] < 40, r["duration_s"]
    # Exactly one receiver's token went with exactly one dropped transport (one outage, longer than the lease).
    assert extra_of(r)["sender_transport_drops"] == 1, extra_of(r)
    # What arrived is what was sent before the outage: message i is due i / 100 s after the sender's first, which
    # is no earlier than the wire's time 0, so the 200 from 6 s on were sent into the outage, whose 14 s exceed
    # zenoh's 10 s lease: they went with the closed transport (<= 600 is causal, not a tolerance). At least 400:
    # the sender's first message within 2 s of the wire's time 0 (seen 596, 597, 598: a few were in flight at 6 s).
    assert r["received"] + r["lost"] == 800 and 400 <= r["received"] <= 600, (r["received"], r["lost"])


@needs("zmq")
def test_fanout_gives_one_result_per_subscriber(tmp_path):
    body = """
[scenario]
name = "fan"
timeout = "60 s"
""" + toml_hosts("a", "b", "c", "d") + """\
[[link]]
between = ["a", "b", "c", "d"]
""" + toml_stream("zmq", '["b", "c", "d"]', "256 B", 300, "300 msg/s")
    (r,) = run_scenario(tmp_path, body)
    assert r["status"] == "ok", r["failure_reason"]
    assert r["received"] == 900
    hosts = sorted(row["host"] for row in r["_receivers"])
    assert hosts == ["b", "c", "d"], hosts


@needs("mqtt")
def test_broker_killed_mid_run_fails_that_run_and_the_sweep_goes_on(tmp_path):
    body = HEAD.format(link='loss = "0%"') + MOSQUITTO + "\n" + toml_stream("mqtt", payload="256 B", messages='"${n}"',
                                                                   rate="100 msg/s") + """\
[workload.mqtt]
qos = 1
[sweep]
n = [1500, 200]
"""
    path = tmp_path / "s.toml"
    path.write_text(body)
    res = tmp_path / "res"
    proc = subprocess.Popen(run_argv(path, res), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # find the broker of the first run (a mosquitto whose config lives in this test's results) and kill it
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"mosquitto") and any(str(res).encode() in c for c in cmd):
                victim = int(pid)
        time.sleep(0.2)
    assert victim is not None, "mosquitto of the first run not found"
    time.sleep(3)  # in the middle of the 15 s stream
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, out + err  # a failed run: exit 1, the sweep completed
    rows = fetch(res, "select status, failure_reason from runs order by run_index")
    assert rows[0]["status"] == "failed" and "mosquitto" in rows[0]["failure_reason"] \
        and "died" in rows[0]["failure_reason"], rows[0]
    assert rows[1]["status"] == "ok", rows[1]


RATE_LIMITED = [
    pytest.param("zenoh", "", marks=needs("zenoh"), id="zenoh"),
    pytest.param("zmq", "", marks=needs("zmq"), id="zmq"),
    pytest.param("dds", '[workload.dds]\nreliability = "reliable"', marks=needs("dds"), id="dds-reliable"),
]


@pytest.mark.parametrize("protocol,knobs", RATE_LIMITED)
def test_brokerless_throughput_close_to_the_link_rate(tmp_path, protocol, knobs):
    body = """
[scenario]
name = "rate"
timeout = "60 s"
""" + toml_hosts("a", "b") + f"""\
[[link]]
between = ["a", "b"]
rate = "10 Mbit/s"
[workload]
pattern = "bulk"
protocol = "{protocol}"
from = "a"
to = "b"
payload = "1 KiB"
duration = "4 s"
{knobs}
"""
    (r,) = run_scenario(tmp_path, body)
    assert r["status"] == "ok", r["failure_reason"]
    mbps = r["throughput_bps"] / 1e6
    # application goodput below the 10 Mbit/s line rate by the protocol's and IP's headers
    assert 7.5 <= mbps <= 10.05, mbps


@needs("mqtt")
@pytest.mark.skipif(find_binary("roughnet-wire") is None, reason="roughnet-wire is not built (make build)")
def test_mqtt_nodelay_takes_nagle_off_the_publishers_connection(tmp_path):
    """100 ms each way (no jitter, no loss) and a message every 50 ms: with Nagle on (rumqttc's default) a
    small publication waits for the ACK of the one before, a 200 ms round trip, so the median is about 100 ms
    above the path's; with `nodelay = true` it is the path's 100 ms (docs/scenarios.md, networks: Starlink
    44 -> 23 ms, GEO 355 -> 304 ms). Nothing here is random: the margin is the whole round trip."""
    p50 = {}
    for nodelay in ("false", "true"):
        knobs = f"[workload.mqtt]\nqos = 1\nnodelay = {nodelay}"
        body = stream("mqtt", knobs, messages=120, rate="20 msg/s", services=MOSQUITTO, payload="256 B",
                      link='engine = "wire"\ndelay = "100 ms"')
        (tmp_path / nodelay).mkdir()
        (r,) = run_scenario(tmp_path / nodelay, body)
        assert r["status"] == "ok" and r["lost"] == 0, (r["failure_reason"], r["lost"])
        p50[nodelay] = r["lat_p50_us"] / 1000
    assert p50["true"] < 115, p50  # the path's 100 ms and the broker's hop
    assert p50["false"] > p50["true"] + 50, p50  # Nagle: the next ACK's wait
