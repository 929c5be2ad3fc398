"""SEEDS S0 experiment 2 at CI size, and packet capture end to end (root, agent, brokers).

scenarios/v2v-payload.toml is shrunk by replacing whole lines (fewer messages, three payloads,
one protocol per sweep) and run with `roughnet run`. Asserted as properties: nothing is lost,
the packet analysis of the captures sees TCP retransmissions at 10 % drop (and agrees with the
kernel's counters where the protocol is plain TCP), segments per message grow with the payload,
the report has its payload and packet sections, and for plain TCP the fastest delivery of the
largest payload is slower than the smallest's (why not the median, and not for the brokered
protocols: see below). Each protocol is skipped, with the reason, while roughnet-agent is built
without it; plain TCP runs meanwhile.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from cli_run import PROTOCOLS, run_all_ok

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)")


def _blocks(lines: list[str]) -> list[tuple[str | None, list[str]]]:
    """The file as (table name, lines) blocks; a block starts at its header line."""
    blocks: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in lines:
        header = re.match(r"^\[+([^\]]+)\]+\s*$", line)
        if header:
            blocks.append((header.group(1).strip(), []))
        blocks[-1][1].append(line)
    return blocks


def shrink(replace: dict[str, str], tmp_path: Path, protocol: str) -> Path:
    """scenarios/v2v-payload.toml for one protocol: the line `key = ...` of table [t] replaced for each
    "t.key", and the knob tables and [[service]] entries of the other protocols removed (the spec refuses
    them when no run uses them)."""
    services = {"mqtt": "mosquitto", "kafka": "kafka"}
    out: list[str] = []
    for table, block in _blocks((REPO / "scenarios" / "v2v-payload.toml").read_text().splitlines()):
        if table and table.startswith("workload.") and table != f"workload.{protocol}":
            continue
        if table == "service" and not any(line.strip() == f'kind = "{services.get(protocol)}"' for line in block):
            continue
        for i, line in enumerate(block):
            for dotted, new_line in replace.items():
                t, key = dotted.rsplit(".", 1)
                if t == table and re.match(rf"^{re.escape(key)}\s*=", line):
                    block[i] = new_line
                    replace = {k: v for k, v in replace.items() if k != dotted}
                    break
        out.extend(block)
    assert not replace, f"v2v-payload.toml has no lines for {sorted(replace)}"
    path = tmp_path / "v2v-payload.toml"
    path.write_text("\n".join(out) + "\n")
    return path


def run_sweep(path: Path, tmp_path: Path, timeout: float = 900) -> tuple[Path, list[dict]]:
    res = tmp_path / "res"
    rows = run_all_ok(path, res, timeout)
    for r in rows:
        r["extra"] = json.loads(r["metrics_extra"] or "{}")
        r["payload"] = json.loads(r["params"])["payload"]
    return res, rows


PAYLOADS = ["1 KB", "64 KB", "512 KB"]


@pytest.mark.parametrize("protocol", ["tcp", "mqtt", "kafka", "zenoh"])
def test_v2v_payload_small(tmp_path, protocol):
    if protocol not in PROTOCOLS:
        pytest.skip(f"roughnet-agent built without {protocol} (make build)")
    path = shrink({
        # 30 messages at 10 msg/s: 3 s a run. Enough for every assertion below: a 512 KB message is >= 360
        # segments, so 30 of them are 10,800 at 10 % drop (no retransmission at all: probability 0.9^10800);
        # lost == 0 and the segment counts hold for any number of messages
        "workload.messages": "messages = 30",
        "workload.warmup": "warmup = 5",
        "sweep.protocol": f'protocol = ["{protocol}"]',
        "sweep.payload": "payload = [" + ", ".join(f'"{p}"' for p in PAYLOADS) + "]",
        "scenario.timeout": 'timeout = "240 s"',
    }, tmp_path, protocol)
    res, rows = run_sweep(path, tmp_path)
    assert [r["payload"] for r in rows] == PAYLOADS
    for r in rows:
        assert r["lost"] == 0, (protocol, r["payload"])  # reliable settings lose nothing at 10 % drop
        x = r["extra"]
        assert x["pcap_capture_drops"] == 0
        assert x["pcap_tcp_segments"] > 0
        # a message is at least ceil(payload / MSS) segments from the sender (1448 B with timestamps)
        kb = int(r["payload"].split()[0])
        assert x["pcap_segments_per_message"] >= (kb * 1000 // 1448), (r["payload"], x)
        run_dir = res / "runs" / r["sweep_id"] / r["run_id"]
        assert sorted(p.name for p in run_dir.glob("capture-*.pcap")) == [
            "capture-0-car1.pcap", "capture-0-car2.pcap", "capture-0-rsu.pcap"]
    # 10 % drop: the captures see retransmissions (at least in the runs that carry enough segments)
    assert rows[-1]["extra"]["pcap_tcp_retrans"] > 0
    assert sum(r["extra"]["pcap_tcp_retrans"] for r in rows) > 0
    if protocol == "tcp":
        for r in rows:  # the pcap count and the kernel's RetransSegs are independent; they agree up to the
            # retransmitted SYN/FIN/bare-ACK probes the kernel counts and the pcap (data segments only) does not;
            # the other way the pcap once counted one more (CI, 1 KB: kernel 6, pcap 7), not explained: a likely
            # cause is a retransmission after the run read the counters (the capture runs until teardown)
            diff = r["tcp_retrans_segs"] - r["extra"]["pcap_tcp_retrans"]
            assert -2 <= diff <= max(3, r["tcp_retrans_segs"] // 20), (r["payload"], r["tcp_retrans_segs"],
                                                                       r["extra"]["pcap_tcp_retrans"])
    # Latency against payload. Asserted for plain TCP only, on the fastest delivery of the largest
    # against the smallest payload: a 512 KB message is at least 360 segments, so even its luckiest
    # delivery carries 360 serialisations that a 1 KB message does not. NOT asserted on the median or
    # the mean: a lost small message waits for a retransmission timeout (no later data triggers a
    # fast retransmit) and the messages behind it wait too, while large messages recover with SACK
    # inside the message. Measured: 1 KB MQTT over two lossy hops had p50 100 ms against 9 ms for
    # 512 KB, and once plain TCP too (1 KB p50 8.2 ms with 5 timeouts, 512 KB p50 3.8 ms; the minima
    # were 0.16 ms and 2.56 ms). The report shows the trend as measured.
    if protocol == "tcp":
        fastest = [r["lat_min_us"] for r in rows]
        assert fastest[-1] > fastest[0], (protocol, fastest, [r["lat_p50_us"] for r in rows])
    html = (res / "reports" / rows[0]["sweep_id"] / "index.html").read_text()
    assert "Packet analysis" in html
    assert "Best payload range" in html
