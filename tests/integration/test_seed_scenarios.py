"""Every scenario in scenarios/ runs at a small size, and its trend holds (root, agent, brokers).

Each test shrinks a committed scenario file by replacing a few whole lines (fewer messages,
fewer sweep values), runs it with `roughnet run`, and asserts the seed experiment's trend as a
property. The scenario files themselves stay full size for users.
"""

from __future__ import annotations

import json

import os
import re
import statistics
from pathlib import Path

import pytest

from cli_run import RUNS, fetch, needs, roughnet_run, run_all_ok

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)")


def shrink(name: str, replace: dict[str, str], tmp_path: Path) -> Path:
    """A copy of scenarios/<name>.toml with lines replaced: {"sweep.loss": 'loss = [...]'}.

    The key names a table ([sweep], [workload], [scenario], ...) and a key in it; the
    line `key = ...` inside that table is replaced by the given line.
    """
    lines = (SCENARIOS / f"{name}.toml").read_text().splitlines()
    for dotted, new_line in replace.items():
        table, key = dotted.rsplit(".", 1)
        section, hits = None, 0
        for i, line in enumerate(lines):
            header = re.match(r"^\[+([^\]]+)\]+\s*$", line)
            if header:
                section = header.group(1).strip()
                continue
            if section == table and re.match(rf"^{re.escape(key)}\s*=", line):
                lines[i] = new_line
                hits += 1
                break
        assert hits == 1, f"{name}.toml has no line '{key} = ...' in [{table}]"
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(path: Path, tmp_path: Path, timeout: float = 1500) -> list[dict]:
    return run_all_ok(path, tmp_path / "res", timeout)


def small_s1_udp(text: str, duration: str = "2 s") -> str:
    """tcp-udp-link.toml cut to its UDP streams on the 5 and 10 Mbit/s links: 2 sizes x 3 intervals x 2 links.

    The multi-line `link` and `send` axes are rewritten and the [[sweep.exclude]] tables dropped (they
    name values the cut axes no longer have), so whole-line `shrink` cannot do it."""
    text = re.sub(r"link = \[\n(.*\n)*?\]\n", 'link = [\n  { name = "5M-2ms", rate = "5 Mbit/s", delay = "2 ms" },\n'
                  '  { name = "10M-1ms", rate = "10 Mbit/s", delay = "1 ms" },\n]\n', text, count=1)
    text = re.sub(r"send = \[\n(.*\n)*?\]\n", lambda m: "send = [\n" + "".join(
        line + "\n" for line in m.group(0).splitlines() if "stream" in line) + "]\n", text, count=1)
    for old, new in (('protocol = ["tcp", "udp"]', 'protocol = ["udp"]'), ('size = ["512 B", "1024 B", "1436 B"]',
                     'size = ["1024 B", "1436 B"]'), ('duration = "3 s"', f'duration = "{duration}"')):
        assert old in text, old
        text = text.replace(old, new)
    report = text[text.index("\n[report]"):].replace('lines = "mss"', 'lines = "size"')
    text = text.split("[[sweep.exclude]]")[0] + report
    # the TCP knobs stay as axes of one value each; no run uses [workload.tcp] any more
    text = re.sub(r"\[workload\.tcp\]\n(.*\n)*?\n", "", text, count=1)
    for key in ("mss", "buffer"):
        text = re.sub(rf"^{key} = .*\n", "", text, flags=re.M)
    return text + "\n"


def param(row: dict, key: str):
    import json

    return json.loads(row["params"])[key]


def test_quickstart_small(tmp_path):
    path = shrink("quickstart", {"workload.messages": "messages = 300", "sweep.rate": 'rate = ["100 Mbit/s"]'}, tmp_path)
    rows = run(path, tmp_path)
    assert len(rows) == 8
    # UDP loses about the link's loss; TCP loses nothing
    for r in rows:
        if param(r, "protocol") == "tcp":
            assert r["lost"] == 0
        elif param(r, "loss") == "0%":
            assert r["lost"] == 0


# Why a run over TCP at the top drop rate may end short. Every frame on the medium is dropped with
# p = 0.25, so an RTO retransmission and the ACK that answers it both get through with p = 0.75² = 0.56,
# and the retransmission timer doubles after each failure. A capture of one 31 s run with a 25 s stall (MQTT
# at 25 %, 16 repeats with `capture = true`): car1's retransmission of one segment reached the broker at +0, +1.7 and
# +5.1 s and each ACK was dropped, the one at +11.7 s was dropped, the one at +25 s and its ACK got through.
# Of 28 such runs, one stalled past the 240 s timeout (90 of 150 messages through, the sender's host 11
# RTOs) and two took 31 and 75 s instead of about 5; once in CI mosquitto closed a subscriber whose
# keep-alive (1.5 x 30 s) ran out behind such a stall, and once the subscriber's own client (rumqttc) gave
# up: its PINGREQ, sent after 30 s without traffic, was not answered by the next keep-alive tick because the
# broker's connection to it was in RTO backoff (the broker's host counted 18 TCP timeouts; "Mqtt state: Last
# pingreq isn't acked" after 17 of 150 messages, none received in the 40 s before). roughnet records both as
# they are: a run failed incomplete with the connection's error and every figure counted until then (issue 26:
# the agents' partial results), or one incomplete at its timeout. They are the network's result, not the
# tool's, so the test accepts them there and only there (the error is one of these and some host counted an
# RTO timeout), and asks for the partial figures.
STALLED_FAILURE = re.compile(r"connection closed by peer|connection reset|broken pipe|last pingreq isn't acked", re.I)


def tcp_timeouts(r: dict) -> int:
    tcp = json.loads(r["tcp_counters"]) if isinstance(r["tcp_counters"], str) else (r["tcp_counters"] or {})
    return sum(c.get("TCPTimeouts", 0) for c in tcp.values())


def stalled_by_tcp_backoff(r: dict) -> bool:
    """``r`` ended short the way a TCP connection stalled in retransmission backoff ends a run."""
    if r["status"] == "failed":
        reason = r["failure_reason"] or ""
        return (reason.startswith("incomplete: ") and bool(STALLED_FAILURE.search(reason))
                and r["received"] is not None and r["sent"] is not None and tcp_timeouts(r) > 0)
    reasons = json.loads(r["validity_reasons"]) if isinstance(r["validity_reasons"], str) else r["validity_reasons"]
    return (r["status"] == "ok" and any("incomplete at timeout" in x for x in reasons or []) and tcp_timeouts(r) > 0)


@pytest.mark.slowlink(seconds=60)  # TCP back-off at 25 % drop: 58-148 s; 26 s of CPU in 73 s
@needs("zenoh", "mqtt", "kafka")
def test_v2v_loss_latency_does_not_fall_as_drop_rate_rises(tmp_path):
    path = shrink("v2v-loss", {
        "workload.messages": "messages = 150",
        "workload.warmup": "warmup = 10",
        # the trend's two ends (the 10 % point of the shipped sweep proved nothing the ends do not: reliable
        # delivery over 10 % drop is test_protocol_runs' and test_capture_v2v's)
        "sweep.loss": 'loss = ["0%", "25%"]',
        "sweep.payload": 'payload = ["10 KB"]',
        "scenario.timeout": 'timeout = "240 s"',
    }, tmp_path)
    results = tmp_path / "res"
    out = roughnet_run(path, results, timeout=1500, report=True, exit_codes=(0, 1))
    rows = fetch(results, RUNS)
    assert len(rows) == 6
    stalled = [r for r in rows if param(r, "loss") == "25%" and param(r, "protocol") in ("mqtt", "kafka")
               and stalled_by_tcp_backoff(r)]
    assert out.returncode == (1 if any(r["status"] == "failed" for r in stalled) else 0), out.stdout[-3000:]
    for r in rows:
        assert r["status"] == "ok" or r in stalled, (r["params"], r["failure_reason"])
    for proto in ("zenoh", "mqtt", "kafka"):
        by_loss = {param(r, "loss"): r for r in rows if param(r, "protocol") == proto and r not in stalled}
        # Reliable settings: nothing lost, whatever the drop rate. (Zenoh at 25 % once lost some:
        # its sender closed after a fixed 3 s wait for the receivers, or sooner when a liveliness
        # query over the lossy link went unanswered; it now follows their tokens and waits as long
        # as the run allows, as Kafka's flush does.) The one exception is zenoh's own: it closes a
        # transport whose put stays blocked past `wait_before_close`, discarding its queue (at full
        # size once or twice per 150 s run at 25 %); the sender counts those.
        for loss, r in by_loss.items():
            extra = r.get("metrics_extra")
            extra = (json.loads(extra) if isinstance(extra, str) else extra) or {}
            if proto == "zenoh" and extra.get("sender_transport_drops"):
                # What zenoh discarded with its queue can be the whole run: once in CI at 25 % the transport
                # closed 8 s in with all 150 messages queued behind a blocked put, and only the end marker,
                # sent after it reopened, arrived (received 0, the sender counting the drop).
                continue
            assert r["lost"] == 0, (proto, loss, r["lost"], r["validity_reasons"], extra.get("sender_transport_drops"))
        if "25%" not in by_loss or not by_loss["25%"]["received"]:  # stalled (above), or zenoh's discarded queue
            continue
        # the S0 trend, with slack for noise at the low end: the mean at 25 % is not below the mean at 0 %
        assert by_loss["25%"]["lat_mean_us"] >= by_loss["0%"]["lat_mean_us"], proto
        assert by_loss["25%"]["link_drops"] > by_loss["0%"]["link_drops"], proto


@needs("zmq", "dds")
def test_zmq_dds_rtt_round_trip_grows_with_message_size(tmp_path):
    import json

    path = shrink("zmq-dds-rtt", {"workload.messages": "messages = 120", "workload.step": 'step = "8 KB"',
                                  "sweep.interval": 'interval = ["10 ms"]'}, tmp_path)
    rows = run(path, tmp_path)
    assert len(rows) == 2
    for r in rows:
        points = json.loads(r["points"]) if isinstance(r["points"], str) else r["points"]
        assert len(points) >= 100, len(points)
        # The lower envelope: a stall of a busy machine (or DDS's first reliable samples) only adds delay, and
        # round trips are measured from the intended send time, so a backlog inflates whole stretches of
        # iterations; the fastest of many neighbours is what the size costs. DDS's start can take 20
        # iterations here, so the small end is the first 40 (1-313 KB) against the last 20 (801-953 KB).
        small = min(rtt for size, rtt in points[:40])
        large = min(rtt for size, rtt in points[-20:])
        assert large > 1.5 * small, (param(r, "protocol"), small, large)


UDP_IP_ETH = 8 + 20 + 14  # bytes of headers per UDP datagram on the link (the rate counts whole frames)


def test_tcp_udp_link_udp_streams_grow_with_size_until_the_link_saturates(tmp_path):
    """SEEDS S1's UDP part: packets of 1024 and 1436 B every 4 ms, 2 ms and 100 us on the 5 and 10 Mbit/s links."""
    import json

    path = tmp_path / "tcp-udp-link.toml"
    path.write_text(small_s1_udp((SCENARIOS / "tcp-udp-link.toml").read_text()))
    rows = run(path, tmp_path, timeout=600)
    assert len(rows) == 12
    got: dict[tuple[str, str, int], dict] = {}
    for r in rows:
        spec = json.loads(r["run"])
        rate_bps = spec["links"][0]["forward"]["rate_bps"]
        size = spec["workload"]["payload_bytes"]
        offered_bps = spec["workload"]["rate_msgs_per_s"] * (size + UDP_IP_ETH) * 8
        eff = r["throughput_bps"] / rate_bps
        # Efficiency counts application bytes: at most payload / frame of the link, plus noise.
        assert 0 < eff <= size / (size + UDP_IP_ETH) * 1.03, (param(r, "link"), param(r, "send"), size, eff)
        got[(param(r, "link"), param(r, "send"), size)] = {"tp": r["throughput_bps"], "lost": r["lost"],
                                                           "load": offered_bps / rate_bps, "eff": eff}
    for link in ("5M-2ms", "10M-1ms"):
        for send in ("every 4 ms", "every 2 ms", "every 100 us"):
            small, large = got[(link, send, 1024)], got[(link, send, 1436)]
            ratio = large["tp"] / small["tp"]
            if large["load"] < 0.95:  # both below the link's rate: everything arrives, throughput grows with size
                assert small["lost"] == 0 and large["lost"] == 0, (link, send)
                assert 0.9 * 1436 / 1024 <= ratio <= 1.1 * 1436 / 1024, (link, send, ratio)
            if small["load"] > 1.5:  # both far above it: the link saturates, whatever the size
                assert small["lost"] > 0 and large["lost"] > 0, (link, send)
                assert small["eff"] > 0.8 and large["eff"] > 0.8, (link, send, small["eff"], large["eff"])
                assert ratio < 1.15, (link, send, ratio)
        for size in (1024, 1436):  # a shorter interval never gives less
            tps = [got[(link, send, size)]["tp"] for send in ("every 4 ms", "every 2 ms", "every 100 us")]
            assert all(b >= 0.98 * a for a, b in zip(tps, tps[1:])), (link, size, tps)
