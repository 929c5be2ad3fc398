"""A run over a capacity trace (`capacity_trace`, imported with `roughnet trace import csv`): the wire serialises
by the trace's delivery opportunities, outages included (root, agent, wire).

The trace: 8 Mbit/s for two seconds, nothing for one, 8 for two more, repeating (5 s). A UDP stream offered at
9.6 Mbit/s for 10 s (two whole periods, whatever the phase) gets the trace's mean, 6.4 Mbit/s of frames, not
the 8 Mbit/s a constant rate of the trace's peak would give. The wire's schedule is deterministic (no random
draw), so the figure is a property of the trace: the bound is the agent's headers and the window's edges.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import fetch, roughnet_run

from roughnet.binaries import find_binary

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root and network namespaces (run as root)"),
    pytest.mark.skipif(find_binary("roughnet-agent") is None, reason="roughnet-agent is not built (make build)"),
]

SCENARIO = """
[scenario]
name = "capacity-trace"
timeout = "60 s"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
between = ["a", "b"]
delay = "10 ms"
[link.forward]
capacity_trace = "drive.mahimahi"
[workload]
pattern = "stream"
protocol = "udp"
from = "a"
to = "b"
payload = "1200 B"
messages = 10000
rate = "1000 msg/s"
"""


def test_a_run_gets_the_traces_mean_with_its_outage(tmp_path: Path) -> None:
    (tmp_path / "drive.csv").write_text("time_s,mbps\n0,8\n1,8\n2,0\n3,8\n4,8\n")
    imp = subprocess.run([sys.executable, "-m", "roughnet.cli", "trace", "import", "csv", "drive.csv", "--out",
                          "drive.mahimahi"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert imp.returncode == 0, imp.stderr
    path = tmp_path / "ct.toml"
    path.write_text(SCENARIO)
    res = tmp_path / "res"
    roughnet_run(path, res, timeout=180)
    (row,) = fetch(res, "select status, throughput_bps, lost, received from runs")
    assert row["status"] == "ok", row
    mbps = row["throughput_bps"] / 1e6
    # 6.4 Mbit/s of 1242-byte frames carry 6.33 of the agent's 1228 bytes a datagram (payload, UDP, IP)
    assert 5.9 < mbps < 6.8, mbps  # a constant 8 Mbit/s would give 7.9
    assert row["lost"] > 0.25 * (row["lost"] + row["received"])  # 9.6 offered, 6.4 carried: a third dropped
