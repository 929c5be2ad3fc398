"""The dds driver's `batch` knob, agent against agent inside one scratch namespace (loopback).

Properties: with batching (Cyclone's writer batching, RTPS messages up to `batch` bytes) every
message still arrives, and the namespace sends far fewer UDP datagrams (the kernel's per-namespace
`Udp: OutDatagrams`) than without; nothing waits in a batch at the end (a best-effort stream
shorter than one batch arrives whole, end marker included) or for a round trip (ping requests and
replies are flushed: every ping is answered).  Root and network namespaces needed (skips otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from roughnet.binaries import agent_version, find_binary

AGENT = find_binary("roughnet-agent")
pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(AGENT is None, reason="roughnet-agent is not built (make build)"),
    pytest.mark.skipif(AGENT is not None and "dds" not in agent_version(str(AGENT)).get("protocols", []),
                       reason="this roughnet-agent build does not speak dds"),
]

PORT = 7399  # only names the receiver; DDS picks its own ports


@pytest.fixture
def ns():
    name = f"rn-t{os.getpid()}-ddsb"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=10)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, capture_output=True, timeout=10)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True, timeout=10)


def out_datagrams(ns: str) -> int:
    text = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"], check=True, capture_output=True,
                          text=True, timeout=10).stdout
    head, values = [ln.split()[1:] for ln in text.splitlines() if ln.startswith("Udp:")][:2]
    return int(dict(zip(head, values))["OutDatagrams"])


def result(text: str) -> dict:
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    return next(x for x in lines if x.get("type") in ("result", "error"))


def pair(ns: str, pattern: str, listener: dict, connector: dict, options: dict) -> tuple[dict, dict]:
    """Receiver/ponger, then sender/pinger against it, in ``ns``; (listener result, connector result)."""
    roles = ("receiver", "sender") if pattern == "stream" else ("ponger", "pinger")
    base = {"v": 1, "protocol": "dds", "pattern": pattern, "report_interval_ms": 0, "timeout_ms": 60000,
            "topic": f"roughnet/batch{os.getpid()}", "options": options}
    exe = ["ip", "netns", "exec", ns, str(AGENT), "run", "--config-json"]
    lcfg = base | {"role": roles[0], "listen": f"127.0.0.1:{PORT}"} | listener
    lp = subprocess.Popen([*exe, json.dumps(lcfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(lp.stdout.readline())
        assert ready.get("type") == "ready", ready
        ccfg = base | {"role": roles[1], "peers": [ready["listen"]]} | connector
        cp = subprocess.run([*exe, json.dumps(ccfg)], capture_output=True, text=True, timeout=120, check=False)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        out, err = lp.communicate(timeout=120)
    finally:
        if lp.poll() is None:
            lp.kill()
            lp.wait(timeout=10)
    assert lp.returncode == 0, out + err
    return result(out), result(cp.stdout)


N = 4000


def test_batching_delivers_everything_in_far_fewer_datagrams(ns):
    sent: dict[str, int] = {}
    for label, options in (("off", {"reliability": "reliable"}), ("on", {"reliability": "reliable", "batch": 8192})):
        before = out_datagrams(ns)
        rx, tx = pair(ns, "stream", {"payload_bytes": 200, "messages": N}, {"payload_bytes": 200, "messages": N},
                      options)
        sent[label] = out_datagrams(ns) - before
        assert rx["type"] == "result" and tx["type"] == "result", (rx, tx)
        assert rx["received"] == N and rx["lost"] == 0 and rx["complete"], (label, rx)
    # without batching every sample is at least one datagram; with 8 KiB messages about 35 samples of
    # 200 B share one (discovery and acknowledgements add the same handful to both)
    assert sent["off"] >= N, sent
    assert sent["on"] < sent["off"] / 4, sent


def test_a_stream_shorter_than_one_batch_is_flushed_at_the_end(ns):
    # 20 x 200 B, best effort (nothing would ever retransmit a sample stuck in the batch), keep-all
    # history: with best effort's default KEEP_LAST 1 the samples of one batch, arriving together,
    # overwrite each other in the reader before it takes them (that is DDS, not a loss on the wire)
    rx, tx = pair(ns, "stream", {"payload_bytes": 200, "messages": 20},
                  {"payload_bytes": 200, "messages": 20, "rate_msgs_per_s": 200.0},
                  {"reliability": "best_effort", "history_depth": 0, "batch": 8192})
    assert tx["sent"] == 20, tx
    assert rx["received"] == 20 and rx["end_reason"] == "complete", rx


def test_ping_requests_and_replies_are_not_held_in_a_batch(ns):
    rx, tx = pair(ns, "ping", {"payload_bytes": 200, "messages": 50}, {"payload_bytes": 200, "messages": 50},
                  {"reliability": "best_effort", "batch": 8192})
    assert tx["received"] == 50 and tx["lost"] == 0, tx
    assert rx["received"] == 50, rx
