"""scenarios/ros2-camera-wifi.toml at CI size: ROS 2 topics with camera-sized messages over the wire engine's
lossy, jittery `wifi-noisy` link, rclpy nodes (protocol ros2, Fast DDS) and roughnet-agent's dds driver in
ROS 2 mode (Cyclone) (root, namespaces, roughnet-agent with dds, roughnet-wire, the ROS 2 wheels).

The property ROS users report (eclipse-cyclonedds/cyclonedds#484, ros2/rmw_cyclonedds#328): a
best-effort reader needs every fragment of a sample, so over the same bursty loss it loses a large,
fragmented message far more often than a small one (both stacks); a reliable reader (keep all) gets every
message, and the repaired ones arrive later than anything best effort delivered (Cyclone).

The scenario file is the committed one with whole lines replaced (fewer, faster messages, two sizes, keep
all for the reliable guarantee, five of the combinations), so a change to its link or QoS shows up here.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from cli_run import RUNS, fetch, needs, roughnet_run
from roughnet.binaries import find_binary
from roughnet.ros2 import launch

pytestmark = [
    needs("dds"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)"),
    pytest.mark.skipif(bool(launch.missing()), reason="the ROS 2 wheels are not installed (make extras)"),
    pytest.mark.skipif(find_binary("roughnet-wire") is None, reason="roughnet-wire is not built (make build)"),
]

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "ros2-camera-wifi.toml"


def ci_copy(tmp_path: Path) -> Path:
    """ros2-camera-wifi.toml cut to 1 KB and 100 KB, 100 messages at 20 msg/s, keep all, five runs: best effort
    with both sizes and both stacks, and Cyclone reliable at 100 KB (the rclpy nodes' reliable 100 KB stream is
    left out: over this link Fast DDS's repairs flood the link's queue and not every message arrives, see
    docs/scenarios.md)."""
    text = SCENARIO.read_text()
    for old, new in (('messages = 200', 'messages = 100'), ('rate = "10 msg/s"', 'rate = "20 msg/s"'),
                     ('payload = ["1 KB", "100 KB", "400 KB"]', 'payload = ["1 KB", "100 KB"]'),
                     ('history_depth = 10', 'history_depth = 0'), ('[report]', EXCLUDE + '[report]')):
        hits = len(re.findall(rf"^{re.escape(old)}$", text, re.M))
        assert hits >= 1, f"ros2-camera-wifi.toml has no line {old!r}"
        text = re.sub(rf"^{re.escape(old)}$", lambda _m, new=new: new, text, flags=re.M)
    path = tmp_path / "ros2-camera-wifi.toml"
    path.write_text(text)
    return path


EXCLUDE = """[[sweep.exclude]]
reliability = "reliable"
payload = "1 KB"

[[sweep.exclude]]
protocol = "ros2"
reliability = "reliable"

"""


def loss(r: dict) -> float:
    return r["lost"] / (r["lost"] + r["received"])


def test_best_effort_loses_fragmented_samples_and_reliable_delivers_them_later(tmp_path):
    results = tmp_path / "res"
    roughnet_run(ci_copy(tmp_path), results, timeout=240)
    rows = fetch(results, RUNS)
    assert len(rows) == 5, [r["params"] for r in rows]
    by = {}
    for r in rows:
        assert r["status"] == "ok", (r["params"], r["failure_reason"])
        p = json.loads(r["params"])
        by[(p["protocol"], p["reliability"], p["payload"])] = r
    # the link dropped frames wherever fragmented samples crossed it (the wifi-noisy profile's bursty loss)
    for key, r in by.items():
        if key[2] == "100 KB":
            assert (r["link_drops_loss"] or 0) > 0, (key, r["link_drops"])
    # a 100 KB sample is about 70 frames (Fast DDS: two UDP datagrams, IP-fragmented; Cyclone: 1344 B
    # fragments): a best-effort reader drops the sample when any one of them is lost
    for proto in ("ros2", "dds"):
        small, large = by[(proto, "best_effort", "1 KB")], by[(proto, "best_effort", "100 KB")]
        assert loss(large) > 0.10 and loss(large) > 2 * loss(small), (proto, loss(small), loss(large))
    # reliable (keep all) repairs them: every message arrives, and the repaired ones (about half of them, as many
    # as best effort lost) wait for a NACK and a retransmission, so the 90th percentile is later than best
    # effort's, whose samples all crossed without a loss (a percentile, not the maximum: one stall of a busy
    # machine made a best-effort maximum 312 ms)
    rel, be = by[("dds", "reliable", "100 KB")], by[("dds", "best_effort", "100 KB")]
    assert rel["lost"] == 0 and rel["received"] == 100, (rel["received"], rel["lost"])
    assert rel["lat_p90_us"] > be["lat_p90_us"], (rel["lat_p90_us"], be["lat_p90_us"])
